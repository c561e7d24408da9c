"""Page builder: one window of two runs compared side by side (the views are compare.py).

The comparison (`services.compare`) aligns every step of both runs; this module shows a
window of its rows, never all of them: equal stretches longer than `FOLD_MIN` fold into one
"show N equal steps" row (their first and last `CONTEXT` rows stay), and a window holds at
most `ROWS_PER_PAGE` display rows. Only the steps shown are read, with previews cut in the
database; a changed row carries a bounded diff of what changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast, Left

from ..models import Run, Step
from ..services.compare import CHANGED, EQUAL, Comparison, Row, StepFacts
from . import stepview, timeline

ROWS_PER_PAGE = 100
UNFOLD_PAGE = 200
CONTEXT = 2  # equal rows kept at each end of a folded stretch
FOLD_MIN = 8  # equal stretches longer than this fold (at least 5 rows folded away)
DIFF_LINES = 14  # of each diff shown in a changed row


@dataclass
class Delta:
    """Right minus left, summed up to a row: tokens, cost, and time since each run started."""

    tokens: int
    cost: float
    seconds: float | None

    @property
    def text(self) -> str:
        """Return the delta in words, leaving out what is zero or unknown."""
        parts = []
        if self.tokens:
            parts.append(f"{signed(self.tokens)} tok")
        if abs(self.cost) >= 0.00005:
            parts.append(signed(self.cost, "${:.4f}"))
        if self.seconds is not None and abs(self.seconds) >= 0.05:
            parts.append(signed(self.seconds, "{:.1f}s"))
        return " · ".join(parts)


def signed(value: float, form: str = "{:,}") -> str:
    """Return a number with its sign (+3, −2, ±0): a delta reads right minus left."""
    if not value:
        return "±0"
    return ("+" if value > 0 else "−") + form.format(abs(value))


@dataclass
class Item:
    """A display row: an aligned pair of steps ("row") or a folded equal stretch ("fold")."""

    kind: str
    index: int  # the row index (a fold's first folded row)
    row: Row | None = None
    left: Step | None = None
    right: Step | None = None
    diffs: list[tuple[str, list[stepview.DiffLine]]] = field(default_factory=list)
    delta: Delta | None = None
    left_mark: str = ""  # "loop starts here", "warn fired here"
    right_mark: str = ""
    until: int = 0  # a fold's last folded row
    count: int = 0
    left_seqs: tuple[int, int] | None = None
    right_seqs: tuple[int, int] | None = None


@dataclass
class Window:
    items: list[Item]
    start: int
    more_from: int | None  # where the next window starts, None at the end
    until: int | None = None  # the end of an unfolded range, carried by the "more" link
    flat: bool = False


def loop_marks(cmp: Comparison) -> dict[tuple[str, int | None], str]:
    """Return {(side, step index): text} for where each run started to loop and fired."""
    marks: dict[tuple[str, int | None], str] = {}
    for side, loop in (("left", cmp.left_loop), ("right", cmp.right_loop)):
        if loop is None:
            continue
        fired = cmp.index_of(side, loop.fired_at)
        if loop.fired_at != loop.started_at and fired is not None:
            marks[(side, fired)] = f"{loop.severity} fired here"
        started = cmp.index_of(side, loop.started_at)
        if started is not None:
            marks[(side, started)] = "loop starts here"
    return marks


def plan(
    rows: list[Row], start: int, end: int, budget: int, keep: set[int], flat: bool
) -> tuple[list[tuple[str, int, int]], int | None]:
    """Return the window's segments, ("rows", a, b) or ("fold", a, b), and the next start."""
    segments: list[tuple[str, int, int]] = []
    r = start
    while r <= end and budget > 0:
        if flat or rows[r].kind != EQUAL or r in keep:
            segments.append(("rows", r, r))
            r, budget = r + 1, budget - 1
            continue
        stretch_end = r
        while stretch_end + 1 <= end and rows[stretch_end + 1].kind == EQUAL:
            if stretch_end + 1 in keep:
                break
            stretch_end += 1
        if stretch_end - r + 1 <= FOLD_MIN:
            shown = min(stretch_end - r + 1, budget)
            segments.append(("rows", r, r + shown - 1))
            r, budget = r + shown, budget - shown
            continue
        segments.append(("rows", r, r + CONTEXT - 1))
        segments.append(("fold", r + CONTEXT, stretch_end - CONTEXT))
        segments.append(("rows", stretch_end - CONTEXT + 1, stretch_end))
        r, budget = stretch_end + 1, budget - 2 * CONTEXT - 1
    merged: list[tuple[str, int, int]] = []
    for segment in segments:
        if merged and segment[0] == merged[-1][0] == "rows" and segment[1] == merged[-1][2] + 1:
            merged[-1] = ("rows", merged[-1][1], segment[2])
        else:
            merged.append(segment)
    return merged, (r if r <= end else None)


