"""In a real browser: upload, wait, inspect a flagged run, unfold, diff, tune, back-test."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import Membership, Project, Run
from tests.helpers import call, message, native_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def stuck_trace() -> bytes:
    """A research agent searching the same thing six times, with different words between."""
    events = [message("user", "When did PostgreSQL 18 ship?", ts=1_764_489_600)]
    for i in range(6):
        events.append(
            message("assistant", f"Attempt {i + 1}: searching again.", ts=1_764_489_601 + 10 * i)
        )
        events.append(
            call(
                "web_search",
                {"query": "PostgreSQL 18 release date"},
                {"results": []},
                ts=1_764_489_605 + 10 * i,
                tokens_in=900,
                cost=0.003,
            )
        )
    events.append(message("assistant", "I could not find it.", ts=1_764_489_700))
    return native_jsonl(*events)


@pytest.fixture
def staff_login(live_server, page):
    user = get_user_model().objects.create_user("erin", password="pw-erin-123", is_staff=True)
    project = Project.objects.create(name="Research", slug="research")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "erin")
    page.fill("input[name=password]", "pw-erin-123")
    page.click("button[type=submit], input[type=submit]")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    return project


def test_upload_inspect_and_tune_a_stuck_run(
    live_server, page, staff_login, background_worker, tmp_path
):
    trace = tmp_path / "stuck-research.jsonl"
    trace.write_bytes(stuck_trace())

    # Upload through the page; the status row polls until analysis is done.
    page.get_by_role("link", name="Upload", exact=True).click()
    page.set_input_files("input[name=files]", str(trace))
    page.get_by_role("button", name="Upload").click()
    run_link = page.locator("#upload-results .trace__runs a")
    expect(run_link).to_be_visible(timeout=30_000)
    expect(page.locator("#upload-results .badge--stop")).to_be_visible()

    # The runs list shows it flagged, with its repeat picture; open it from there.
    page.get_by_role("link", name="Runs", exact=True).click()
    row = page.locator("tr.run-row--stop")
    expect(row).to_contain_text("stuck-research.jsonl")
    expect(row.locator("svg.strip")).to_be_visible()
    row.get_by_role("link", name="stuck-research.jsonl").click()
    expect(page.locator(".page-head .badge--stop")).to_be_visible()
    expect(page.locator(".waste")).to_contain_text("Wasted in loops")

    # Click a finding: its steps (here the folded band) are highlighted.
    finding = page.locator(".finding").first
    expect(finding).to_contain_text("Same call, nothing new")
    finding.click()
    band = page.locator(".fold--repeat")
    expect(band).to_have_class(re.compile(r"\bis-hl\b"))
    expect(finding).to_have_class(re.compile(r"\bis-active\b"))
    # Keyboard: j moves on (one finding: stays), and the highlight survives.
    page.keyboard.press("j")
    expect(page.locator(".is-hl").first).to_be_visible()

    # Unfold the band: the hidden middle iterations are fetched and shown.
    expect(band).to_contain_text("×6")
    middle = page.locator("#step-6")
    expect(middle).to_have_count(0)
    band.get_by_role("link", name="Unfold").click()
    expect(middle).to_be_visible()
    expect(page.locator(".fold--repeat")).to_have_count(0)

    # Step detail with the diff against the previous identical call.
    page.locator("#step-6").get_by_role("link", name="details & diff").click()
    detail = page.locator("#detail-6 .detail")
    expect(detail).to_contain_text("What changed since #4")
    expect(detail.locator(".diff__add")).to_contain_text("Attempt 3")
    expect(detail.locator(".diff__del")).to_contain_text("Attempt 2")
    expect(detail.locator(".json__key").first).to_be_visible()

    # Tune: mark web_search as a polling tool, preview the back-test, save.
    page.get_by_role("link", name="Tuning", exact=True).click()
    page.locator("input[name='t-0-tool']").fill("web_search")
    page.locator("select[name='t-0-polling']").select_option("yes")
    # (A back-test of the draft in the worker is tests/e2e/test_backtest.py's.)
    assert Run.objects.get().verdict == "stop"  # editing the form saves nothing
    page.get_by_role("button", name="Save and re-analyze").click()
    expect(page.locator(".notice")).to_contain_text("1 run queued")
    expect(page.locator(".history")).to_contain_text("web_search")

    # The worker re-analyzes; the runs list and the run page show the new verdict.
    for thread in background_worker:
        thread.join(timeout=30)
    page.get_by_role("link", name="Runs", exact=True).click()
    expect(page.locator("tr.run-row--ok")).to_contain_text("stuck-research.jsonl")
    page.get_by_role("link", name="stuck-research.jsonl").click()
    expect(page.locator(".page-head .badge--ok")).to_be_visible()


def test_files_dropped_on_the_upload_card_are_uploaded(
    live_server, page, staff_login, background_worker
):
    page.get_by_role("link", name="Upload", exact=True).click()
    card = page.locator("section.card").filter(has=page.locator("[data-dropzone]"))
    # A real drag from the desktop: a DataTransfer holding a File, dropped on the card.
    dropped = page.evaluate_handle(
        """(text) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], "<img src=x onerror=alert(1)>.jsonl", {type: "application/x-ndjson"}));
            return transfer;
        }""",
        stuck_trace().decode(),
    )
    card.dispatch_event("dragenter", {"dataTransfer": dropped})
    expect(card).to_have_class(re.compile(r"\bis-dragover\b"))
    card.dispatch_event("drop", {"dataTransfer": dropped})
    expect(card).not_to_have_class(re.compile(r"\bis-dragover\b"))
    # The chosen file is listed as text (its name is untrusted), then uploaded and analyzed.
    expect(page.locator(".dropzone__chosen li")).to_have_text(
        re.compile(r"^<img src=x onerror=alert\(1\)>\.jsonl \(")
    )
    assert page.locator(".dropzone__chosen img").count() == 0
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-results .trace__runs a")).to_be_visible(timeout=30_000)
    expect(page.locator("#upload-results .badge--stop")).to_be_visible()
    expect(page.locator(".dropzone__chosen li")).to_have_count(0)  # the form was reset
    assert Run.objects.get().trace.name == "<img src=x onerror=alert(1)>.jsonl"


def test_one_tuning_save_holds_several_new_tool_rows(live_server, page, staff_login):
    page.get_by_role("link", name="Tuning", exact=True).click()
    page.locator("input[name='t-0-tool']").fill("web_search")
    page.locator("select[name='t-0-polling']").select_option("yes")
    add = page.get_by_role("button", name="Add a tool row")
    add.click()
    expect(page.locator("input[name='t-1-tool']")).to_be_focused()
    page.locator("input[name='t-1-tool']").fill("mcp__*__bash")
    page.locator("input[name='t-1-warn']").fill("4")
    add.click()
    page.locator("input[name='t-2-tool']").fill("read_file")
    page.locator("input[name='t-2-stop']").fill("9")
    assert page.locator("input[name='t-TOTAL_FORMS']").input_value() == "3"
    page.get_by_role("button", name="Save and re-analyze").click()
    expect(page.locator(".notice")).to_contain_text("Saved.")
    history = page.locator(".history")
    for tool in ("web_search", "mcp__*__bash", "read_file"):
        expect(history).to_contain_text(tool)
    # The saved rows come back as rows of the form, with one blank row to add another.
    for index, tool in enumerate(sorted(["web_search", "mcp__*__bash", "read_file"])):
        expect(page.locator(f"input[name='t-{index}-tool']")).to_have_value(tool)


def test_select_two_runs_on_the_list_and_compare_them(
    live_server, page, staff_login, process_inline
):
    first = process_inline(staff_login, stuck_trace())
    second = process_inline(staff_login, stuck_trace().replace(b"PostgreSQL 18", b"PostgreSQL 17"))
    page.get_by_role("link", name="Runs", exact=True).click()
    boxes = page.get_by_role("checkbox", name=f"Select {first.name}")  # both share the name
    expect(boxes).to_have_count(2)
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.locator("#bulk-form select[name=action]").select_option("compare")
    page.get_by_role("button", name="Apply to selected").click()
    expect(page).to_have_url(re.compile(rf"/runs/{first.pk}/compare/{second.pk}/$"))
    # One selected run is not a comparison: the list says so and keeps the selection's page.
    page.get_by_role("link", name="Runs", exact=True).click()
    page.locator(f"input[name=run][value='{first.pk}']").check()
    page.locator("#bulk-form select[name=action]").select_option("compare")
    page.get_by_role("button", name="Apply to selected").click()
    expect(page.locator(".notice--error")).to_have_text("Select exactly two runs to compare them.")


def test_the_false_alarm_reason_shows_only_for_that_bulk_action(
    live_server, page, staff_login, process_inline
):
    process_inline(staff_login, stuck_trace())
    page.get_by_role("link", name="Runs", exact=True).click()
    reason = page.get_by_label("False alarm because")
    action = page.locator("#bulk-form select[name=action]")
    expect(reason).to_be_hidden()
    action.select_option("label-false")
    expect(reason).to_be_visible()
    expect(page.get_by_label("In words")).to_be_visible()
    action.select_option("compare")
    expect(reason).to_be_hidden()


def test_find_a_word_in_a_run_and_open_the_step_that_holds_it(
    live_server, page, staff_login, process_inline
):
    run = process_inline(staff_login, stuck_trace())
    page.goto(live_server.url + run.get_absolute_url())
    box = page.get_by_role("searchbox", name="Find in this run")
    box.fill("release DATE")
    box.press("Enter")
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/find/\?q=release\+DATE$"))
    expect(page.get_by_role("heading", name=re.compile("Steps that hold"))).to_contain_text(
        "6 steps"
    )
    expect(page.locator(".find-list mark").first).to_have_text("release date")
    page.get_by_role("link", name="#4", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/steps/4/$"))
    expect(page.locator("main")).to_contain_text("PostgreSQL 18 release date")


def test_plain_links_work_without_javascript(live_server, browser, staff_login, process_inline):
    run = process_inline(staff_login, stuck_trace())
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "erin")
    page.fill("input[name=password]", "pw-erin-123")
    page.click("button[type=submit], input[type=submit]")
    page.goto(live_server.url + run.get_absolute_url())
    page.locator(".fold__unfold").click()  # a plain link: the range, unfolded, as a page
    expect(page.locator("#step-6")).to_be_visible()
    page.locator("#step-6").get_by_role("link", name="details & diff").click()
    expect(page.locator(".diff")).to_contain_text("What changed since #4")
    page.get_by_role("link", name=re.compile("stuck-research|←")).first.click()
    page.get_by_role("link", name="Tree").click()
    expect(page.locator("#tree-root")).to_contain_text("web_search")
    context.close()


@pytest.fixture
def process_inline(db):
    from runs.services import analysis, ingest

    def run(project, data: bytes):
        trace, _ = ingest.store_trace(project, data, name="stuck-research.jsonl")
        ingest.ingest_trace(trace.pk)
        for run_id in trace.runs.values_list("pk", flat=True):
            analysis.analyze_run(run_id)
        return trace.runs.get()

    return run


def test_no_page_breaks_the_content_security_policy(live_server, page, staff_login, process_inline):
    run = process_inline(staff_login, stuck_trace())
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)  # fmt: skip
    page.on("pageerror", lambda error: refused.append(str(error)))
    issue = run.findings.exclude(issue=None).first().issue_id
    paths = [
        run.get_absolute_url(), f"/runs/{run.pk}/tree/", f"/runs/{run.pk}/ledger/",
        f"/runs/{run.pk}/compare/", "/issues/", f"/issues/{issue}/", "/overview/", "/upload/",
        "/tuning/", f"/projects/{staff_login.slug}/settings/", "/admin/", "/api/docs",
    ]  # fmt: skip
    for path in paths:
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
    expect(page.locator(".swagger-ui .info")).to_be_visible()  # the API docs ran their script
    page.goto(live_server.url + run.get_absolute_url())
    page.locator(".fold__unfold").first.click()  # an htmx swap, under the policy
    expect(page.locator("#step-6")).to_be_visible()
    assert refused == []
