"""A real Celery worker process on the real broker turns an upload into an analyzed run."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from runs.models import Trace
from runs.services import ingest
from tests.helpers import call, healthy_trace, looping_trace, message, native_jsonl

ROOT = Path(__file__).resolve().parents[3]
# Each pytest-xdist worker (gw0, gw1, ...) writes a worker log and beat schedule of its own.
_XDIST = f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""
WORKER_LOG = ROOT / "var" / f"test-worker{_XDIST}.log"
BEAT_SCHEDULE = ROOT / "var" / f"test-beat-schedule{_XDIST}"
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_database_url() -> str:
    """Return a URL for the test database, which the worker process must use."""
    s = connection.settings_dict
    host = s.get("HOST") or ""
    auth = quote(s.get("USER") or "") + (":" + quote(s["PASSWORD"]) if s.get("PASSWORD") else "")
    if host.startswith("/"):  # a socket directory (the embedded PostgreSQL)
        return f"postgresql://{auth}@/{s['NAME']}?host={quote(host)}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"


test_database_url.__test__ = False  # a helper, not a test


def worker_env(**extra: str) -> dict[str, str]:
    """Return the environment for a worker process: this process's, on the test database."""
    env = dict(os.environ, DATABASE_URL=test_database_url(), SECRET_KEY=settings.SECRET_KEY)
    if settings.EMBEDDED:
        env["LOOPBOARD_EMBEDDED"] = "true"
    return env | extra


