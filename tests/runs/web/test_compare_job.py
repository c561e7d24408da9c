"""The compare page's job: the request opens a job and never computes, the worker computes
it with progress, the stored result is shown at once while both runs stay the same, Cancel
stops it, two requests at once make one job, a dead worker's job is taken up again, and a
real worker process computes it end to end."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runs.models import CompareJob
from runs.services import analysis, recovery
from runs.services import compare as compare_service
from tests.helpers import at_once
from tests.runs.services.test_compare import stored
from tests.runs.services.test_worker import start_worker, stop_worker
from tests.runs.web.conftest import work

HX = {"HX-Request": "true"}


def urls(left, right) -> dict[str, str]:
    args = [left.pk, right.pk]
    names = ("compare", "compare_status", "compare_cancel", "compare_retry")
    return {name: reverse(f"runs:{name}", args=args) for name in names}


def kinds_of(html: str) -> list[str]:
    return re.findall(r'data-kind="(\w+)"', html)


@pytest.mark.django_db
def test_opening_a_compare_queues_a_job_and_computes_nothing_in_the_request(
    client_in, pair, django_capture_on_commit_callbacks
):
    looping, fixed = pair
    with django_capture_on_commit_callbacks() as sent:
        response = client_in.get(urls(looping, fixed)["compare"])
    html = response.content.decode()
    assert response.status_code == 200
    job = CompareJob.objects.get()
    assert (job.left, job.right, job.project) == (looping, fixed, looping.project)
    assert job.status == "queued" and job.result is None and job.attempt == 0
    assert job.cache_key == compare_service.cache_key(looping, fixed)
    assert kinds_of(html) == []  # no rows: nothing was aligned
    assert 'id="compare-job"' in html and "Queued" in html and "Waiting for a worker" in html
    assert f'hx-get="{urls(looping, fixed)["compare_status"]}"' in html
    assert 'hx-trigger="every 1s"' in html and ">Cancel<" in html
    assert f'href="{urls(looping, fixed)["compare"]}">Refresh' in html  # works without htmx
    assert 'name="other"' in html  # the picker stays
    [task] = sent  # the task goes to the worker once the request's transaction commits
    assert task.func.__self__.task == "runs.tasks.compute_compare"
    assert task.args == ((job.pk,),) and task.keywords == {"queue": "bulk"}


@pytest.mark.django_db
def test_a_done_job_is_shown_at_once_and_reused_while_both_runs_stay_the_same(
    client_in, pair, django_capture_on_commit_callbacks
):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]
    client_in.get(url)
    job = compare_service.run_job(CompareJob.objects.get().pk)
    assert job.status == "done" and job.progress == 1 and job.attempt == 1
    with django_capture_on_commit_callbacks() as sent:
        html = client_in.get(url).content.decode()
        again = client_in.get(url, {"from": 2}).content.decode()
    assert kinds_of(html) == ["equal"] * 5 + ["removed"] * 7 + ["inserted"]
    assert "loop starts here" in html and 'id="compare-job"' not in html
    assert kinds_of(again)[0] == "equal"
    assert sent == []  # nothing queued again
    assert CompareJob.objects.get() == job
    job.refresh_from_db()
    assert job.attempt == 1  # computed once
    # The other direction is another comparison (its own job).
    client_in.get(urls(fixed, looping)["compare"])
    assert CompareJob.objects.count() == 2


@pytest.mark.django_db
def test_a_run_analyzed_again_gets_a_new_job_and_the_old_result_goes(client_in, pair):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]
    client_in.get(url)
    old = compare_service.run_job(CompareJob.objects.get().pk)
    analysis.analyze_run(fixed.pk)  # a policy change re-analyzes: its findings may differ
    html = client_in.get(url).content.decode()
    job = CompareJob.objects.get()
    assert job.pk != old.pk and job.cache_key != old.cache_key and job.status == "queued"
    assert 'id="compare-job"' in html and kinds_of(html) == []


@pytest.mark.django_db
def test_the_progress_block_shows_the_workers_progress_then_reloads_the_page_when_done(
    client_in, pair
):
    looping, fixed = pair
    client_in.get(urls(looping, fixed)["compare"])
    job = CompareJob.objects.get()
    job.status, job.progress, job.phase = "running", 0.42, "aligning the steps"
    job.heartbeat_at = timezone.now()
    job.save()
    response = client_in.get(urls(looping, fixed)["compare_status"], headers=HX)
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="compare-job"')
    assert 'value="42"' in html and "42% · aligning the steps" in html and "Running" in html
    assert 'hx-trigger="every 1s"' in html
    compare_service.run_job(job.pk)  # not claimable: a fresh heartbeat holds it
    job.status = "queued"
    job.save()
    compare_service.run_job(job.pk)
    response = client_in.get(urls(looping, fixed)["compare_status"], headers=HX)
    assert response.status_code == 200 and response["HX-Refresh"] == "true"
    # Without htmx the status address sends the browser to the page.
    response = client_in.get(urls(looping, fixed)["compare_status"])
    assert response.status_code == 302 and response["Location"] == urls(looping, fixed)["compare"]


@pytest.mark.django_db
def test_progress_is_written_as_the_worker_goes(pair, monkeypatch):
    looping, fixed = pair
    job = compare_service.open_job(looping, fixed)
    monkeypatch.setattr(compare_service, "PROGRESS_SECONDS", 0)
    monkeypatch.setattr(compare_service, "FACTS_CHUNK", 2)  # many chunks, each told
    seen: list[tuple[str, float]] = []
    original = compare_service._Heartbeat.__call__

    def watched(self, phase, done):
        original(self, phase, done)
        row = CompareJob.objects.values_list("phase", "progress", "status").get(pk=job.pk)
        seen.append(row)

    monkeypatch.setattr(compare_service._Heartbeat, "__call__", watched)
    assert compare_service.run_job(job.pk).status == "done"
    phases = [phase for phase, _, _ in seen]
    assert phases[0] == "reading the left run's steps" and len(seen) > 10
    assert "reading the right run's steps" in phases and "aligning the steps" in phases
    assert phases[-1] == "finding where each run started to loop"
    progress = [done for _, done, _ in seen]
    assert progress == sorted(progress) and 0 <= progress[0] < progress[-1] < 1
    assert {status for _, _, status in seen} == {"running"}


@pytest.mark.django_db
def test_cancel_stops_a_queued_job_at_once_and_it_stays_cancelled_until_asked_again(
    client_in, pair
):
    looping, fixed = pair
    u = urls(looping, fixed)
    client_in.get(u["compare"])
    assert client_in.get(u["compare_cancel"]).status_code == 405  # a POST only
    response = client_in.post(u["compare_cancel"], headers=HX)
    job = CompareJob.objects.get()
    assert job.status == "cancelled" and job.cancel_requested and job.finished_at
    assert response.status_code == 286  # the block stops polling
    html = response.content.decode()
    assert "Cancelled before it was done" in html and "hx-trigger" not in html
    assert compare_service.run_job(job.pk) is None  # a worker that gets the message exits
    html = client_in.get(u["compare"]).content.decode()
    assert "Cancelled before it was done" in html and "Compare again" in html
    assert CompareJob.objects.get().status == "cancelled"  # a visit does not restart it
    response = client_in.post(u["compare_retry"])
    assert response.status_code == 302 and response["Location"] == u["compare"]
    job.refresh_from_db()
    assert job.status == "queued" and not job.cancel_requested
    assert compare_service.run_job(job.pk).status == "done"


@pytest.mark.django_db
def test_cancel_pressed_while_running_stops_the_job_at_its_next_chunk(client_in, pair, monkeypatch):
    looping, fixed = pair
    u = urls(looping, fixed)
    client_in.get(u["compare"])
    job = CompareJob.objects.get()
    monkeypatch.setattr(compare_service, "PROGRESS_SECONDS", 0)
    aligned = compare_service.align_steps
    pressed = []

    def press_cancel_then_align(*args, **kwargs):
        """The user presses Cancel while the worker reads and aligns."""
        assert CompareJob.objects.get().status == "running"
        response = client_in.post(u["compare_cancel"], headers=HX)
        pressed.append(response.content.decode())
        return aligned(*args, **kwargs)

    monkeypatch.setattr(compare_service, "align_steps", press_cancel_then_align)
    job = compare_service.run_job(job.pk)
    assert "Cancelling…" in pressed[0] and "disabled" in pressed[0]
    assert job.status == "cancelled" and job.result is None and job.progress < 1


@pytest.mark.django_db
def test_a_failed_comparison_says_why_and_can_be_asked_again(client_in, pair, monkeypatch):
    looping, fixed = pair
    u = urls(looping, fixed)
    client_in.get(u["compare"])

    def broken(run):
        raise RuntimeError("<b>findings unreadable</b>")

    monkeypatch.setattr(compare_service, "loop_start", broken)
    job = compare_service.run_job(CompareJob.objects.get().pk)
    assert job.status == "failed" and job.error == "RuntimeError: <b>findings unreadable</b>"
    html = client_in.get(u["compare"]).content.decode()
    assert "The comparison failed: RuntimeError: &lt;b&gt;findings unreadable&lt;/b&gt;" in html
    assert "Compare again" in html and "hx-trigger" not in html
    monkeypatch.undo()
    client_in.post(u["compare_retry"])
    assert compare_service.run_job(job.pk).status == "done"


@pytest.mark.django_db
def test_a_job_left_by_a_dead_worker_is_queued_again_by_the_next_visit(
    client_in, pair, settings, django_capture_on_commit_callbacks
):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]
    client_in.get(url)
    job = CompareJob.objects.get()
    # A worker claimed it, wrote some progress and died (its heartbeat goes stale).
    stale = timezone.now() - timedelta(seconds=compare_service.STALE_SECONDS + 1)
    CompareJob.objects.filter(pk=job.pk).update(
        status="running", attempt=1, progress=0.3, heartbeat_at=stale
    )
    dead = compare_service._Heartbeat(job.pk, 1)
    with django_capture_on_commit_callbacks() as sent:
        html = client_in.get(url).content.decode()
        client_in.get(url)  # a second visit does not queue it twice
    assert len(sent) == 1 and "Queued" in html
    job.refresh_from_db()
    assert job.status == "queued" and job.heartbeat_at > stale
    job = compare_service.run_job(job.pk)
    assert job.status == "done" and job.attempt == 2
    with pytest.raises(compare_service.Stopped):  # the old worker, back, writes nothing
        dead("aligning the steps", 0.9)
    job.refresh_from_db()
    assert job.status == "done" and job.progress == 1
    # A dead worker's job whose Cancel was pressed ends cancelled at the next visit.
    client_in.get(urls(fixed, looping)["compare"])
    CompareJob.objects.filter(left=fixed).update(
        status="running", cancel_requested=True, heartbeat_at=stale
    )
    html = client_in.get(urls(fixed, looping)["compare"]).content.decode()
    assert CompareJob.objects.get(left=fixed).status == "cancelled"
    assert "Cancelled before it was done" in html


@pytest.mark.django_db
def test_recovery_requeues_stale_jobs_and_ends_those_cancelled_meanwhile(
    pair, django_capture_on_commit_callbacks
):
    looping, fixed = pair
    job = compare_service.open_job(looping, fixed)
    other = compare_service.open_job(fixed, looping)
    stale = timezone.now() - timedelta(hours=1)
    CompareJob.objects.filter(pk=job.pk).update(status="running", heartbeat_at=stale)
    CompareJob.objects.filter(pk=other.pk).update(
        status="running", heartbeat_at=stale, cancel_requested=True
    )
    with django_capture_on_commit_callbacks() as sent:
        assert recovery.requeue_stale() == (0, 0)  # what the recovery beat runs
    assert [task.args for task in sent] == [((job.pk,),)]
    assert CompareJob.objects.get(pk=other.pk).status == "cancelled"


@pytest.mark.django_db
def test_another_projects_run_is_a_404_on_every_compare_address(
    client_in, client, pair, other_project, process
):
    looping, _ = pair
    theirs = stored(process, other_project, work(2), "task-9")
    for left, right in ((looping, theirs), (theirs, looping)):
        for name, url in urls(left, right).items():
            method = client_in.get if name in ("compare", "compare_status") else client_in.post
            assert method(url).status_code == 404, name
    assert not CompareJob.objects.exists()
    client.logout()
    for name, url in urls(*pair).items():
        method = client.get if name in ("compare", "compare_status") else client.post
        response = method(url)
        assert response.status_code == 302 and "login" in response["Location"], name


@pytest.mark.django_db
def test_hostile_run_names_are_escaped_in_the_job_block(client_in, project, process):
    evil = "<script>alert(1)</script>"
    left = stored(process, project, work(2), f"run{evil}1")
    right = stored(process, project, work(3), f"run{evil}2")
    for response in (
        client_in.get(urls(left, right)["compare"]),
        client_in.get(urls(left, right)["compare_status"], headers=HX),
    ):
        html = response.content.decode()
        assert 'id="compare-job"' in html
        assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.django_db
def test_rows_asked_for_while_a_run_changed_reload_the_page(client_in, pair):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]
    client_in.get(url)
    compare_service.run_job(CompareJob.objects.get().pk)
    analysis.analyze_run(looping.pk)
    response = client_in.get(url, {"from": 5}, headers=HX)
    assert response.status_code == 200 and response["HX-Refresh"] == "true"


# ---- real transactions: the race, and a real worker process -------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_requests_opening_the_same_compare_at_once_make_one_job(user, pair):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]

    def open_page(_):
        client = Client()
        client.force_login(user)
        response = client.get(url)
        return response.status_code, 'id="compare-job"' in response.content.decode()

    answers = at_once(open_page, range(6))
    assert answers == [(200, True)] * 6
    assert CompareJob.objects.filter(left=looping, right=fixed).count() == 1
    ids = at_once(lambda _: compare_service.open_job(looping, fixed).pk, range(4))
    assert set(ids) == {CompareJob.objects.get().pk}


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_computes_the_comparison_the_page_then_shows(client_in, pair):
    looping, fixed = pair
    url = urls(looping, fixed)["compare"]
    html = client_in.get(url).content.decode()  # no worker yet: the job waits, queued
    assert 'id="compare-job"' in html and CompareJob.objects.get().status == "queued"
    process = start_worker()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = CompareJob.objects.get()
            if job.is_finished:
                break
            time.sleep(0.2)
    finally:
        stop_worker(process)
    assert job.status == "done", job.error
    assert job.attempt == 1 and job.started_at and job.finished_at and job.result
    html = client_in.get(url).content.decode()
    assert kinds_of(html) == ["equal"] * 5 + ["removed"] * 7 + ["inserted"]
    response = client_in.get(urls(looping, fixed)["compare_status"], headers=HX)
    assert response["HX-Refresh"] == "true"
