"""Three queues, each with its own worker pool: every task is routed by its name in one
place, `loopboard serve` starts a pool per queue, and an upload is analyzed by the
interactive pool while the bulk queue is full and no bulk worker runs at all."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from loopboard.celery import app
from loopboard.cli import serve
from runs import task_names
from runs.models import BacktestJob, Trace
from runs.services import backtest, ingest
from tests.helpers import looping_trace
from tests.runs.services.test_worker import ROOT, stop_worker, wait_for, worker_env

NAMES = {value for key, value in vars(task_names).items() if key.isupper()}


def queue_of(name: str) -> str:
    return app.amqp.router.route({}, name)["queue"].name


def test_every_task_is_routed_to_one_of_the_three_queues():
    registered = {name for name in app.tasks if name.startswith("runs.")}
    assert registered <= NAMES
    for name in NAMES | registered:
        assert queue_of(name) in settings.LOOPBOARD_QUEUES, name


@pytest.mark.parametrize(
    ("name", "queue"),
    [
        (task_names.INGEST_TRACE, "interactive"),
        (task_names.ANALYZE_RUNS, "interactive"),
        (task_names.ASSEMBLE_OTLP, "interactive"),
        (task_names.GROUP_LIVE_ISSUES, "interactive"),
        (task_names.EVALUATE_RATE_RULE, "interactive"),
        (task_names.RECOVER, "interactive"),
        (task_names.REANALYZE_RUNS, "bulk"),
        (task_names.RUN_BACKTEST, "bulk"),
        (task_names.NIGHTLY_BACKTESTS, "bulk"),
        (task_names.APPLY_RETENTION, "bulk"),
        (task_names.SWEEP_RAW_STORE, "bulk"),
        (task_names.COMPUTE_COMPARE, "bulk"),
        (task_names.DELIVER, "delivery"),
        (task_names.SEND_TEST_DELIVERY, "delivery"),
    ],
)
def test_each_kind_of_work_goes_to_its_queue(name, queue):
    assert queue_of(name) == queue


def test_an_unrouted_name_goes_to_the_interactive_queue():
    assert queue_of("runs.tasks.not_yet_known") == "interactive"


def test_serve_starts_a_pool_per_queue_with_beat_in_exactly_one():
    args = argparse.Namespace(worker_concurrency=2, bulk_concurrency=1, delivery_concurrency=2)
    pools = serve.pools(args)
    consumed = [queue for pool in pools for queue in pool.queues]
    assert sorted(consumed) == sorted([*settings.LOOPBOARD_QUEUES, settings.LEGACY_QUEUE])
    assert [pool.beat for pool in pools].count(True) == 1
    commands = [serve.worker_command(ROOT / ".venv" / "bin", pool) for pool in pools]
    hostnames = [command[command.index("--hostname") + 1] for command in commands]
    assert len(set(hostnames)) == 3


def start_pool(queues: str, log) -> subprocess.Popen:
    """A real worker consuming only `queues`."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "loopboard.celery", "worker", "--pool", "solo",
         "--queues", queues, "--hostname", f"{queues}@test", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_upload_is_analyzed_while_back_tests_wait_for_their_own_pool(project):
    """Only the interactive pool runs: the back-tests stay queued on `bulk`, untouched, and
    the upload is analyzed all the same."""
    now = timezone.now()
    draft = {"defaults": {}, "tools": {}}
    jobs = [backtest.start(project, None, draft, now - timedelta(days=1), now) for _ in range(3)]
    log = ROOT / "var" / "test-worker.log"
    with open(log, "wb") as out:
        process = start_pool("interactive,celery", out)
        try:
            trace, _ = ingest.store_trace(project, looping_trace(5), name="loop.jsonl")
            wait_for(trace, Trace.Status.ANALYZED)
            time.sleep(1)
            waiting = BacktestJob.objects.filter(pk__in=[job.pk for job in jobs])
            assert set(waiting.values_list("status", flat=True)) == {BacktestJob.Status.QUEUED}
        finally:
            stop_worker(process)
