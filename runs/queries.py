"""Services: the runs list filters, shared by the runs API and any page that lists runs."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Q, QuerySet

from .models import Run


def filter_runs(
    runs: QuerySet[Run],
    *,
    verdict: str = "",
    detector: str = "",
    tool: str = "",
    format: str = "",
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    q: str = "",
) -> QuerySet[Run]:
    """Return the runs matching every given filter (empty values are ignored).

    `since`/`until` bound the run's creation time (a date means the whole day); `q` searches
    the run's name and external id, case-insensitively.
    """
    if verdict:
        runs = runs.filter(verdict=verdict)
    if detector:
        runs = runs.filter(detectors__contains=[detector])
    if tool:
        runs = runs.filter(tools__contains=[tool])
    if format:
        runs = runs.filter(format=format)
    if since:
        runs = runs.filter(created_at__gte=_start(since))
    if until:
        if isinstance(until, datetime):
            runs = runs.filter(created_at__lte=until)
        else:
            runs = runs.filter(created_at__lt=_start(until + timedelta(days=1)))
    if q:
        runs = runs.filter(Q(name__icontains=q) | Q(external_id__icontains=q))
    return runs


def _start(day: date | datetime) -> datetime:
    """Return a datetime as is, or the start of a day (UTC)."""
    if isinstance(day, datetime):
        return day if day.tzinfo else day.replace(tzinfo=UTC)
    return datetime.combine(day, time.min, tzinfo=UTC)
