"""Page builder: a window of a run's timeline, with repeats folded into bands.

The run page never loads all steps: it asks for a window of display rows starting at a seq.
A folded band (`summary.Band`, written by analysis) costs two rows (its first and last
iteration), so a 100k-step loop opens as a few bands.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Func, Q, TextField
from django.db.models.functions import Cast, Left

from ..models import Finding, LedgerRow, Run, Step, StoppedCall
from ..services import live, summary
from ..services.summary import Band

ROWS_PER_PAGE = 120  # a few screens; more come with htmx
UNFOLD_PAGE = 150
PREVIEW_CHARS = 600  # of args / result / text, cut in the database
GAP_SECONDS = 30  # show "… later" between rows further apart than this


class JsonText(Func):
    """A jsonb value as text: a JSON string as its plain text (newlines kept), else JSON."""

    template = "(%(expressions)s #>> '{}')"
    output_field = TextField()


def hue(signature: str) -> int:
    """Return a stable color hue for a call signature."""
    return zlib.crc32(signature.encode()) % 360


@dataclass
class Crossing:
    """A threshold a finding crossed at one step (a warning, then maybe the stop), or the
    step where its loop started (severity "start")."""

    finding: Finding
    severity: str
    seq: int

    @property
    def threshold(self) -> int | None:
        # The row keeps the threshold of its final severity only.
        return self.finding.threshold if self.severity == self.finding.severity else None


@dataclass
class Item:
    """One row of the timeline: a step, a folded band, a threshold marker, a time gap, or a
    call the live guard stopped (right after the step it came after)."""

    kind: str  # "step" | "fold" | "marker" | "gap" | "stopped"
    step: Step | None = None
    stopped: StoppedCall | None = None  # a call the live guard stopped after this point
    # a folded band's: the calls stopped after one of its steps, shown inside the band (so
    # that unfolding it, which replaces the band, shows them once, after their steps)
    stopped_calls: list[StoppedCall] = field(default_factory=list)
    fold: Band | None = None
    first: Step | None = None
    last: Step | None = None
    crossings: list[Crossing] = field(default_factory=list)
    seconds: float | None = None
    highlight: bool = False
    hue: int = 0


@dataclass
class Timeline:
    items: list[Item]
    more_from: int | None  # where the next window starts, None at the end
    until: int | None = None  # the end of an unfolded range, carried by the "more" link
    timed: bool = False


def fold_at(folds: Sequence[Band], seq: int) -> Band | None:
    """Return the band that holds seq, if any (folds ordered by start)."""
    starts = [f.start for f in folds]
    i = bisect.bisect_right(starts, seq) - 1
    if i >= 0 and folds[i].start <= seq <= folds[i].end:
        return folds[i]
    return None


def plan_window(folds: Sequence[Band], start: int, end: int, rows: int) -> tuple[list, int | None]:
    """Return the window's segments, ("steps", a, b) or ("fold", band), and the next start."""
    starts = [f.start for f in folds]
    i = bisect.bisect_left(starts, start)
    segments: list = []
    cursor = start
    while rows > 0 and cursor <= end:
        band = folds[i] if i < len(folds) else None
        if band is not None and band.start <= cursor:
            segments.append(("fold", band))
            cursor = band.end + 1
            rows -= 2
            i += 1
            continue
        stop = min(end, cursor + rows - 1, band.start - 1 if band else end)
        segments.append(("steps", cursor, stop))
        rows -= stop - cursor + 1
        cursor = stop + 1
    return segments, (cursor if cursor <= end else None)


def step_rows(run: Run):
    """Return the run's steps with previews cut short in the database (never whole JSON)."""
    return (
        Step.objects.filter(run=run)
        .only(
            "run_id",
            "seq",
            "kind",
            "tool",
            "status",
            "call_sig",
            "started_at",
            "ended_at",
            "tokens_in",
            "tokens_out",
            "cost",
            "batch_id",
        )
        .annotate(
            args_preview=Left(Cast("args", TextField()), PREVIEW_CHARS),
            result_preview=Left(JsonText("result"), PREVIEW_CHARS),
            text_preview=Left("text", PREVIEW_CHARS),
        )
        .order_by("seq")
    )