def build_window(
    cmp: Comparison, start: int = 0, *, end: int | None = None, flat: bool = False
) -> Window:
    """Return one window of the comparison's rows from row ``start`` (to ``end``)."""
    if not cmp.rows:
        return Window([], 0, None)
    last = len(cmp.rows) - 1 if end is None else min(end, len(cmp.rows) - 1)
    start = max(min(start, last), 0)
    marks = loop_marks(cmp)
    keep = {
        n
        for n, row in enumerate(cmp.rows)
        if ("left", row.left) in marks or ("right", row.right) in marks
    }
    segments, more_from = plan(
        cmp.rows, start, last, UNFOLD_PAGE if flat else ROWS_PER_PAGE, keep, flat
    )
    shown = [n for kind, a, b in segments if kind == "rows" for n in range(a, b + 1)]
    left = _steps(
        cmp.left, [cmp.left_steps[i].seq for n in shown if (i := cmp.rows[n].left) is not None]
    )
    right = _steps(
        cmp.right, [cmp.right_steps[j].seq for n in shown if (j := cmp.rows[n].right) is not None]
    )
    changed = [cmp.rows[n] for n in shown if cmp.rows[n].kind == CHANGED]
    bodies = _bodies(cmp, changed)
    deltas = _deltas(cmp, shown)
    items = []
    for kind, a, b in segments:
        if kind == "fold":
            items.append(_fold(cmp, a, b))
            continue
        for n in range(a, b + 1):
            row = cmp.rows[n]
            ls = cmp.left_steps[row.left] if row.left is not None else None
            rs = cmp.right_steps[row.right] if row.right is not None else None
            item = Item(
                "row",
                n,
                row=row,
                left=left.get(ls.seq) if ls else None,
                right=right.get(rs.seq) if rs else None,
                delta=deltas.get(n),
                left_mark=marks.get(("left", row.left), ""),
                right_mark=marks.get(("right", row.right), ""),
            )
            if row.kind == CHANGED and ls and rs:
                item.diffs = _diffs(
                    row, bodies.get(("left", ls.seq)), bodies.get(("right", rs.seq))
                )
            items.append(item)
    return Window(items, start, more_from, until=end, flat=flat)


def _fold(cmp: Comparison, a: int, b: int) -> Item:
    first, last = cmp.rows[a], cmp.rows[b]
    return Item(
        "fold",
        a,
        until=b,
        count=b - a + 1,
        left_seqs=(cmp.left_steps[first.left].seq, cmp.left_steps[last.left].seq),  # type: ignore[index]
        right_seqs=(cmp.right_steps[first.right].seq, cmp.right_steps[last.right].seq),  # type: ignore[index]
    )


def _steps(run: Run, seqs: list[int]) -> dict[int, Step]:
    """Return the shown steps of one run by seq, with previews cut in the database."""
    if not seqs:
        return {}
    steps = timeline.step_rows(run).filter(seq__in=seqs)
    return {step.seq: step for step in steps}


def _bodies(cmp: Comparison, rows: list[Row]) -> dict[tuple[str, int], dict[str, Any]]:
    """Return args, result and text (each cut at stepview.DIFF_CHARS) of changed rows' steps."""
    bodies: dict[tuple[str, int], dict[str, Any]] = {}
    for side, run, steps, indexes in (
        ("left", cmp.left, cmp.left_steps, [r.left for r in rows]),
        ("right", cmp.right, cmp.right_steps, [r.right for r in rows]),
    ):
        seqs = [steps[i].seq for i in indexes if i is not None]
        if not seqs:
            continue
        cut = stepview.DIFF_CHARS
        values = (
            Step.objects.filter(run=run, seq__in=seqs)
            .annotate(
                args_cut=Left(Cast("args", TextField()), cut),
                result_cut=Left(timeline.JsonText("result"), cut),
                text_cut=Left("text", cut),
            )
            .values_list("seq", "args_cut", "result_cut", "text_cut")
        )
        for seq, args, result, text in values:
            bodies[(side, seq)] = {"args": _parsed(args), "result": _parsed(result), "text": text}
    return bodies


