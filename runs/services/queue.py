"""The one bridge from services to Celery tasks: work queued once the transaction commits.

Every other service calls these functions instead of importing `runs.tasks`, so a task is
never sent for rows that a rollback then takes back.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from datetime import datetime
from urllib.parse import urlsplit

import redis
from django.conf import settings
from kombu.transport import redis as kombu_redis

from runs import tasks


def queue_ingest(trace_ids: Iterable[int]) -> None:
    """Parse these stored traces once the current transaction commits."""
    for trace_id in trace_ids:
        tasks.ingest_trace.delay_on_commit(trace_id)


BULK_QUEUE = "bulk"  # re-analysis of many runs: workers take it in turn with new uploads


def queue_analysis(run_ids: Iterable[int], *, bulk: bool = False) -> None:
    """Analyze these runs once the current transaction commits.

    bulk=True (a policy change re-analyzing a project) sends them to their own queue, so
    that new uploads do not wait behind thousands of re-analyses.
    """
    for run_id in run_ids:
        if bulk:
            tasks.analyze_run.apply_async_on_commit((run_id,), queue=BULK_QUEUE)
        else:
            tasks.analyze_run.delay_on_commit(run_id)


def queue_assembly(
    project_id: int, trace_ids: list[str], *, quiet: bool = False, countdown: float = 0
) -> None:
    """Assemble the buffered OTLP spans of these trace ids once the transaction commits.

    With quiet=True the task first puts off the trace ids that still receive spans.
    """
    if not trace_ids:
        return
    if countdown:
        tasks.assemble_otlp.apply_async_on_commit(
            (project_id, list(trace_ids), quiet), countdown=countdown
        )
    else:
        tasks.assemble_otlp.delay_on_commit(project_id, list(trace_ids), quiet)


def queue_backtest(job_id: int) -> None:
    """Run this back-test once the transaction commits, on the bulk queue (it is long)."""
    tasks.run_backtest.apply_async_on_commit((job_id,), queue=BULK_QUEUE)


def queue_alerts(run_ids: Iterable[int], issue_events: Iterable = ()) -> None:
    """Fire the alert rules for these analyzed runs and loop-issue events (`IssueEvent`s)
    once the transaction commits; nothing is queued when there is nothing to tell."""
    run_ids = list(run_ids)
    events = [(event.issue_id, event.kind) for event in issue_events]
    if run_ids or events:
        tasks.send_alerts.delay_on_commit(run_ids, events)


def queue_rate_rules(rule_ids: Iterable[int], now: datetime) -> None:
    """Measure each of these rate rules at `now`, a task per rule (at once: beat is in no
    transaction)."""
    for rule_id in rule_ids:
        tasks.evaluate_rate_rule.delay(rule_id, now.isoformat())


def queue_live_issues(run_id: int) -> None:
    """Fold a live run's new findings into its loop issues, LOOPBOARD_LIVE_ISSUES_SECONDS
    after this transaction commits."""
    countdown = settings.LOOPBOARD_LIVE_ISSUES_SECONDS
    tasks.group_live_issues.apply_async_on_commit((run_id,), countdown=countdown)


def queue_delivery(alert_id: int, channel_ids: Iterable[int]) -> None:
    """Send this alert to each of these channels once the transaction commits."""
    for channel_id in channel_ids:
        tasks.deliver.delay_on_commit(alert_id, channel_id)


def queue_test_delivery(alert_id: int, channel_id: int) -> None:
    """Send a channel's test message from the worker once the transaction commits."""
    tasks.send_test_delivery.delay_on_commit(alert_id, channel_id)


def depths() -> dict[str, int] | None:
    """Return how many tasks wait in each queue, from the broker: the lengths of the Redis
    lists, or the message files of the embedded filesystem transport; None for a broker that
    cannot be asked so cheaply (RabbitMQ: read its own metrics) or cannot be reached.
    """
    names = (tasks.app.conf.task_default_queue, BULK_QUEUE)
    url = settings.CELERY_BROKER_URL
    if urlsplit(url).scheme in ("redis", "rediss"):
        # kombu keeps each priority step above 0 of a queue in a list of its own.
        subs = ["", *(f"{kombu_redis.Channel.sep}{p}" for p in kombu_redis.PRIORITY_STEPS[1:])]
        try:
            with _redis(url).pipeline(transaction=False) as pipe:
                for name in names:
                    for sub in subs:
                        pipe.llen(name + sub)
                lengths = iter(pipe.execute())
        except redis.RedisError:
            return None
        return {name: sum(next(lengths) for _ in subs) for name in names}
    if url.startswith("filesystem:"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        files = [entry.name.partition(".")[2] for entry in os.scandir(folder)]
        return {name: files.count(f"{name}.msg") for name in names}
    return None


@functools.cache
def _redis(url: str) -> redis.Redis:
    """One client (and connection pool) per broker URL for the process."""
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