def decorate(run: Run, steps: list[Step], highlight: set[int]) -> None:
    """Set color, ×count, ledger repeat and highlight on each step of a window."""
    sigs = {s.call_sig for s in steps if s.call_sig}
    counts = {}
    if sigs:
        counts = dict(
            Step.objects.filter(run=run, call_sig__in=sigs)
            .values("call_sig")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .values_list("call_sig", "n")
        )
    seqs = [s.seq for s in steps if s.kind == "tool_call"]
    ledger = {}
    if seqs:
        ledger = {
            row.seq: row
            for row in LedgerRow.objects.filter(run=run, seq__in=seqs).only(
                "seq", "repeat_of", "count"
            )
        }
    for step in steps:
        n = counts.get(step.call_sig)
        step.repeat = {"hue": hue(step.call_sig), "count": n} if n else None
        step.ledger = ledger.get(step.seq)
        step.highlight = step.seq in highlight
        if run.started_at and step.started_at:
            step.offset = (step.started_at - run.started_at).total_seconds()
        else:
            step.offset = None
        if step.started_at and step.ended_at:
            step.duration = max((step.ended_at - step.started_at).total_seconds(), 0.0)
        else:
            step.duration = None


def build_window(
    run: Run,
    start: int = 0,
    *,
    end: int | None = None,
    rows: int = ROWS_PER_PAGE,
    folded: bool = True,
    highlight: set[int] | frozenset[int] = frozenset(),
) -> Timeline:
    """Return one window of the timeline from seq ``start`` (to ``end``, inclusive)."""
    last_seq = max(run.step_count - 1, 0) if end is None else end
    folds = summary.folds_of(run) if folded else ()
    if folded and (band := fold_at(folds, start)):
        start = band.start
    segments, more_from = plan_window(folds, start, last_seq, rows)
    wanted = Q()
    for segment in segments:
        if segment[0] == "steps":
            wanted |= Q(seq__range=(segment[1], segment[2]))
        else:
            wanted |= Q(seq__in=[segment[1].start, segment[1].end])
    steps = list(step_rows(run).filter(wanted)) if segments else []
    decorate(run, steps, set(highlight))
    by_seq = {s.seq: s for s in steps}
    lo = segments[0][1] if segments and segments[0][0] == "steps" else start
    hi = (more_from - 1) if more_from is not None else last_seq
    crossed: dict[int, list[Crossing]] = {}
    near = Q(fired_at__range=(lo, hi)) | Q(stop_at__range=(lo, hi)) | Q(started_at__range=(lo, hi))
    for finding in run.findings.filter(near):
        start = finding.started_at
        if start is not None and start != finding.fired_at and lo <= start <= hi:
            crossed.setdefault(start, []).append(Crossing(finding, "start", start))
        for severity, seq in finding.crossings():
            if lo <= seq <= hi:
                crossed.setdefault(seq, []).append(Crossing(finding, severity, seq))
    stopped: dict[int, list[StoppedCall]] = {}  # the step it came after -> the stopped calls
    for call in live.stopped_calls(run).filter(before_seq__range=(lo + 1, hi + 1)):
        stopped.setdefault(call.before_seq - 1, []).append(call)
    items: list[Item] = []
    previous: datetime | None = None
    for segment in segments:
        if segment[0] == "fold":
            band = segment[1]
            inside = [c for seq, cs in crossed.items() if band.start <= seq <= band.end for c in cs]
            lit = any(band.start <= seq <= band.end for seq in highlight)
            first, last = by_seq.get(band.start), by_seq.get(band.end)
            inside_stopped = [
                call
                for seq in sorted(seq for seq in stopped if band.start <= seq <= band.end)
                for call in stopped[seq]
            ]
            items.append(
                Item(
                    "fold",
                    fold=band,
                    first=first,
                    last=last,
                    crossings=inside,
                    highlight=lit,
                    hue=hue(band.signature or band.tool),
                    stopped_calls=inside_stopped,
                )
            )
            previous = (last.started_at if last else None) or previous
            continue
        for seq in range(segment[1], segment[2] + 1):
            step = by_seq.get(seq)
            if step is None:
                continue
            if previous and step.started_at:
                gap = (step.started_at - previous).total_seconds()
                if gap > GAP_SECONDS:
                    items.append(Item("gap", seconds=gap))
            items.append(Item("step", step=step))
            previous = step.started_at or previous
            if seq in crossed:
                items.append(Item("marker", crossings=crossed[seq]))
            items.extend(Item("stopped", stopped=call) for call in stopped.get(seq, ()))
    timed = any(s.offset is not None for s in steps)
    return Timeline(items, more_from, until=end, timed=timed)


def finding_window_start(finding: Finding) -> int:
    """Return where a window should start to show a finding's first steps."""
    first = min(finding.seqs) if finding.seqs else finding.fired_at
    return max(first - 2, 0)
