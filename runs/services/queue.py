"""The one bridge from services to Celery tasks: work queued once the transaction commits.

Every other service calls these functions, so a task is never sent for rows that a rollback
then takes back. Tasks are sent by their registered names (`runs/task_names.py`): no service
imports `runs.tasks`, which imports the services. The queue of each name (interactive, bulk,
delivery) is the settings' TASK_QUEUES: nothing here picks one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from datetime import datetime
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import transaction
from kombu.transport import redis as kombu_redis

from loopboard.celery import app
from runs import task_names


def _task(name: str, args: tuple = ()):  # type: ignore[no-untyped-def]
    """Return a signature of the task registered under `name`.

    The first time a process sends a task, Celery's lazy autodiscovery
    (`loopboard/celery.py`) imports `runs.tasks`, as a worker does at start: a signature of a
    registered task goes through its own `apply_async` (its options, and eager mode in tests).
    """
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.signature(name, args)


def _send_on_commit(name: str, *args, **options) -> None:
    """Send the task registered under `name` once the current transaction commits."""
    transaction.on_commit(functools.partial(_task(name).apply_async, args, **options))


def queue_ingest(trace_ids: Iterable[int]) -> None:
    """Parse these stored traces once the current transaction commits."""
    for trace_id in trace_ids:
        _send_on_commit(task_names.INGEST_TRACE, trace_id)


def queue_analysis(run_ids: Iterable[int], *, bulk: bool = False) -> None:
    """Analyze these runs once the current transaction commits, in batches.

    One message carries them all; each task analyzes a batch and sends the rest on as the
    next message (`analysis.analyze_batch`), so the queue holds one message per upload and
    another project's work waits for one batch, not for every run of a big file. bulk=True
    (a policy change re-analyzing a project) is the re-analysis task, on the bulk queue.
    """
    if run_ids := list(run_ids):
        queue_batch(run_ids, again=bulk)


def queue_batch(run_ids: list[int], *, again: bool) -> None:
    """Send the next batch of an analysis (the rest of its run ids) on commit."""
    _send_on_commit(task_names.REANALYZE_RUNS if again else task_names.ANALYZE_RUNS, list(run_ids))


def queue_assembly(
    project_id: int, trace_ids: list[str], *, quiet: bool = False, countdown: float = 0
) -> None:
    """Assemble the buffered OTLP spans of these trace ids once the transaction commits.

    With quiet=True the task first puts off the trace ids that still receive spans.
    """
    if not trace_ids:
        return
    if countdown:
        _send_on_commit(
            task_names.ASSEMBLE_OTLP, project_id, list(trace_ids), quiet, countdown=countdown
        )
    else:
        _send_on_commit(task_names.ASSEMBLE_OTLP, project_id, list(trace_ids), quiet)


def queue_backtest(job_id: int) -> None:
    """Run this back-test once the transaction commits (on the bulk queue: it is long)."""
    _send_on_commit(task_names.RUN_BACKTEST, job_id)


def queue_alerts(run_ids: Iterable[int], issue_events: Iterable = ()) -> None:
    """Fire the alert rules for these analyzed runs and loop-issue events (`IssueEvent`s)
    once the transaction commits; nothing is queued when there is nothing to tell."""
    run_ids = list(run_ids)
    events = [(event.issue_id, event.kind) for event in issue_events]
    if run_ids or events:
        _send_on_commit(task_names.SEND_ALERTS, run_ids, events)


def queue_rate_rules(rule_ids: Iterable[int], now: datetime) -> None:
    """Measure each of these rate rules at `now`, a task per rule (at once: beat is in no
    transaction)."""
    for rule_id in rule_ids:
        _task(task_names.EVALUATE_RATE_RULE, (rule_id, now.isoformat())).apply_async()


def queue_live_issues(run_id: int) -> None:
    """Fold a live run's new findings into its loop issues, LOOPBOARD_LIVE_ISSUES_SECONDS
    after this transaction commits."""
    countdown = settings.LOOPBOARD_LIVE_ISSUES_SECONDS
    _send_on_commit(task_names.GROUP_LIVE_ISSUES, run_id, countdown=countdown)


def queue_delivery(alert_id: int, channel_ids: Iterable[int]) -> None:
    """Send this alert to each of these channels once the transaction commits."""
    for channel_id in channel_ids:
        _send_on_commit(task_names.DELIVER, alert_id, channel_id)


def queue_test_delivery(alert_id: int, channel_id: int) -> None:
    """Send a channel's test message from the worker once the transaction commits."""
    _send_on_commit(task_names.SEND_TEST_DELIVERY, alert_id, channel_id)


def depths() -> dict[str, int] | None:
    """Return how many tasks wait in each queue (interactive, bulk, delivery), from the
    broker: the lengths of the Redis lists, or the message files of the embedded filesystem
    transport; None for a broker that cannot be asked so cheaply (RabbitMQ: read its own
    metrics) or cannot be reached. What still waits in `celery`, the queue of earlier
    versions, counts as interactive: that pool drains it.
    """
    queues = (*settings.LOOPBOARD_QUEUES, settings.LEGACY_QUEUE)
    url = settings.CELERY_BROKER_URL
    if urlsplit(url).scheme in ("redis", "rediss"):
        # kombu keeps each priority step above 0 of a queue in a list of its own.
        subs = ["", *(f"{kombu_redis.Channel.sep}{p}" for p in kombu_redis.PRIORITY_STEPS[1:])]
        prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
        try:
            with _redis(url).pipeline(transaction=False) as pipe:
                for name in queues:
                    for sub in subs:
                        pipe.llen(prefix + name + sub)
                lengths = iter(pipe.execute())
        except redis.RedisError:
            return None
        found = {name: sum(next(lengths) for _ in subs) for name in queues}
    elif url.startswith("filesystem:"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        files = [entry.name.partition(".")[2] for entry in os.scandir(folder)]
        found = {name: files.count(f"{name}.msg") for name in queues}
    else:
        return None
    found[settings.INTERACTIVE_QUEUE] += found.pop(settings.LEGACY_QUEUE)
    return found


@functools.cache
def _redis(url: str) -> redis.Redis:
    """One client (and connection pool) per broker URL for the process."""
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def queue_compare(job_id: int) -> None:
    """Compute this comparison of two runs once the transaction commits, on the bulk queue."""
    _send_on_commit(task_names.COMPUTE_COMPARE, job_id, queue="bulk")