def _parsed(text: str | None) -> Any:
    """Return JSON text as a value (diffed pretty-printed), or the text when it was cut."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _diffs(row: Row, left: dict | None, right: dict | None) -> list[tuple[str, list]]:
    diffs = []
    for what in row.changed:
        if what == "status" or left is None or right is None:
            continue
        lines = stepview.diff_lines(left[what], right[what])
        if len(lines) > DIFF_LINES:
            lines = [*lines[:DIFF_LINES], stepview.DiffLine("hunk", "… more in the steps' details")]
        diffs.append((what, lines))
    return diffs


def _deltas(cmp: Comparison, shown: list[int]) -> dict[int, Delta]:
    """Return right minus left for each shown row, summed over the steps up to it."""
    wanted = set(shown)
    out: dict[int, Delta] = {}
    lt = rt = 0
    lc = rc = 0.0
    lo: float | None = None
    ro: float | None = None
    end = max(shown) if shown else -1
    for n, row in enumerate(cmp.rows[: end + 1]):
        if row.left is not None:
            step = cmp.left_steps[row.left]
            lt, lc, lo = lt + step.tokens, lc + step.cost, _later(lo, step)
        if row.right is not None:
            step = cmp.right_steps[row.right]
            rt, rc, ro = rt + step.tokens, rc + step.cost, _later(ro, step)
        if n in wanted:
            seconds = ro - lo if lo is not None and ro is not None else None
            out[n] = Delta(rt - lt, rc - lc, seconds)
    return out


def _later(offset: float | None, step: StepFacts) -> float | None:
    return step.offset if step.offset is not None else offset


def loop_summary(cmp: Comparison) -> list[dict[str, Any]]:
    """Return, for each side, where it started to loop and the row to jump to."""
    out = []
    for side, run, loop in (
        ("left", cmp.left, cmp.left_loop),
        ("right", cmp.right, cmp.right_loop),
    ):
        row = cmp.loop_row(side)
        jump = max(row - CONTEXT, 0) if row is not None else None
        out.append({"side": side, "run": run, "loop": loop, "row": row, "jump": jump})
    return out


def totals_rows(cmp: Comparison) -> list[tuple[str, str, str, str]]:
    """Return the totals table: (label, left, right, right minus left), as text."""
    left, right = cmp.totals("left"), cmp.totals("right")
    rows = [
        ("Steps", f"{left.steps:,}", f"{right.steps:,}", signed(right.steps - left.steps)),
        ("Tool calls", f"{left.tool_calls:,}", f"{right.tool_calls:,}",
         signed(right.tool_calls - left.tool_calls)),
    ]  # fmt: skip
    if left.tokens or right.tokens:  # traces without token counts leave these out
        delta = signed(right.tokens - left.tokens)
        rows.append(("Tokens", f"{left.tokens:,}", f"{right.tokens:,}", delta))
    if left.cost or right.cost:
        delta = signed(round(right.cost - left.cost, 6), "${:.4f}")
        rows.append(("Cost", f"${left.cost:.4f}", f"${right.cost:.4f}", delta))
    if left.seconds is not None or right.seconds is not None:
        delta = ""
        if left.seconds is not None and right.seconds is not None:
            delta = signed(round(right.seconds - left.seconds, 3), "{:.1f}s")
        rows.append(("Duration", _seconds(left.seconds), _seconds(right.seconds), delta))
    return rows


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}s"


def context(cmp: Comparison, window: Window) -> dict[str, Any]:
    """Return what the comparison page shows besides the picker."""
    kinds = ("equal", "changed", "removed", "inserted")
    return {
        "cmp": cmp,
        "window": window,
        "totals": totals_rows(cmp),
        "loops": loop_summary(cmp),
        "counts": {kind: cmp.counts.get(kind, 0) for kind in kinds},
        "left_url": cmp.left.get_absolute_url(),
        "right_url": cmp.right.get_absolute_url(),
    }
