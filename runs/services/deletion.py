"""Deleting runs and traces so that what counted them forgets them.

A run's findings go with it (the database cascades), but its loop issues keep counters of
their own (`issues`): these take the run's share away in the same transaction. The admin
deletes through here; deleting a project needs none of it, as its issues go with it.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from .. import rawstore
from ..models import Run, Trace
from . import issues


def delete_runs(runs: QuerySet[Run]) -> int:
    """Delete these runs and take them out of their loop issues; return how many went.

    The runs' rows are locked in id order first, as `analysis.write` locks them, so an
    analysis of one of them either commits before (and is then taken away) or finds it gone.
    """
    with transaction.atomic():
        locked = Run.objects.filter(pk__in=runs.values("pk")).select_for_update().order_by("pk")
        ids = list(locked.values_list("pk", flat=True))
        if not ids:
            return 0
        issues.forget_runs(ids)
        Run.objects.filter(pk__in=ids).delete()
    return len(ids)


def delete_traces(traces: QuerySet[Trace]) -> int:
    """Delete these traces with their runs (taken out of their loop issues first); return
    how many traces went."""
    with transaction.atomic():
        ids = list(traces.values_list("pk", flat=True))
        delete_runs(Run.objects.filter(trace_id__in=ids))
        gone = Trace.objects.filter(pk__in=ids)
        rawstore.forget(gone.exclude(raw_key="").values_list("raw_key", flat=True))
        gone.delete()
    return len(ids)
