"""Page builder and view: where a run's time went, as a waterfall of its steps.

Each step is a bar from its start to its end on one axis for the whole run, with its
duration and the gap since the step before it ended. Nesting (a step's parent among the
steps shown) indents the row; a sub-agent's lane is named beside it. A page holds at most
PAGE_STEPS steps, so a huge run opens in pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.decorators import login_required
from django.db.models import Max, Min
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..models import Run, Step
from ..services import access
from .run_page import run_header_context

PAGE_STEPS = 300
MAX_DEPTH = 12  # deeper nesting is drawn at this indent
MIN_WIDTH = 0.3  # percent: an instant step is still a visible tick
FIELDS = ("run_id", "seq", "kind", "tool", "status", "started_at", "ended_at", "lane")
FIELDS += ("source_id", "parent_id", "tokens_in", "tokens_out", "cost")


@dataclass
class Bar:
    """One row of the waterfall: a step and where its bar sits, in percent of the run."""

    step: Step
    depth: int
    left: float | None  # None: the trace gives this step no time
    width: float
    duration: float | None
    gap: float | None  # seconds since the previous step ended (only when positive)


@dataclass
class Waterfall:
    bars: list[Bar]
    start: datetime | None
    seconds: float  # the axis: first start to last end
    first: int
    last: int
    shown: int
    total: int
    next_from: int | None
    previous_from: int | None
    ticks: list[tuple[float, float]]  # (percent, seconds) along the axis


def _seconds(a: datetime, b: datetime) -> float:
    return max((b - a).total_seconds(), 0.0)


def _ticks(seconds: float, count: int = 5) -> list[tuple[float, float]]:
    if seconds <= 0:
        return []
    return [(100 * i / count, seconds * i / count) for i in range(count + 1)]


def waterfall(run: Run, start: int = 0, limit: int = PAGE_STEPS) -> Waterfall:
    """Return the waterfall of the run's steps from seq ``start``, at most ``limit`` of them."""
    steps = Step.objects.filter(run=run)
    span = steps.aggregate(
        first=Min("started_at"), last=Max("ended_at"), last_start=Max("started_at")
    )
    origin = span["first"]
    end = max((t for t in (span["last"], span["last_start"]) if t is not None), default=None)
    seconds = _seconds(origin, end) if origin and end else 0.0
    total = steps.count()
    page = list(steps.filter(seq__gte=start).only(*FIELDS).order_by("seq")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    before = (
        steps.filter(seq__lt=page[0].seq, ended_at__isnull=False).order_by("-seq").first()
        if page
        else None
    )
    previous_end = before.ended_at if before else None
    depth_of: dict[str, int] = {}
    bars = []
    for step in page:
        depth = depth_of.get(step.parent_id, -1) + 1 if step.parent_id else 0
        if step.source_id:
            depth_of[step.source_id] = depth
        bars.append(_bar(step, min(depth, MAX_DEPTH), origin, seconds, previous_end))
        previous_end = max(filter(None, (previous_end, step.ended_at)), default=previous_end)
    return Waterfall(
        bars=bars,
        start=origin,
        seconds=seconds,
        first=page[0].seq if page else start,
        last=page[-1].seq if page else start,
        shown=len(page),
        total=total,
        next_from=page[-1].seq + 1 if more else None,
        previous_from=max(start - limit, 0) if start > 0 else None,
        ticks=_ticks(seconds),
    )


def _bar(
    step: Step, depth: int, origin: datetime | None, seconds: float, previous_end: datetime | None
) -> Bar:
    if origin is None or step.started_at is None:
        return Bar(step, depth, None, 0.0, None, None)
    ended = step.ended_at or step.started_at
    duration = _seconds(step.started_at, ended) if step.ended_at else None
    left = 100 * _seconds(origin, step.started_at) / seconds if seconds else 0.0
    width = 100 * (duration or 0.0) / seconds if seconds else 0.0
    width = max(min(width, 100 - left), MIN_WIDTH)
    left = min(left, 100 - MIN_WIDTH)
    gap = None
    if previous_end is not None and step.started_at > previous_end:
        gap = _seconds(previous_end, step.started_at)
    return Bar(step, depth, round(left, 3), round(width, 3), duration, gap)


def _int(value: str | None) -> int:
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


@require_GET
@login_required
def run_latency(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    context = run_header_context(run) | {"waterfall": waterfall(run, _int(request.GET.get("from")))}
    return render(request, "runs/run_latency.html", context)
