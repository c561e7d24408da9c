"""In a real browser, on the demo data a new user meets: axe-core finds no text too faint to
read and no control without a name on any kind of page, in its plain and its opened states.

LOOPBOARD_SCREENSHOTS=folder saves a screenshot of each page there, to look at."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect

from runs.models import ApiKey, Membership, Project, Run
from runs.services import channels
from tests.e2e.accessibility import assert_accessible, violations

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(live_server, page, background_worker, settings):
    """The demo project as `make run` seeds it, with an API key and an alert channel, and
    its owner logged in."""
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    call_command("seed_demo")
    for thread in background_worker:
        thread.join(timeout=120)
    project = Project.objects.get(slug="demo")
    user = get_user_model().objects.create_user("nina", password="pw-nina-123", is_staff=True)
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    ApiKey.issue(project, "ci", scope=ApiKey.Scope.INGEST)
    data = channels.ChannelData(name="ops", kind="webhook", url="http://127.0.0.1:9/hook")
    channels.create_channel(project, data)
    channels.create_channel(project, channels.ChannelData(name="off", kind="webhook", url="http://127.0.0.1:9/x", enabled=False))  # fmt: skip
    page.goto(live_server.url + "/accounts/login/")
    assert_accessible(page, "login page")
    page.fill("input[name=username]", "nina")
    page.fill("input[name=password]", "pw-nina-123")
    page.click("button[type=submit], input[type=submit]")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    return project


def look(page, name: str, found: dict[str, list[str]] | None = None) -> None:
    """Check the page with axe-core, and save a screenshot when asked to. With `found`, the
    violations are gathered there (to report every page's at once) instead of failing."""
    folder = os.environ.get("LOOPBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"a11y-{name}.png"), full_page=True)
    if found is None:
        assert_accessible(page, name)
    elif problems := violations(page):
        found[name] = problems


def test_every_kind_of_page_passes_axe(live_server, page, demo):
    stuck = Run.objects.filter(project=demo, verdict="stop").order_by("pk").first()
    other = Run.objects.filter(project=demo).exclude(pk=stuck.pk).order_by("pk").first()
    issue = stuck.findings.exclude(issue=None).first().issue_id
    pages = {
        "runs": "/",
        "runs-flagged": "/?verdict=stop",
        "overview": "/overview/",
        "issues": "/issues/",
        "issue": f"/issues/{issue}/",
        "run": stuck.get_absolute_url(),
        "step": f"/runs/{stuck.pk}/steps/1/",
        "tree": f"/runs/{stuck.pk}/tree/",
        "ledger": f"/runs/{stuck.pk}/ledger/",
        "time": f"/runs/{stuck.pk}/time/",
        "find": f"/runs/{stuck.pk}/find/?q=a",
        "storage": f"/projects/{demo.slug}/storage/",
        "compare-pick": f"/runs/{stuck.pk}/compare/",
        "compare": f"/runs/{stuck.pk}/compare/{other.pk}/",
        "upload": "/upload/",
        "tuning-index": "/tuning/",
        "tuning": f"/projects/{demo.slug}/tuning/",
        "settings": f"/projects/{demo.slug}/settings/",
        "deliveries": f"/projects/{demo.slug}/settings/deliveries/",
    }
    found: dict[str, list[str]] = {}
    for name, path in pages.items():
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        page.wait_for_load_state("networkidle")
        look(page, name, found)

    # The run page opened up: a finding picked, a band unfolded, a step's diff shown.
    page.goto(live_server.url + stuck.get_absolute_url())
    page.locator(".finding").first.click()
    folds = page.locator(".fold__unfold")
    expect(folds.first).to_be_visible()
    before = folds.count()
    folds.first.click()
    expect(folds).to_have_count(before - 1)  # the band was swapped for its steps
    page.get_by_role("link", name="details & diff").nth(1).click()
    expect(page.locator(".detail").first).to_be_visible()
    look(page, "run-opened", found)
    assert found == {}, "\n".join(
        f"{name}: {line}" for name, lines in found.items() for line in lines
    )


def test_the_settings_buttons_can_be_seen(live_server, page, demo):
    """Revoke, Send test, Disable, Enable and Delete are links in look: readable on the card."""
    page.goto(f"{live_server.url}/projects/{demo.slug}/settings/")
    for name in ["Revoke", "Send test", "Disable", "Enable", "Delete"]:
        button = page.get_by_role("button", name=name, exact=True).first
        expect(button).to_be_visible()
        color = button.evaluate("b => getComputedStyle(b).color")
        assert color != "rgb(255, 255, 255)", name
    look(page, "settings-buttons")


def test_a_live_run_page_passes_axe(live_server, page, demo):
    key = ApiKey.issue(demo, "agent", scope=ApiKey.Scope.INGEST)[1]
    api = httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {key}"})
    opened = api.post("/api/live/runs", json={"external_id": "s-1", "name": "live agent"})
    assert opened.status_code == 200, opened.text
    step = {
        "tool": "Bash",
        "args": {"command": "make test"},
        "result": "Error 2",
        "status": "error",
    }
    for n in range(6):
        answer = api.post("/api/live/runs/s-1/steps", json={"steps": [{"id": f"t{n}", **step}]})
        assert answer.status_code == 200, answer.text
    page.goto(live_server.url + opened.json()["url"])
    expect(page.get_by_text("live agent").first).to_be_visible()
    expect(page.locator(".finding").first).to_be_visible(timeout=20_000)
    look(page, "live-run")
    assert re.search(r"/runs/\d+/", page.url)
