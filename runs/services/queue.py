"""The one bridge from services to Celery tasks: work queued once the transaction commits.

Every other service calls these functions instead of importing `runs.tasks`, so a task is
never sent for rows that a rollback then takes back.
"""

from __future__ import annotations

from collections.abc import Iterable

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