def start_worker(log=subprocess.DEVNULL, **env: str) -> subprocess.Popen:
    """Start `celery worker` as its own process against the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "loopboard.celery", "worker", "--pool", "solo",
         "--queues", "interactive,celery,bulk,delivery", "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=worker_env(**env), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_worker(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def worker():
    """A worker process for one test, its log in WORKER_LOG."""
    log = WORKER_LOG
    log.parent.mkdir(exist_ok=True)
    with open(log, "wb") as out:
        process = start_worker(out, LOOPBOARD_STALE_SECONDS="5")
        try:
            yield process
        finally:
            stop_worker(process)


def wait_for(trace: Trace, status: str, timeout: float = 60) -> Trace:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trace.refresh_from_db()
        if trace.status == status or trace.status == Trace.Status.FAILED:
            break
        time.sleep(0.3)
    log = WORKER_LOG.read_text(errors="replace")[-3000:] if WORKER_LOG.exists() else ""
    assert trace.status == status, f"trace is {trace.status}: {trace.error}\nworker log:\n{log}"
    return trace


def test_an_upload_becomes_an_analyzed_run_in_a_real_worker(worker, project):
    trace, created = ingest.store_trace(project, looping_trace(5), name="loop.jsonl")
    assert created
    wait_for(trace, Trace.Status.ANALYZED)
    run = trace.runs.get()
    assert run.verdict == "stop"
    assert run.findings.filter(detector="repeat").exists()
    assert worker.poll() is None  # still alive


def test_a_trace_left_behind_by_a_dead_worker_is_picked_up_when_a_worker_starts(project):
    """The worker died mid-parse: the trace stays `parsing` and its message is gone."""
    data = healthy_trace()
    trace = Trace.objects.create(  # stored without queueing: its message was lost
        project=project,
        name="orphan.jsonl",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        raw=data,
        status=Trace.Status.PARSING,
    )
    stale = timezone.now() - timedelta(minutes=30)
    Trace.objects.filter(pk=trace.pk).update(updated_at=stale)
    # A new worker requeues what is stale when it starts.
    process = start_worker(LOOPBOARD_STALE_SECONDS="60")
    try:
        wait_for(trace, Trace.Status.ANALYZED)
    finally:
        stop_worker(process)
    assert trace.runs.get().verdict == "ok"


def orphan_trace(project, data: bytes, name: str, status: str = Trace.Status.RECEIVED) -> Trace:
    """A stored trace whose task message was lost."""
    return Trace.objects.create(
        project=project, name=name, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
        raw=data, status=status,
    )  # fmt: skip


def test_periodic_recovery_picks_up_lost_work_without_a_restart(project):
    log = WORKER_LOG
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "loopboard.celery", "worker", "--pool", "solo",
             "--beat", "--schedule", str(BEAT_SCHEDULE),
             "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env=worker_env(LOOPBOARD_STALE_SECONDS="1", LOOPBOARD_RECOVERY_SECONDS="1"),
        )  # fmt: skip
        try:
            time.sleep(3)  # the worker is up and has requeued what was stale at its start
            trace = orphan_trace(project, healthy_trace(), "lost.jsonl")
            wait_for(trace, Trace.Status.ANALYZED)
        finally:
            stop_worker(process)
    assert trace.runs.get().verdict == "ok"


def test_a_worker_killed_mid_import_leaves_exactly_one_run_with_every_step(project):
    steps = 60_000
    data = native_jsonl(
        message("user", "go"), *[call("read", {"n": i}, "x") for i in range(steps - 1)]
    )
    log = WORKER_LOG
    with open(log, "wb") as out:
        first = start_worker(out, LOOPBOARD_STALE_SECONDS="1")
        trace, _ = ingest.store_trace(project, data, name="big.jsonl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            trace.refresh_from_db()
            if trace.status == Trace.Status.PARSING:
                break
            time.sleep(0.05)
        assert trace.status == Trace.Status.PARSING
        time.sleep(0.3)  # inside the import's transaction
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = start_worker(out, LOOPBOARD_STALE_SECONDS="0")  # requeues it at start
        try:
            ingest.queue.queue_ingest([trace.pk])  # and a redelivered duplicate
            wait_for(trace, Trace.Status.ANALYZED, timeout=120)
        finally:
            stop_worker(second)
    assert trace.runs.count() == 1
    run = trace.runs.get()
    assert run.step_count == steps and run.steps.count() == steps
    assert trace.import_attempts == 2


def test_a_policy_change_reanalyzes_on_the_bulk_queue_which_workers_consume(worker, project):
    from runs.services import policy

    trace, _ = ingest.store_trace(project, looping_trace(3), name="three.jsonl")
    run = wait_for(trace, Trace.Status.ANALYZED).runs.get()
    assert run.verdict == "warn"
    policy.save_policy(project, {"defaults": {"warn": 2, "stop": 3}, "tools": {}}, None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run.verdict != "stop":
        time.sleep(0.3)
        run.refresh_from_db()
    assert run.verdict == "stop"


def test_thirty_multi_run_uploads_on_two_worker_processes_all_end_analyzed(project):
    log = WORKER_LOG
    with open(log, "wb") as out:
        workers = [start_worker(out) for _ in range(2)]
        try:
            traces = []
            for n in range(30):
                events = [
                    dict(call("read", {"file": f"{n}-{run}-{i}"}, "x"), run_id=f"run-{run}")
                    for run in range(3)
                    for i in range(4)
                ]
                trace, _ = ingest.store_trace(project, native_jsonl(*events), name=f"m{n}.jsonl")
                traces.append(trace)
            for trace in traces:
                wait_for(trace, Trace.Status.ANALYZED, timeout=120)
        finally:
            for worker in workers:
                stop_worker(worker)
    assert all(t.runs.count() == 3 for t in traces)
    assert not Trace.objects.exclude(status=Trace.Status.ANALYZED).exists()


def test_a_small_gzip_that_inflates_to_2_gb_over_20_runs_fails_without_killing_the_worker(
    worker, project
):
    lines = [
        json.dumps(
            {
                "run_id": f"r{i % 20}",
                "type": "tool_call",
                "tool": "read",
                "args": {"path": f"/src/{i % 20}.py"},
                "result": "same",
            }
        )  # fmt: skip
        for i in range(200_000)
    ]
    member = gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=9)
    repeats = (2 << 30) // sum(len(line) + 1 for line in lines) + 1
    data = member * repeats  # gzip members one after another: one file of about 2 GB
    trace, _ = ingest.store_trace(project, data, name="bomb.jsonl.gz")
    wait_for(trace, Trace.Status.FAILED, timeout=240)
    assert "steps across runs that are still open" in trace.error
    assert worker.poll() is None  # the worker is alive
    assert len(data) < 20 << 20
