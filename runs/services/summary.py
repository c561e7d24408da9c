"""A run's summary: what the pages show without re-running the engine.

`build` makes it from one analysis; it is stored as JSON in `Run.summary` and read back part
by part (`stall_series_of`, `folds_of`, `strip_of`), tolerating rows written by older versions
or edited by hand (junk is dropped, never shown). The summary holds:
- the stall series (seq, score) drawn on the run page;
- the folded bands: runs of the same no-progress call, and back-and-forth cycles;
- the strip: per bucket of steps, how much repeats (0-4), and where a finding fired.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import detection

from ..importers.otlp.dialects import capture_hints
from ..models import Run

STRIP_BUCKETS = 48  # cells of the runs list's repeat picture
MAX_FOLDS = 5000
FOLD_MIN = 3  # consecutive no-progress repeats folded into one band


@dataclass(frozen=True, slots=True)
class Band:
    """A folded stretch of the timeline: a repeated call ("repeat") or a cycle ("cycle")."""

    kind: str
    start: int
    end: int
    count: int
    tool: str
    signature: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "start": self.start, "end": self.end, "count": self.count,
                "tool": self.tool, "signature": self.signature}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> Band | None:
        if not isinstance(data, dict):
            return None
        start, end, count = data.get("start"), data.get("end"), data.get("count")
        if not all(_is_int(v) for v in (start, end, count)) or start > end:
            return None
        kind = "cycle" if data.get("kind") == "cycle" else "repeat"
        return cls(kind, start, end, count, _str(data.get("tool")), _str(data.get("signature")))


@dataclass(frozen=True, slots=True)
class Strip:
    """The runs list's picture: a level 0-4 per bucket of steps, and the buckets that fired."""

    cells: tuple[int, ...] = ()
    fired: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Unknowns:
    """How many of a run's calls the trace recorded without arguments or without a result.

    The engine never takes two unknowns for the same call or result, so a run recorded with
    names only can show at most a streak (see detection/model.py).
    """

    calls: int = 0
    args: int = 0
    results: int = 0

    @property
    def names_only(self) -> bool:
        """Most calls carry neither arguments nor results: loops cannot be judged."""
        return self.calls > 0 and min(self.args, self.results) * 2 > self.calls

    @property
    def any(self) -> bool:
        return bool(self.args or self.results)

    def share(self, count: int) -> int:
        """Return count as a whole percentage of the calls."""
        return round(100 * count / self.calls) if self.calls else 0


