"""An upload's runs are analyzed in batches: one message per upload, each task a bounded
batch that sends the rest on, each run analyzed exactly once even when a message is
delivered twice at the same moment, and a worker killed mid-batch loses nothing and
doubles nothing."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.db import connection

from runs import task_names
from runs.models import Finding, LoopIssue, Run, Trace
from runs.services import analysis, ingest
from tests.helpers import call, message, native_jsonl
from tests.runs.services.test_worker import ROOT, start_worker, stop_worker, wait_for


def many_runs(count: int, loops: int = 6) -> bytes:
    """A native file of `count` runs, each a question then `loops` identical calls."""
    events = []
    for index in range(count):
        run_id = f"run-{index}"
        events.append(message("user", "find it", run_id=run_id))
        events += [
            call("web_search", {"query": "same"}, {"results": []}, run_id=run_id)
            for _ in range(loops)
        ]
    return native_jsonl(*events)


def stored(project, data: bytes, name: str = "many.jsonl") -> Trace:
    """Store and import a trace inline; its runs wait for analysis."""
    trace, _ = ingest.store_trace(project, data, name=name)
    ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    return trace


def sent(callbacks) -> list[tuple[str, list[int]]]:
    """(task name, run ids) of each analysis message captured on commit."""
    out = []
    for callback in callbacks:
        name = callback.func.__self__.task
        if name in (task_names.ANALYZE_RUNS, task_names.REANALYZE_RUNS):
            out.append((name, callback.args[0][0]))
    return out


def drain(ids: list[int], capture) -> list[int]:
    """Run the chain of batches as the worker would, each batch's message sending the next;
    return how many runs each batch analyzed."""
    sizes = []
    while ids:
        with capture() as callbacks:
            sizes.append(len(analysis.analyze_batch(ids)))
        following = sent(callbacks)
        ids = following[0][1] if following else []
    return sizes


@pytest.mark.django_db
def test_an_upload_of_many_runs_is_one_message_and_a_chain_of_bounded_batches(
    project, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(analysis, "BATCH_RUNS", 10)
    with django_capture_on_commit_callbacks() as callbacks:
        trace = stored(project, many_runs(25))
    [(name, ids)] = sent(callbacks)  # not 25 tasks: one, carrying every run
    assert name == task_names.ANALYZE_RUNS and len(ids) == 25
    sizes = drain(ids, django_capture_on_commit_callbacks)
    assert sizes == [10, 10, 5]
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED
    assert not trace.runs.filter(verdict="pending").exists()
    assert Finding.objects.filter(run__trace=trace, detector="repeat").count() == 25


@pytest.mark.django_db
def test_a_batch_is_also_bounded_by_its_steps(project, monkeypatch):
    monkeypatch.setattr(analysis, "BATCH_STEPS", 20)  # each run has 7 steps
    trace = stored(project, many_runs(5))
    ids = list(trace.runs.order_by("pk").values_list("pk", flat=True))
    assert analysis.analyze_batch(ids) == ids[:2]  # 14 steps; a third would make 21
    one_big = analysis.BATCH_STEPS // 2
    monkeypatch.setattr(analysis, "BATCH_STEPS", one_big)
    assert analysis.analyze_batch(ids[2:]) == ids[2:3]  # at least one run, whatever its size


@pytest.mark.django_db
def test_runs_of_several_projects_in_one_batch_each_get_their_own_policy(project, other_project):
    from runs.services import policy

    policy.save_policy(other_project, {"defaults": {"warn": 2, "stop": 3}, "tools": {}}, None)
    mine = stored(project, many_runs(2, loops=3))
    theirs = stored(other_project, many_runs(2, loops=3), name="theirs.jsonl")
    ids = list(Run.objects.filter(trace__in=[mine, theirs]).values_list("pk", flat=True))
    assert sorted(analysis.analyze_batch(ids)) == sorted(ids)
    assert set(mine.runs.values_list("verdict", flat=True)) == {"warn"}  # 3 calls, default
    assert set(theirs.runs.values_list("verdict", flat=True)) == {"stop"}  # stop at 3


@pytest.mark.django_db(transaction=True)
def test_a_message_delivered_twice_at_once_analyzes_each_run_once(project, monkeypatch):
    """Two workers take the same message at the same moment: the batch's rows are claimed
    under a row lock, pending only, so each run is analyzed by exactly one of them."""
    monkeypatch.setattr(analysis, "BATCH_RUNS", 100)
    trace = stored(project, many_runs(60))
    ids = list(trace.runs.values_list("pk", flat=True))
    results: list[list[int]] = []
    barrier = threading.Barrier(2)

    def work() -> None:
        try:
            barrier.wait()
            results.append(analysis.analyze_batch(ids))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    first, second = results
    assert sorted(first + second) == sorted(ids)  # every run, and none twice
    assert not set(first) & set(second)
    assert Finding.objects.filter(run__trace=trace, detector="repeat").count() == 60
    issue = LoopIssue.objects.get(project=project)
    assert issue.run_count == 60
    # and a third delivery, late, finds nothing left to do
    assert analysis.analyze_batch(ids) == []


def holding_run_locks(pid_other_than: int) -> bool:
    """Whether another session holds row locks on the runs table (a batch is under way)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = %s AND l.mode = 'RowShareLock' AND l.pid <> %s",
            [Run._meta.db_table, pid_other_than],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_batch_loses_no_run_and_doubles_none(project):
    """SIGKILL while a batch holds its runs: that batch rolls back whole, the next worker
    (its start-up recovery) analyzes the rest, and every run ends with one analysis."""
    count = 1500
    trace, _ = ingest.store_trace(project, many_runs(count), name="killed.jsonl")
    log = ROOT / "var" / "test-worker-batch.log"
    me = connection.cursor().connection.info.backend_pid
    with open(log, "wb") as out:
        process = start_worker(out, LOOPBOARD_STALE_SECONDS="1")
        try:
            deadline = time.monotonic() + 300
            analyzed = Run.objects.filter(trace=trace).exclude(verdict="pending")
            while time.monotonic() < deadline:
                if holding_run_locks(me) or analyzed.exists():  # a batch under way, or done
                    break
                time.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        finally:
            if process.poll() is None:
                stop_worker(process)
    done = Run.objects.filter(trace=trace).exclude(verdict="pending").count()
    assert done % analysis.BATCH_RUNS == 0 or done == count  # whole batches, or none
    # nothing half-written: findings exist only for the runs whose batch committed
    assert Finding.objects.filter(run__trace=trace, detector="repeat").count() == done
    with open(log, "ab") as out:
        process = start_worker(out, LOOPBOARD_STALE_SECONDS="1")
        try:
            wait_for(trace, Trace.Status.ANALYZED, timeout=180)
        finally:
            stop_worker(process)
    assert not Run.objects.filter(trace=trace, verdict="pending").exists()
    per_run = Finding.objects.filter(run__trace=trace, detector="repeat")
    assert per_run.count() == count  # one each: none lost, none doubled
    assert per_run.values("run_id").distinct().count() == count
    assert LoopIssue.objects.get(project=project).run_count == count
