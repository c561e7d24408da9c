"""In a real browser: a timed run's Time tab draws its steps as bars, the timeline shows each
step's tokens and cost, the step page walks to the next step from the keyboard, and the runs
list shows when the run started. axe-core stays clean on each.

LOOPBOARD_SCREENSHOTS=folder saves a screenshot of each page there, to look at."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import Membership, Project
from tests.e2e.accessibility import assert_accessible
from tests.e2e.test_compare import stored
from tests.helpers import call, message

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def look(page, name: str) -> None:
    folder = os.environ.get("LOOPBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
    assert_accessible(page, name)


def timed_events() -> list[dict]:
    events = [message("user", "fix the failing test", ts=at(0))]
    t = 1.0
    for k in range(6):
        events.append(
            message(
                "assistant", f"step {k}: read the next file", ts=at(t), ended_at=at(t + 2.5),
                tokens_in=1800 + 100 * k, tokens_out=220, cost=0.004,
            )
        )  # fmt: skip
        t += 2.5
        events.append(
            call("read_file", {"path": f"src/m{k}.py"}, "text", ts=at(t), ended_at=at(t + 0.8))
        )
        t += 0.8 + (12 if k == 3 else 0.3)  # a long pause after the fourth read
    events.append(call("<b>run_tests</b>", {}, "1 failed", ts=at(t), ended_at=at(t + 9)))
    return events


def test_the_time_tab_and_step_navigation(live_server, page, background_worker):
    user = get_user_model().objects.create_user("tess", password="pw-tess-123")
    project = Project.objects.create(name="Agents", slug="agents")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    run = stored(project, timed_events(), "timed-1", background_worker)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "tess")
    page.fill("input[name=password]", "pw-tess-123")
    page.click("button[type=submit], input[type=submit]")

    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.locator("td time").first).to_have_text("Mar 4, 10:00")
    expect(page.get_by_text("received").first).to_be_visible()
    look(page, "runs-list")

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator(".step__usage").first).to_contain_text("1,800 in / 220 out")
    expect(page.locator("#run-facts")).to_contain_text("Tokens")
    look(page, "timeline-usage")

    page.get_by_role("link", name="Time", exact=True).click()
    expect(page.get_by_role("heading", name="Where the time went")).to_be_visible()
    bars = page.locator(".waterfall__bar")
    expect(bars).to_have_count(14)
    box = bars.last.bounding_box()
    axis = page.locator(".waterfall__axis").last.bounding_box()
    assert box["x"] + box["width"] == pytest.approx(axis["x"] + axis["width"], abs=2)
    expect(page.locator("#bar-9")).to_contain_text("12s")  # the pause before it
    expect(page.get_by_text("<b>run_tests</b>")).to_be_visible()  # escaped, shown as text
    look(page, "time-tab")

    page.goto(f"{live_server.url}/runs/{run.pk}/steps/0/")
    expect(page.locator("a[rel=prev]")).to_have_count(0)
    page.locator("a[rel=next]").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Step #1")).to_be_visible()
    expect(page.locator("a[rel=prev]")).to_have_text("← Previous step (#0)")
    look(page, "step-prev-next")
