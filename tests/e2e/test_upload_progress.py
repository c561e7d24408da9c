"""In a real browser, what issue 27's new user met on the upload page and the run tabs: a
progress bar that finishes (and is not brought back by the trace rows' polling), runs named
after the uploaded file where the trace has no better name, a Find box whose placeholder is
not cut off, and the runs list's bulk label and delete."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from runs.models import Label, Run
from tests.e2e.accessibility import assert_accessible
from tests.e2e.test_browser import process_inline, staff_login, stuck_trace  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEMO = Path(__file__).resolve().parents[2] / "runs" / "demo"

# Every change of the bar, as the page made it: [hidden, value] after each one.
WATCH_BAR = """() => {
    const bar = document.getElementById("upload-progress");
    window.barStates = [];
    new MutationObserver(() => window.barStates.push([bar.hidden, bar.value]))
        .observe(bar, {attributes: true});
}"""


def test_the_upload_bar_finishes_and_the_rows_polling_does_not_bring_it_back(
    live_server,
    page,
    staff_login,  # noqa: F811
    background_worker,
):
    page.goto(live_server.url + "/upload/")
    bar = page.locator("#upload-progress")
    expect(bar).to_be_hidden()
    page.evaluate(WATCH_BAR)
    page.locator("input[name=files]").set_input_files(
        {
            "name": "nightly-research.jsonl",
            "mimeType": "application/x-ndjson",
            "buffer": stuck_trace(),
        }
    )
    page.get_by_role("button", name="Upload").click()
    # The row polls its trace every second until it is analyzed and lists its run.
    expect(page.locator("#upload-results .trace__runs a")).to_be_visible(timeout=30_000)
    page.wait_for_timeout(2_500)  # more polls, had the row gone on polling
    expect(bar).to_be_hidden()
    states = page.evaluate("window.barStates")
    assert [False, 0] in states, states  # shown, from nothing, when the upload started
    assert states[-1] == [True, 100], states  # full, then hidden: it finished
    assert states.index([True, 100]) == len(states) - 1, states  # never shown again


def test_a_run_is_named_after_its_uploaded_file_unless_the_trace_names_it(
    live_server,
    page,
    staff_login,  # noqa: F811
    background_worker,
):
    """A native trace holds no name: its run takes the file's. A Claude Code session names
    itself (its slug), whatever the file is called; a Codex session, known by a UUID only,
    takes the file's name and the id's first characters."""
    page.goto(live_server.url + "/upload/")
    session = (DEMO / "claude-code-coverage-test-fix.jsonl").read_bytes()
    codex = (DEMO.parents[1] / "tests" / "data" / "importers" / "codex_rollout.jsonl").read_bytes()
    page.locator("input[name=files]").set_input_files(
        [
            {"name": "nightly-research.jsonl", "mimeType": "application/x-ndjson", "buffer": stuck_trace()},
            {"name": "session-export.jsonl", "mimeType": "application/x-ndjson", "buffer": session},
            {"name": "fix-auth.jsonl", "mimeType": "application/x-ndjson", "buffer": codex},
        ]
    )  # fmt: skip
    page.get_by_role("button", name="Upload").click()
    results = page.locator("#upload-results")
    expect(results.locator(".trace__runs a")).to_have_count(3, timeout=30_000)
    expect(results.get_by_role("link", name="nightly-research.jsonl", exact=True)).to_be_visible()
    expect(results.get_by_role("link", name="delegated-marinating-toast")).to_be_visible()
    names = {run.trace.name: run.name for run in Run.objects.select_related("trace")}
    assert names == {
        "nightly-research.jsonl": "nightly-research.jsonl",
        "session-export.jsonl": "delegated-marinating-toast",
        "fix-auth.jsonl": "fix-auth.jsonl · 0199a1b2",  # a Codex session has only its UUID
    }
    page.goto(live_server.url + "/")
    expect(page.get_by_role("link", name="nightly-research.jsonl", exact=True)).to_be_visible()


def test_the_find_box_shows_its_whole_placeholder(
    live_server,
    page,
    staff_login,  # noqa: F811
    process_inline,  # noqa: F811
):
    run = process_inline(staff_login, stuck_trace())
    for width in (1440, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(live_server.url + run.get_absolute_url())
        box = page.get_by_role("searchbox", name="Find in this run")
        text, room = box.evaluate(
            """input => {
                const style = getComputedStyle(input);
                const pen = document.createElement("canvas").getContext("2d");
                pen.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
                const room = input.clientWidth - parseFloat(style.paddingLeft)
                    - parseFloat(style.paddingRight);
                return [pen.measureText(input.placeholder).width, room];
            }"""
        )
        assert text + 20 <= room, (width, text, room)  # 20 px: the search field's clear button


def test_label_and_delete_runs_picked_on_the_list(
    live_server,
    page,
    staff_login,  # noqa: F811
    process_inline,  # noqa: F811
):
    """The bulk actions other than compare (tests/e2e/test_browser.py), in the browser: label
    the findings of two ticked runs, then delete one of them."""
    first = process_inline(staff_login, stuck_trace())
    second = process_inline(staff_login, stuck_trace().replace(b"PostgreSQL 18", b"PostgreSQL 17"))
    page.goto(live_server.url + "/")
    action = page.locator("#bulk-form select[name=action]")
    for run in (first, second):
        page.locator(f"input[name=run][value='{run.pk}']").check()
    action.select_option("label-real")
    page.get_by_role("button", name="Apply to selected").click()
    expect(page.locator(".notice--success")).to_contain_text("labeled “real loop”")
    labels = Label.objects.filter(verdict=Label.Verdict.REAL, user__username="erin")
    assert set(labels.values_list("run_id", flat=True)) == {first.pk, second.pk}

    page.locator(f"input[name=run][value='{second.pk}']").check()
    action.select_option("delete")
    page.get_by_role("button", name="Apply to selected").click()
    expect(page.locator("h1")).to_have_text("Delete 1 run?")  # it asks first
    assert Run.objects.count() == 2
    assert_accessible(page, "the delete confirmation")
    page.get_by_role("button", name="Delete 1 run").click()
    expect(page.locator(".notice--success")).to_have_text("1 run deleted.")
    expect(page.locator("input[name=run]")).to_have_count(1)
    assert list(Run.objects.values_list("pk", flat=True)) == [first.pk]


def test_the_top_bar_and_the_run_tabs_fit_a_phone(
    live_server,
    page,
    staff_login,  # noqa: F811
    process_inline,  # noqa: F811
):
    """At 390 px the top bar and the run tabs (with the Find box) wrap: the run page is no
    wider than the screen (it was 793 px wide)."""
    run = process_inline(staff_login, stuck_trace())
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server.url + run.get_absolute_url())
    expect(page.get_by_role("searchbox", name="Find in this run")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