@dataclass(frozen=True, slots=True)
class RunSummary:
    stall_series: tuple[tuple[int, float], ...] = ()
    folds: tuple[Band, ...] = ()  # ordered by start
    strip: Strip = Strip()
    unknowns: Unknowns = Unknowns()

    def to_json(self) -> dict[str, Any]:
        return {
            "stall_series": [list(point) for point in self.stall_series],
            "folds": [band.to_json() for band in self.folds],
            "strip": {"cells": list(self.strip.cells), "fired": list(self.strip.fired)},
            "unknowns": {
                "calls": self.unknowns.calls,
                "args": self.unknowns.args,
                "results": self.unknowns.results,
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> RunSummary:
        data = data if isinstance(data, dict) else {}
        return cls(_series(data), _folds(data), _strip(data), _unknowns(data))


# A page reads only the part it shows: the runs list reads 50 strips, not 50 fold lists.
def stall_series_of(run: Run) -> tuple[tuple[int, float], ...]:
    """Return a run's stall series (empty before its first analysis)."""
    return _series(run.summary if isinstance(run.summary, dict) else {})


def folds_of(run: Run) -> tuple[Band, ...]:
    """Return a run's folded bands, ordered by start."""
    return _folds(run.summary if isinstance(run.summary, dict) else {})


def strip_of(run: Run) -> Strip:
    """Return a run's repeat strip."""
    return _strip(run.summary if isinstance(run.summary, dict) else {})


def unknowns_of(run: Run) -> Unknowns:
    """Return how many of a run's calls had no arguments or no result in the trace."""
    return _unknowns(run.summary if isinstance(run.summary, dict) else {})


def capture_hints_of(run: Run) -> list[str]:
    """Return how to make the run's instrumentation record arguments and results."""
    meta = run.metadata if isinstance(run.metadata, dict) else {}
    return capture_hints(meta.get("dialects"))


def _unknowns(data: dict) -> Unknowns:
    part = data.get("unknowns") if isinstance(data.get("unknowns"), dict) else {}
    counts = [part.get(key) for key in ("calls", "args", "results")]
    return Unknowns(*(max(c, 0) if _is_int(c) else 0 for c in counts))


def _series(data: dict) -> tuple[tuple[int, float], ...]:
    return tuple(
        (int(p[0]), float(p[1]))
        for p in _list(data.get("stall_series"))
        if isinstance(p, list | tuple) and len(p) == 2 and all(_is_number(v) for v in p)
    )


def _folds(data: dict) -> tuple[Band, ...]:
    bands = (Band.from_json(item) for item in _list(data.get("folds"))[:MAX_FOLDS])
    return tuple(sorted((b for b in bands if b is not None), key=lambda b: b.start))


def _strip(data: dict) -> Strip:
    strip = data.get("strip") if isinstance(data.get("strip"), dict) else {}
    cells = tuple(max(0, min(c, 4)) for c in _list(strip.get("cells"))[:200] if _is_int(c))
    fired = tuple(i for i in _list(strip.get("fired"))[:200] if _is_int(i))
    return Strip(cells, fired)


def build(result: detection.Analysis, turns: list[int], step_count: int) -> RunSummary:
    """Return the summary of one analysis; `turns` are the seqs of the user messages."""
    folds = find_folds(result.ledger, turns)
    cycles = find_cycles(result.findings, folds)
    fired = [f.fired_at for f in result.findings if f.severity != "info"]
    return RunSummary(
        stall_series=tuple((int(seq), float(score)) for seq, score in result.stall_series),
        folds=tuple(sorted(folds + cycles, key=lambda band: band.start)),
        strip=repeat_strip(result.ledger, fired, step_count),
        unknowns=Unknowns(result.tool_calls, result.unknown_args, result.unknown_results),
    )


def find_folds(ledger: Iterable[detection.LedgerEntry], turns: list[int]) -> list[Band]:
    """Return the bands of consecutive no-progress repeats of one call (at least FOLD_MIN).

    Only tool calls count as consecutive; messages between them fold along, a user message
    (a new turn) ends a band.
    """
    folds: list[Band] = []
    turn_set = set(turns)
    group: list[detection.LedgerEntry] = []

    def close() -> None:
        if len(group) >= FOLD_MIN and len(folds) < MAX_FOLDS:
            first, last = group[0], group[-1]
            tool, signature = (first.tool or "")[:200], first.signature[:80]
            folds.append(Band("repeat", first.seq, last.seq, len(group), tool, signature))

    for entry in ledger:
        joins = (
            group
            and entry.signature == group[-1].signature
            and entry.repeat_of is not None
            and not any(seq in turn_set for seq in range(group[-1].seq + 1, entry.seq + 1))
        )
        if joins:
            group.append(entry)
            continue
        close()
        group = [entry]
    close()
    return folds


def find_cycles(findings: Iterable[detection.Finding], folds: list[Band]) -> list[Band]:
    """Return oscillation bands that do not overlap a repeat band."""
    cycles: list[Band] = []
    for finding in findings:
        if finding.detector != "oscillation" or len(finding.seqs) < 2:
            continue
        start, end = min(finding.seqs), max(finding.seqs)
        if any(band.start <= end and start <= band.end for band in folds + cycles):
            continue
        tool, signature = (finding.tool or "")[:200], (finding.signature or "")[:80]
        cycles.append(Band("cycle", start, end, finding.count, tool, signature))
    return cycles


def repeat_strip(
    ledger: Iterable[detection.LedgerEntry], fired: Iterable[int], step_count: int
) -> Strip:
    """Return the runs list's picture: per bucket of steps, how much of it repeats (0-4)."""
    buckets = min(STRIP_BUCKETS, max(step_count, 1))
    repeats = [0] * buckets
    for entry in ledger:
        if entry.repeat_of is not None:
            repeats[min(entry.seq * buckets // max(step_count, 1), buckets - 1)] += 1
    per_bucket = max(step_count, 1) / buckets
    levels = tuple(min(4, round(4 * n / per_bucket)) if n else 0 for n in repeats)
    marks = sorted({min(seq * buckets // max(step_count, 1), buckets - 1) for seq in fired})
    return Strip(levels, tuple(marks[:buckets]))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value[:200] if isinstance(value, str) else ""
