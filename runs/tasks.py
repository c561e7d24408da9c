"""Celery tasks: thin wrappers that take ids and call one service each."""

from __future__ import annotations

import contextlib
from datetime import datetime

from celery.signals import worker_ready
from django.db import OperationalError

from loopboard.celery import app

from . import task_names
from .services import (
    alerts,
    analysis,
    backtest,
    compare,
    delivery,
    digest,
    ingest,
    issues,
    live,
    metrics,
    otlp,
    recovery,
    retention,
)

# A lost database is retried for about 25 minutes (1 s, 2 s, 4 s ... then every 5 minutes);
# whatever outlasts that is picked up by `recover`, which beat runs every minute.
RETRY = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "retry_backoff_max": 300,
    "max_retries": 12,
}


@app.task(name=task_names.INGEST_TRACE, bind=True, soft_time_limit=540, time_limit=600, **RETRY)
def ingest_trace(self, trace_id: int) -> None:
    # A retry follows a lost database, not a dead worker: it is no new attempt.
    ingest.ingest_trace(trace_id, after_outage=self.request.retries > 0)


@app.task(name=task_names.ANALYZE_RUN, soft_time_limit=540, time_limit=600, **RETRY)
def analyze_run(run_id: int) -> None:
    # retention may have taken the run's steps meanwhile: it stays as it was, nothing written
    with contextlib.suppress(issues.StepsExpired):
        analysis.analyze_run(run_id)


# A batch is one transaction: a killed worker leaves all of it pending, and the redelivered
# message (or recovery) analyzes it again. The rest of the ids go on as the next message.
@app.task(name=task_names.ANALYZE_RUNS, soft_time_limit=540, time_limit=600, **RETRY)
def analyze_runs(run_ids: list[int]) -> None:
    """Analyze the next batch of these new runs, and queue the rest."""
    analysis.analyze_batch(run_ids)


@app.task(name=task_names.REANALYZE_RUNS, soft_time_limit=540, time_limit=600, **RETRY)
def reanalyze_runs(run_ids: list[int]) -> None:
    """Analyze the next batch of these runs again (a policy change), and queue the rest."""
    analysis.analyze_batch(run_ids, again=True)


@app.task(name=task_names.ASSEMBLE_OTLP, soft_time_limit=540, time_limit=600, **RETRY)
def assemble_otlp(project_id: int, trace_ids: list[str], quiet: bool = False) -> None:
    """Assemble buffered OTLP spans into runs and analyze them."""
    otlp.assemble(project_id, trace_ids, quiet)


# A back-test of many runs takes a while: it writes its progress as it goes, and a job cut
# short is resumed from its cursor by recovery.
@app.task(name=task_names.RUN_BACKTEST, soft_time_limit=3 * 3600, time_limit=3 * 3600 + 60, **RETRY)
def run_backtest(job_id: int) -> None:
    backtest.run_job(job_id)


@app.task(name=task_names.NIGHTLY_BACKTESTS, soft_time_limit=50, time_limit=60, ignore_result=True)
def nightly_backtests() -> None:
    """Queue tonight's back-test of each project's saved policy."""
    backtest.nightly()


# A batch of many flagged runs fires one alert each (a row lock and an insert apiece).
@app.task(name=task_names.SEND_ALERTS, soft_time_limit=290, time_limit=300, **RETRY)
def send_alerts(run_ids: list[int], issue_events: list[tuple[int, str]]) -> None:
    """Fire the alert rules for analyzed runs and (issue id, "new" | "regressed") events."""
    alerts.on_runs_analyzed(run_ids)
    alerts.on_issue_events(issue_events)


# At least once: acked after the attempt is logged; a receiver drops repeats by the payload's
# idempotency key. The service decides whether an attempt is retried and how many remain.
@app.task(name=task_names.DELIVER, bind=True, soft_time_limit=60, time_limit=90, **RETRY)
def deliver(self, alert_id: int, channel_id: int) -> None:
    """Make the next attempt to send an alert to a channel; retry later if it says so."""
    retry_in = delivery.deliver(alert_id, channel_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in, max_retries=None)


@app.task(
    name=task_names.SEND_TEST_DELIVERY,
    bind=True,
    soft_time_limit=60,
    time_limit=90,
    ignore_result=True,
)
def send_test_delivery(self, alert_id: int, channel_id: int) -> None:
    """Send a channel's test message (queued by the settings page); its row in the log."""
    try:
        delivery.send_queued_test(alert_id, channel_id)
    except delivery.ReceiverBusy as busy:  # its receiver's slots are taken: a little later
        raise self.retry(countdown=busy.delay, max_retries=None) from None


@app.task(
    name=task_names.EVALUATE_ALERT_RULES, soft_time_limit=50, time_limit=60, ignore_result=True
)
def evaluate_alert_rules() -> None:
    """Queue the measure of each rate rule over its window (beat, every minute)."""
    alerts.queue_rate_rules()


@app.task(
    name=task_names.EVALUATE_RATE_RULE,
    soft_time_limit=50,
    time_limit=60,
    ignore_result=True,
    **RETRY,
)
def evaluate_rate_rule(rule_id: int, now: str) -> None:
    """Measure one rate rule at `now` (ISO 8601) and fire it if its level changed."""
    alerts.evaluate_rate_rule(rule_id, datetime.fromisoformat(now))


@app.task(
    name=task_names.GROUP_LIVE_ISSUES,
    soft_time_limit=50,
    time_limit=60,
    ignore_result=True,
    **RETRY,
)
def group_live_issues(run_id: int) -> None:
    """Fold a live run's findings so far into its loop issues."""
    live.group_live_issues(run_id)


@app.task(name=task_names.SEND_DIGESTS, soft_time_limit=50, time_limit=60, ignore_result=True)
def send_digests() -> None:
    """Send the daily digests whose project-local hour has come (beat, every minute)."""
    digest.send_due_digests()


@app.task(name=task_names.COMPACT_METRICS, soft_time_limit=50, time_limit=60, ignore_result=True)
def compact_metrics() -> None:
    """Fold the metric rows written since the last time into the totals (beat)."""
    metrics.compact(vacuum=True)


@app.task(name=task_names.RECOVER, soft_time_limit=50, time_limit=60, ignore_result=True)
def recover() -> None:
    """Queue again what a dead worker, a lost task or an outage left unfinished, and end the
    live runs gone quiet."""
    recovery.requeue_stale()
    live.end_quiet_runs()


@worker_ready.connect
def requeue_unfinished(**_kwargs) -> None:
    """When a worker starts, queue again what a worker that died left behind."""
    recovery.requeue_stale()


@app.task(
    name=task_names.APPLY_RETENTION, soft_time_limit=3300, time_limit=3400, ignore_result=True
)
def apply_retention() -> None:
    """Delete the raw bytes, steps and runs each project keeps no longer (beat, hourly)."""
    retention.apply()


@app.task(
    name=task_names.SWEEP_RAW_STORE, soft_time_limit=3300, time_limit=3400, ignore_result=True
)
def sweep_raw_store() -> None:
    """Delete the raw store's objects that no trace names (beat, daily; an external store)."""
    retention.sweep_raw_store()


# Two 100k-step runs take about 20 s; the job writes its progress as it goes, and one cut
# short is queued again by the next visit to its page (`compare.open_job`).
@app.task(name=task_names.COMPUTE_COMPARE, soft_time_limit=600, time_limit=660, **RETRY)
def compute_compare(job_id: int) -> None:
    """Compare two runs for the compare page, and store the result."""
    compare.run_job(job_id)
