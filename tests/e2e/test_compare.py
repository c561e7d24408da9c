"""In a real browser: open a looping run, click Compare, watch the worker's job until the page
shows it beside the fixed run of the same task with the loop start marked, and unfold an
equal stretch (htmx) in place."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs import tasks
from runs.models import Membership, Project
from runs.services import compare, ingest
from tests.helpers import call, message, native_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def stored(project, events, run_id, threads):
    """Store a run through ingest and analysis (queued on commit to the test's worker threads)."""
    for n, event in enumerate(events):
        event["run_id"] = run_id
        event["seq"] = n
    trace, _ = ingest.store_trace(project, native_jsonl(*events), name=f"{run_id}.jsonl")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for thread in list(threads):
            thread.join(timeout=5)
        trace.refresh_from_db()
        if trace.is_finished and not any(thread.is_alive() for thread in threads):
            break
    assert trace.status == "analyzed", trace.error
    return trace.runs.get()


@pytest.fixture
def compare_worker(monkeypatch, background_worker):
    """Compute comparison jobs in a thread when queued, once the test sets the returned event
    (so the page is seen with its job queued first)."""
    from django.db import connection

    release = threading.Event()

    def work(job_id: int) -> None:
        release.wait(30)
        try:
            compare.run_job(job_id)
        finally:
            connection.close()

    def send(args, kwargs=None, **_):
        thread = threading.Thread(target=work, args=args, daemon=True)
        background_worker.append(thread)
        thread.start()

    monkeypatch.setattr(tasks.compute_compare, "apply_async", send)
    return release


def test_compare_a_looping_run_with_the_fixed_one(
    live_server, page, background_worker, compare_worker
):
    user = get_user_model().objects.create_user("cora", password="pw-cora-123")
    project = Project.objects.create(name="Agents", slug="agents")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    reads = [call("read_file", {"path": f"src/m{k}.py"}, f"text {k}") for k in range(12)]
    search = call("web_search", {"query": "release notes"}, {"results": []})
    fixed = stored(
        project,
        [message("user", "find it"), *reads, search, call("answer", {}, "done")],
        "nightly-1",
        background_worker,
    )
    looping = stored(
        project,
        [message("user", "find it"), *reads, *[dict(search) for _ in range(8)]],
        "nightly-2",
        background_worker,
    )

    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "cora")
    page.fill("input[name=password]", "pw-cora-123")
    page.click("button[type=submit], input[type=submit]")
    page.goto(live_server.url + looping.get_absolute_url())
    page.get_by_role("link", name="Compare…").click()
    # the picker preselects the previous run of the same task
    expect(page.locator("#compare-other")).to_have_value(str(fixed.pk))
    page.get_by_role("button", name="Compare", exact=True).click()

    expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
    # the worker computes it meanwhile: the job's block polls, then the page shows the result
    expect(page.locator("#compare-job")).to_contain_text("Queued")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    compare_worker.set()
    expect(page.locator("#compare-job")).to_have_count(0)
    expect(page.locator(".compare-summary")).to_contain_text(f"#{looping.pk} nightly-2")
    expect(page.locator(".compare-summary")).to_contain_text(f"#{fixed.pk} nightly-1")
    # side by side: the loop's repeats only on the left, the answer only on the right
    expect(page.locator(".cmp-row--removed")).to_have_count(7)
    expect(page.locator(".cmp-row--inserted")).to_have_count(1)
    expect(page.locator(".cmp-row--inserted")).to_contain_text("answer")
    expect(page.locator(".cmp-loop").first).to_contain_text("loop starts here")
    # the common opening folded; unfolding it swaps the rows in place
    expect(page.locator(".cmp-row--equal")).to_have_count(
        5
    )  # 2 + 2 around the fold, the loop start
    fold = page.locator(".cmp-fold")
    expect(fold).to_contain_text("Show 9 equal steps")
    url = page.url
    fold.get_by_role("link").click()
    expect(page.locator(".cmp-row--equal")).to_have_count(14)
    expect(page.locator(".cmp-fold")).to_have_count(0)
    assert page.url == url  # htmx, not a page load
