"""Back-tests: counts, progress, cancel, the frozen snapshot, range and sample, precision and
recall on labels, resuming after a dead worker, the nightly job, and a real Celery worker."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import BacktestJob, Finding, Run
from runs.services import backtest, labels, policy, recovery
from tests.helpers import healthy_trace, looping_trace
from tests.runs.services.test_worker import start_worker, stop_worker

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def last_days(days: int = 30):
    now = timezone.now()
    return now - days * DAY, now + timedelta(minutes=1)


def make_run(project, process, calls: int, tool: str, name: str | None = None) -> Run:
    """A run of `calls` identical calls of `tool` with the same empty result."""
    trace = process(project, looping_trace(calls, tool=tool), name=name or f"{tool}-{calls}.jsonl")
    return trace.runs.get()


@pytest.fixture
def three(project, process):
    """Three runs under the default policy (warn at 3 calls, stop at 5): ok, warn, stop."""
    return {
        "a": make_run(project, process, 2, "alpha"),
        "b": make_run(project, process, 3, "beta"),
        "c": make_run(project, process, 5, "gamma"),
        "fine": process(project, healthy_trace(), name="fine.jsonl").runs.get(),
    }


# A draft that flags a (2 calls, warn 2), clears b (3 calls, warn 4) and lowers c to warn.
DRAFT = {
    "defaults": {},
    "tools": {"alpha": {"warn": 2}, "beta": {"warn": 4, "stop": 9}, "gamma": {"stop": 9}},
}


def run(project, draft=DRAFT, user=None, days: int = 30, sample: int | None = None):
    job = backtest.start(project, user, draft, *last_days(days), sample)
    return backtest.run_job(job.pk)


def test_counts_the_runs_newly_flagged_cleared_and_changed_in_severity(project, three):
    assert [three[k].verdict for k in "abc"] == ["ok", "warn", "stop"]
    job = run(project)
    assert job.status == "done" and job.done == job.total == 4
    tally = backtest.Tally.load(job.results)
    assert tally.examined == 4
    assert tally.counts == {"flagged": 1, "cleared": 1, "changed": 1}
    listed = {kind: [(c["run"], c["before"], c["after"]) for c in rows]
              for kind, rows in tally.changes.items()}  # fmt: skip
    assert listed == {
        "flagged": [(three["a"].pk, "ok", "warn")],
        "cleared": [(three["b"].pk, "warn", "ok")],
        "changed": [(three["c"].pk, "stop", "warn")],
    }
    assert "alpha" in tally.changes["flagged"][0]["why"]
    assert (tally.flagged_current, tally.flagged_draft) == (2, 2)
    # Nothing is saved: the runs keep their verdicts and the policy is unchanged.
    assert policy.current(project) == {"defaults": {}, "tools": {}}
    assert list(Run.objects.filter(pk=three["b"].pk).values_list("verdict", flat=True)) == ["warn"]


def test_the_issues_that_would_appear_and_vanish_are_named(project, three):
    tally = backtest.Tally.load(run(project).results)
    appear, vanish = tally.issue_changes()
    assert [issue["draft"] for issue in appear] == [1]
    assert "alpha" in appear[0]["title"]
    assert len(vanish) == 1 and "beta" in vanish[0]["title"]
    # gamma's loop is flagged either way: it neither appears nor vanishes.
    assert all("gamma" not in issue["title"] for issue in appear + vanish)


def test_an_invalid_draft_or_range_is_refused_and_nothing_is_created(project):
    with pytest.raises(ValueError, match="warn"):
        backtest.start(project, None, {"defaults": {"warn": 5, "stop": 2}}, *last_days())
    since, until = last_days()
    with pytest.raises(ValueError, match="end after"):
        backtest.start(project, None, DRAFT, until, since)
    with pytest.raises(ValueError, match="sample"):
        backtest.start(project, None, DRAFT, since, until, 0)
    assert not BacktestJob.objects.exists()


def test_start_queues_the_job_on_commit(project, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        job = backtest.start(project, None, DRAFT, *last_days())
    assert len(callbacks) == 1
    assert job.status == "queued" and job.draft == policy.validate(DRAFT)


@pytest.fixture
def writes(monkeypatch):
    """Progress at every run; record (done, total, examined) as each write left the row."""
    monkeypatch.setattr(backtest, "PROGRESS_SECONDS", 0.0)
    seen: list[tuple[int, int, int]] = []
    hooks: list = []
    original = backtest._progress

    def spy(job_id, *args):
        result = original(job_id, *args)
        row = BacktestJob.objects.get(pk=job_id)
        seen.append((row.done, row.total, row.results.get("examined", 0)))
        for hook in hooks:
            hook(row)
        return result

    monkeypatch.setattr(backtest, "_progress", spy)
    return seen, hooks


def test_progress_moves_as_the_runs_are_examined(project, three, writes):
    seen, _ = writes
    job = run(project)
    assert seen == [(0, 4, 0), (1, 4, 1), (2, 4, 2), (3, 4, 3), (4, 4, 4)]
    assert job.percent == 100 and job.finished_at is not None


def test_cancel_stops_a_running_job_and_keeps_its_results_so_far(project, three, writes):
    seen, hooks = writes
    hooks.append(lambda row: row.done == 2 and backtest.cancel(row))
    job = run(project)
    assert job.status == "cancelled" and job.cancel_requested
    # Asked after its second run, it stopped at its next write.
    assert job.done == 3 and job.total == 4
    assert backtest.Tally.load(job.results).examined == 3
    assert backtest.run_job(job.pk) is None  # a cancelled job is not claimed again


def test_a_queued_job_cancelled_never_runs(project, three):
    job = backtest.start(project, None, DRAFT, *last_days())
    assert backtest.cancel(job).status == "cancelled"
    assert backtest.run_job(job.pk) is None
    job.refresh_from_db()
    assert job.done == 0 and job.results == {}


def test_the_snapshot_is_frozen_when_the_policy_changes_meanwhile(project, three, writes, user):
    _, hooks = writes
    expected = backtest.Tally.load(run(project).results)
    job = backtest.start(project, user, DRAFT, *last_days())
    # Saved after the job was created, and again while it runs.
    policy.save_policy(project, {"defaults": {"warn": 2, "stop": 3}, "tools": {}}, user)
    hooks.append(
        lambda row: (
            row.done == 1
            and policy.save_policy(project, {"defaults": {"warn": 9, "stop": 9}, "tools": {}}, user)
        )
    )
    job = backtest.run_job(job.pk)
    assert job.baseline == policy.validate({}) and job.policy_version == 0
    tally = backtest.Tally.load(job.results)
    assert (tally.counts, tally.changes) == (expected.counts, expected.changes)


def test_the_range_and_a_deterministic_sample_choose_the_runs(project, process):
    runs = [make_run(project, process, 3, f"tool{i}") for i in range(6)]
    old = timezone.now() - 3 * DAY
    Run.objects.filter(pk__in=[r.pk for r in runs[:2]]).update(created_at=old)
    day = run(project, {"defaults": {"warn": 4}, "tools": {}}, days=1)
    assert day.total == 4 and backtest.Tally.load(day.results).counts["cleared"] == 4
    assert run(project, days=7).total == 6

    first = run(project, days=7, sample=3)
    second = run(project, days=7, sample=3)
    assert first.total == second.total == 3
    picked = list(backtest.selected_runs(first, first.results["upto"]).values_list("pk", flat=True))
    again = list(
        backtest.selected_runs(second, second.results["upto"]).values_list("pk", flat=True)
    )
    assert picked == again and len(picked) == 3 and picked == sorted(picked)
    assert run(project, days=7, sample=100).total == 6


def test_runs_uploaded_after_the_start_are_not_examined(project, process, three):
    job = backtest.start(project, None, DRAFT, *last_days())
    backtest.run_job(job.pk)
    make_run(project, process, 3, "late")  # created before `until`, after the job began
    BacktestJob.objects.filter(pk=job.pk).update(status="queued")
    job = backtest.run_job(job.pk)  # the same job again: its run set stays the same
    assert job.total == 4


def label(run: Run, verdict: str, user, reason: str = "") -> None:
    finding = Finding.objects.filter(run=run).exclude(severity="info").first()
    labels.label_finding(user, finding, verdict, reason)


def test_precision_and_recall_of_current_and_draft_on_a_labeled_set(project, process, user):
    found = make_run(project, process, 3, "search")  # a real loop, found by both
    polled = make_run(project, process, 3, "poll")  # a false alarm the draft exempts
    missed = make_run(project, process, 4, "fetch")  # a real loop the draft misses (warn 5)
    make_run(project, process, 3, "unjudged")  # flagged, nobody said: does not count
    label(found, "real", user)
    label(polled, "false", user, "polling")
    label(missed, "real", user)
    draft = {"defaults": {}, "tools": {"poll": {"polling": True}, "fetch": {"warn": 5}}}
    tally = backtest.Tally.load(run(project, draft).results)
    assert tally.labels == 3
    current, proposed = tally.precision_recall("current"), tally.precision_recall("draft")
    assert (current.tp, current.fp, current.fn) == (2, 1, 0)
    assert (current.precision, current.recall) == (pytest.approx(2 / 3), 1.0)
    assert (proposed.tp, proposed.fp, proposed.fn, proposed.tn) == (1, 0, 1, 1)
    assert (proposed.precision, proposed.recall) == (1.0, 0.5)


def test_without_labels_precision_and_recall_are_unknown(project, three):
    tally = backtest.Tally.load(run(project).results)
    assert tally.labels == 0
    assert tally.precision_recall("draft").precision is None


def test_a_job_run_twice_is_examined_once(project, three):
    job = backtest.start(project, None, DRAFT, *last_days())
    first = backtest.run_job(job.pk)
    assert backtest.run_job(job.pk) is None  # done: nothing to claim
    job.refresh_from_db()
    assert job.results == first.results and job.attempt == 1


def test_a_job_a_dead_worker_left_is_resumed_after_its_cursor(
    project, three, writes, django_capture_on_commit_callbacks
):
    _, hooks = writes
    expected = backtest.Tally.load(run(project).results)

    class WorkerDied(BaseException):
        pass

    def die(row):
        if row.done == 2 and row.attempt == 1:
            raise WorkerDied

    hooks.append(die)
    job = backtest.start(project, None, DRAFT, *last_days())
    with pytest.raises(WorkerDied):
        backtest.run_job(job.pk)
    job.refresh_from_db()
    assert (job.status, job.done, job.attempt) == ("running", 2, 1)
    assert backtest.run_job(job.pk) is None  # its heartbeat is fresh: not taken over yet

    BacktestJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - 2 * DAY)
    with django_capture_on_commit_callbacks() as queued:
        recovery.requeue_stale(older_than=DAY)
    assert len(queued) == 1  # this job (nothing else is stale)
    resumed = backtest.run_job(job.pk)
    assert (resumed.status, resumed.done, resumed.attempt) == ("done", 4, 2)
    tally = backtest.Tally.load(resumed.results)
    assert tally.examined == 4  # the first two were not counted again
    assert (tally.counts, tally.changes) == (expected.counts, expected.changes)
    # The first worker, back from the dead, loses its write: the job moved on.
    assert not backtest._progress(job.pk, 1, 1, 4, 0, tally)


def test_the_nightly_job_runs_the_saved_policy_once_per_night(project, other_project, three):
    policy.save_policy(project, {"defaults": {"warn": 2}, "tools": {}}, None)
    jobs = backtest.nightly()
    assert {job.project for job in jobs} == {project, other_project}
    assert backtest.nightly() == []  # the same night again: nothing new
    job = next(job for job in jobs if job.project == project)
    assert job.kind == "nightly" and job.draft == job.baseline
    assert job.until - job.since == timedelta(days=backtest.NIGHTLY_DAYS)
    job = backtest.run_job(job.pk)
    tally = backtest.Tally.load(job.results)
    assert tally.counts == {"flagged": 0, "cleared": 0, "changed": 0}
    # Run before their re-analysis: the saved policy (warn 2) flags alpha too.
    assert tally.flagged_current == tally.flagged_draft == 3
    assert backtest.trend(project) == [job]
    tomorrow = timezone.now() + DAY
    assert [j.night for j in backtest.nightly(tomorrow)] == [tomorrow.date()] * 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_real_worker_runs_the_back_test(project, process):
    for n, tool in ((2, "alpha"), (3, "beta"), (5, "gamma")):
        make_run(project, process, n, tool)
    worker = start_worker(LOOPBOARD_STALE_SECONDS="60")
    try:
        job = backtest.start(project, None, DRAFT, *last_days())  # queued on commit
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job.refresh_from_db()
            if job.is_finished:
                break
            time.sleep(0.3)
        assert job.status == "done", job.error
        assert backtest.Tally.load(job.results).counts == {"flagged": 1, "cleared": 1, "changed": 1}
        assert worker.poll() is None
    finally:
        stop_worker(worker)


def test_a_dead_workers_job_cancelled_meanwhile_ends_cancelled_at_recovery(project, three, writes):
    _, hooks = writes

    class WorkerDied(BaseException):
        pass

    def die(row):
        if row.done == 1:
            backtest.cancel(row)
            raise WorkerDied

    hooks.append(die)
    job = backtest.start(project, None, DRAFT, *last_days())
    with pytest.raises(WorkerDied):
        backtest.run_job(job.pk)
    BacktestJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - 2 * DAY)
    assert backtest.requeue_stale(DAY) == 0
    job.refresh_from_db()
    assert (job.status, job.done) == ("cancelled", 1)


def test_a_draft_of_one_tool_row_analyzes_the_other_runs_once(project, three, monkeypatch):
    import detection

    calls: list[int] = []
    analyze = detection.analyze

    def counted(steps, policy):
        calls.append(len(steps))
        return analyze(steps, policy)

    monkeypatch.setattr(detection, "analyze", counted)
    tally = backtest.Tally.load(
        run(project, {"defaults": {}, "tools": {"beta": {"warn": 4}}}).results
    )
    assert len(calls) == 5  # four runs under the saved policy, beta's again under the draft
    assert tally.counts == {"flagged": 0, "cleared": 1, "changed": 0}
    assert tally.changes["cleared"][0]["run"] == three["b"].pk
    calls.clear()
    run(project, {"defaults": {"warn": 4}, "tools": {}})  # the defaults: every run twice
    assert len(calls) == 8
