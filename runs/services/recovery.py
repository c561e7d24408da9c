"""Heal what a dead worker or a lost task left behind: queue it again.

Tasks are idempotent (each claims its row first), so queueing work that is in fact still
running costs a task that exits at once, never a duplicate.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..models import Run, Trace, Verdict
from . import backtest, compare, otlp, queue

log = logging.getLogger(__name__)


def requeue_stale(*, older_than: timedelta | None = None) -> tuple[int, int]:
    """Queue again the traces, runs and back-tests that a dead worker left unfinished (a
    back-test resumes from its cursor) and comparisons, the loop-issue grouping of live runs whose task was
    lost, and the OTLP span
    groups left unassembled past the quiet period (a lost countdown task must not strand
    spans; the assembly still waits for trace ids that are not quiet yet).

    Returns (traces, runs) queued. With older_than=None the configured ages are used
    (LOOPBOARD_STALE_SECONDS; the OTLP quiet period for span groups).
    """
    stranded = otlp.stranded(older_than=older_than)
    for project_id, trace_ids in stranded.items():
        for start in range(0, len(trace_ids), otlp.ASSEMBLE_CHUNK * 10):
            chunk = trace_ids[start : start + otlp.ASSEMBLE_CHUNK * 10]
            queue.queue_assembly(project_id, chunk, quiet=True)
    if stranded:
        count = sum(map(len, stranded.values()))
        log.info("queued the assembly of %d stranded OTLP trace id(s)", count)
    if older_than is None:
        older_than = timedelta(seconds=settings.LOOPBOARD_STALE_SECONDS)
    cutoff = timezone.now() - older_than
    trace_ids = list(
        Trace.objects.filter(
            status__in=[Trace.Status.RECEIVED, Trace.Status.PARSING], updated_at__lte=cutoff
        ).values_list("pk", flat=True)
    )
    # not the runs of a trace whose chain of analysis batches still moves (its heartbeat)
    pending = Run.objects.filter(verdict=Verdict.PENDING, created_at__lte=cutoff)
    run_ids = list(pending.exclude(trace__updated_at__gt=cutoff).values_list("pk", flat=True))
    queue.queue_ingest(trace_ids)
    queue.queue_analysis(run_ids)
    # Live runs whose loop-issue grouping was asked for and never done (a lost task): asked
    # again, and their clock restarted, so each is queued once per stale period at most.
    waiting = Run.objects.filter(live=True, issues_queued_at__lte=cutoff)
    if live_ids := list(waiting.values_list("pk", flat=True)[:1000]):
        Run.objects.filter(pk__in=live_ids).update(issues_queued_at=timezone.now())
        for run_id in live_ids:
            queue.queue_live_issues(run_id)
        log.info("queued the loop-issue grouping of %d live run(s) again", len(live_ids))
    if jobs := backtest.requeue_stale(older_than):
        log.info("queued %d unfinished back-test(s) again", jobs)
    if jobs := compare.requeue_stale():
        log.info("queued %d unfinished comparison(s) again", jobs)
    return len(trace_ids), len(run_ids)
