"""Celery tasks: thin wrappers that take ids and call one service each."""

from __future__ import annotations

from celery.signals import worker_ready
from django.db import OperationalError

from loopboard.celery import app

from .services import analysis, ingest, live, otlp, recovery

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


@app.task(bind=True, soft_time_limit=540, time_limit=600, **RETRY)
def ingest_trace(self, trace_id: int) -> None:
    # A retry follows a lost database, not a dead worker: it is no new attempt.
    ingest.ingest_trace(trace_id, after_outage=self.request.retries > 0)


@app.task(soft_time_limit=540, time_limit=600, **RETRY)
def analyze_run(run_id: int) -> None:
    analysis.analyze_run(run_id)


@app.task(soft_time_limit=540, time_limit=600, **RETRY)
def assemble_otlp(project_id: int, trace_ids: list[str], quiet: bool = False) -> None:
    """Assemble buffered OTLP spans into runs and analyze them."""
    otlp.assemble(project_id, trace_ids, quiet)


@app.task(soft_time_limit=50, time_limit=60, ignore_result=True)
def recover() -> None:
    """Queue again what a dead worker, a lost task or an outage left unfinished, and end the
    live runs gone quiet."""
    recovery.requeue_stale()
    live.end_quiet_runs()


@worker_ready.connect
def requeue_unfinished(**_kwargs) -> None:
    """When a worker starts, queue again what a worker that died left behind."""
    recovery.requeue_stale()
