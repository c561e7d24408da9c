"""In a real browser: label a finding with a click, and another with the `f` key and a
reason picked from the keyboard; `t` then relabels it, and the labels are stored."""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import Label, Membership, Project
from runs.services import analysis, ingest
from tests.helpers import call, message, native_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def two_loops() -> bytes:
    """The same empty search six times, then the same failing fetch six times."""
    search = [call("web_search", {"query": "same thing"}, {"results": []}) for _ in range(6)]
    fetch = [call("fetch", {"url": "https://example.com/x"}, "timeout", "error") for _ in range(6)]
    return native_jsonl(message("user", "find it"), *search, *fetch)


@pytest.fixture
def run(live_server, page):
    user = get_user_model().objects.create_user("tara", password="pw-tara-123")
    project = Project.objects.create(name="Judges", slug="judges")
    Membership.objects.create(project=project, user=user)
    trace, _ = ingest.store_trace(project, two_loops(), name="two-loops.jsonl")
    ingest.ingest_trace(trace.pk)
    run = trace.runs.get()
    analysis.analyze_run(run.pk)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "tara")
    page.fill("input[name=password]", "pw-tara-123")
    page.click("button[type=submit], input[type=submit]")
    page.goto(live_server.url + run.get_absolute_url())
    return run


def test_label_a_finding_by_click_and_one_by_keyboard(page, run):
    search = run.findings.get(tool="web_search", severity="stop")
    fetch = run.findings.exclude(severity="info").exclude(tool="web_search").first()
    assert fetch is not None and fetch.tool == "fetch"

    # a click on "Real loop" under the web_search finding
    box = page.locator(f"#label-{search.pk}")
    box.get_by_role("button", name="Real loop").click()
    expect(box.locator(".label-box__current")).to_contain_text("Real loop")
    expect(box.locator(".label-box__current")).to_contain_text("tara")

    # the fetch finding focused, `f` opens its reasons with the first focused; Tab, Enter
    page.locator(f"#finding-{fetch.pk} > .finding").focus()
    page.keyboard.press("f")
    reasons = page.locator(f"#label-{fetch.pk} .label-box__false")
    expect(reasons).to_have_attribute("open", "")
    expect(reasons.get_by_role("button", name="Polling")).to_be_focused()
    if shots := os.environ.get("LOOPBOARD_SCREENSHOTS"):  # a folder: the README's pictures
        page.locator("#findings-panel").screenshot(path=f"{shots}/labels.png")
    page.keyboard.press("Tab")
    expect(reasons.get_by_role("button", name="Paging")).to_be_focused()
    page.keyboard.press("Enter")
    fetch_box = page.locator(f"#label-{fetch.pk}")
    expect(fetch_box.locator(".label-box__current")).to_contain_text("False alarm: paging")
    # focus went back to the finding, so `t` now marks it a real loop after all
    expect(page.locator(f"#finding-{fetch.pk} > .finding")).to_be_focused()
    page.keyboard.press("t")
    expect(fetch_box.locator(".label-box__current")).to_contain_text("Real loop")

    judged = list(Label.objects.order_by("id").values_list("tool", "verdict", "reason"))
    assert judged == [
        ("web_search", "real", ""),
        ("fetch", "false", "paging"),
        ("fetch", "real", ""),
    ]
    # and after a reload the page shows what counts
    page.reload()
    expect(page.locator(f"#label-{fetch.pk} .label-box__current")).to_contain_text("Real loop")


def test_reasons_opened_on_a_live_run_stay_open_while_the_page_polls(live_server, page):
    import httpx

    from runs.models import ApiKey

    user = get_user_model().objects.create_user("liv", password="pw-liv-1234")
    project = Project.objects.create(name="Live labels", slug="live-labels")
    Membership.objects.create(project=project, user=user)
    key = ApiKey.issue(project, "agent", scope=ApiKey.Scope.INGEST)[1]
    api = httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {key}"})
    opened = api.post("/api/live/runs", json={"external_id": "s-1", "name": "live labels"})
    assert opened.status_code == 200, opened.text

    def append(n: int) -> None:
        step = {"id": f"t{n}", "tool": "Bash", "args": {"command": "make test"}}
        step |= {"result": "make: *** [test] Error 2", "status": "error"}
        answer = api.post("/api/live/runs/s-1/steps", json={"steps": [step]})
        assert answer.status_code == 200, answer.text

    for n in range(4):
        append(n)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "liv")
    page.fill("input[name=password]", "pw-liv-1234")
    page.click("button[type=submit], input[type=submit]")
    page.goto(live_server.url + opened.json()["url"])
    box = page.locator(".label-box").first
    box.locator("summary").click()
    expect(box.locator(".label-box__false")).to_have_attribute("open", "")
    append(4)  # the next poll re-sends the findings panel with the new step's finding
    expect(page.locator("text=#4").first).to_be_visible(timeout=10_000)
    page.wait_for_timeout(2500)  # at least one more poll
    expect(page.locator(".label-box").first.locator(".label-box__false")).to_have_attribute(
        "open", ""
    )
    page.locator(".label-box").first.get_by_role("button", name="Batch work").click()
    expect(page.locator(".label-box").first).to_contain_text("False alarm: batch work")
    assert Label.objects.get().reason == "batch"
