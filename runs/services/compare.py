"""Compare two runs: their steps aligned by call signature, what changed, and the deltas.

Alignment is a patience-style diff, bounded for big runs:

1. trim the common prefix and suffix;
2. anchor on keys that occur exactly once on each side (their longest increasing
   subsequence), and recurse into the gaps between anchors;
3. in a gap without such anchors, run Myers's O(ND) diff, capped at `MAX_EDITS` edits per gap
   and at `EDIT_BUDGET` inner steps for the whole comparison;
4. past either cap, align the gap greedily (match the nearer next occurrence, within
   `GREEDY_WINDOW` steps) and say so (`Comparison.bounded`).

A step's key is its call signature (`Step.call_sig`) for a tool call, and its kind plus a
digest of its text otherwise. Matched keys whose result or status differ are "changed"; the
steps left between matches are paired again by tool (or kind) with the same diff, and a pair
found there is "changed" too (same tool, other arguments). Every step of both runs appears in
exactly one row, in order.

Two paired steps of the same status whose results differ only in volatile values are not
"changed" in their result: the row says so (`Row.volatile`) and counts as equal when nothing
else differs (`Comparison.volatile_only` counts those). The rule: the two results give the
same `detection.fingerprints.scrub_value` text and, for failed calls, their errors name the same exit
code and HTTP status (`detection.keys.error_fault`). So ids, hashes, UUIDs, timestamps, URLs,
paths and numbers inside text are volatile, and so are the values under volatile keys
(`request_id`, `timestamp`, `duration_ms`...); other words, quoted strings, an error's class
and a JSON number (`{"lines": 10}` against `{"lines": 99999}`) are not. When the statuses
differ, the results stay "changed", so that their diff shows beside the new status.

Only the results of pairs whose digests differ are read (once per digest, in row order) and
scrubbed in Python. A result longer than `VOLATILE_CHARS` as JSON text stays "changed", as
when in doubt; so do the results left once `VOLATILE_BUDGET` characters have been scrubbed,
and the page says so (`Comparison.volatile_bounded`).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import hashlib
import logging
import re
import sys
import threading
import time
import zlib
from array import array
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

import orjson
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from detection.fingerprints import FAILED, scrub_value
from detection.keys import error_fault

from ..models import CompareJob, Finding, Run, Step
from . import queue

log = logging.getLogger(__name__)

MAX_EDITS = 600  # Myers's D cap in one gap: its cost grows as D²
EDIT_BUDGET = 1_500_000  # Myers inner steps for one whole comparison
GREEDY_WINDOW = 200  # how far the greedy fallback looks ahead for a match
QUICK_EDITS = 100  # a gap first tries Myers this far before anchoring on unique keys
MAX_DEPTH = 40  # anchoring recursion: deeper gaps go straight to Myers
VOLATILE_CHARS = 32_000  # a longer result (JSON text) is never scrubbed: it stays "changed"
VOLATILE_BUDGET = 2_000_000  # characters of results scrubbed for one whole comparison
VOLATILE_BATCH = 250  # pairs whose results are read in one query per side

TICK_EDITS = 64  # Myers tells the tick how far it is every this many edits
GREEDY_TICK = 4096  # ... and the greedy fallback every this many steps

Pair = tuple[int | None, int | None]
Matcher = Callable[[list[int], list[int]], list[tuple[int, int]] | None]
Tick = Callable[[float], None]  # told the share done (0 to 1); what it raises stops the work

EQUAL, CHANGED, REMOVED, INSERTED = "equal", "changed", "removed", "inserted"


# -- alignment of two key sequences ---------------------------------------------------------


class _Budget:
    """What is left of the Myers budget, whether any gap went past a cap, and whom to tell
    how far the alignment is (the matches so far, in order of ``a``)."""

    def __init__(self, steps: int, max_edits: int, tick: Tick | None = None, size: int = 0):
        self.steps = steps
        self.max_edits = max_edits
        self.bounded = False
        self.tick = tick
        self.size = size
        self.matches: list[tuple[int, int]] = []
        self.done = 0.0

    def check(self, at: int | None = None) -> None:
        """Tell `tick` the share of ``a`` aligned so far, never less than it was told before:
        up to the last match, or to ``at`` (it raises to stop the alignment)."""
        if self.tick is None:
            return
        if at is None:
            at = self.matches[-1][0] if self.matches else 0
        self.done = max(self.done, at / self.size if self.size else 0.0)
        self.tick(self.done)


def align(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    *,
    max_edits: int | None = None,
    budget: int | None = None,
    tick: Tick | None = None,
) -> tuple[list[Pair], bool]:
    """Align two sequences; return (pairs, bounded).

    Pairs are ``(i, j)`` for a match, ``(i, None)`` for an element only in ``a`` and
    ``(None, j)`` for one only in ``b``, in order of both. ``bounded`` says a gap went past
    the caps and was aligned greedily (the result is valid, maybe not the longest).
    ``tick``, when given, is called now and then with the share of ``a`` aligned so far;
    whatever it raises stops the alignment.
    """
    ids: dict[Hashable, int] = {}
    ia = [ids.setdefault(x, len(ids)) for x in a]
    ib = [ids.setdefault(x, len(ids)) for x in b]
    state = _Budget(
        EDIT_BUDGET if budget is None else budget,
        MAX_EDITS if max_edits is None else max_edits,
        tick,
        len(ia),
    )
    matches = state.matches
    _match(ia, ib, 0, len(ia), 0, len(ib), matches, state)
    return _pairs(matches, len(ia), len(ib)), state.bounded


def _pairs(matches: list[tuple[int, int]], n: int, m: int) -> list[Pair]:
    """Spell out matches (ordered) as pairs, with the unmatched elements between them."""
    pairs: list[Pair] = []
    i = j = 0
    for x, y in [*matches, (n, m)]:
        pairs.extend((k, None) for k in range(i, x))
        pairs.extend((None, k) for k in range(j, y))
        if x < n and y < m:
            pairs.append((x, y))
        i, j = x + 1, y + 1
    return pairs


def _match(
    a: list[int],
    b: list[int],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    out: list[tuple[int, int]],
    state: _Budget,
    depth: int = 0,
) -> None:
    """Append the matches of a[alo:ahi] and b[blo:bhi] to ``out``, in order."""
    state.check()
    while alo < ahi and blo < bhi and a[alo] == b[blo]:
        out.append((alo, blo))
        alo, blo = alo + 1, blo + 1
    tail = []
    while ahi > alo and bhi > blo and a[ahi - 1] == b[bhi - 1]:
        ahi, bhi = ahi - 1, bhi - 1
        tail.append((ahi, bhi))
    if alo < ahi and blo < bhi:
        # Runs that differ in a few places get their longest common subsequence outright.
        quick = _reduced_myers(a, b, alo, ahi, blo, bhi, state, QUICK_EDITS)
        anchors = []
        if quick is None and depth < MAX_DEPTH:
            anchors = _unique_anchors(a, b, alo, ahi, blo, bhi)
        if quick is not None:
            out.extend(quick)
        elif anchors:
            i, j = alo, blo
            for x, y in anchors:
                _match(a, b, i, x, j, y, out, state, depth + 1)
                out.append((x, y))
                i, j = x + 1, y + 1
            _match(a, b, i, ahi, j, bhi, out, state, depth + 1)
        else:
            out.extend(_gap(a, b, alo, ahi, blo, bhi, state))
    out.extend(reversed(tail))


def _unique_anchors(
    a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int
) -> list[tuple[int, int]]:
    """Return the keys found once on each side, as the longest chain in order on both."""
    count_a = Counter(a[alo:ahi])
    count_b = Counter(b[blo:bhi])
    where_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
    pairs = [(i, where_b[a[i]]) for i in range(alo, ahi) if count_a[a[i]] == 1 and a[i] in where_b]
    return _longest_chain(pairs)


def _longest_chain(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return the longest subsequence of pairs (ordered by i) increasing in j (patience)."""
    tops: list[int] = []  # the smallest j ending a chain of each length
    ends: list[int] = []  # index into pairs of that chain's end
    back: list[int] = []
    for n, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tops, j)
        back.append(ends[k - 1] if k else -1)
        if k == len(tops):
            tops.append(j)
            ends.append(n)
        else:
            tops[k], ends[k] = j, n
    chain = []
    n = ends[-1] if ends else -1
    while n >= 0:
        chain.append(pairs[n])
        n = back[n]
    return chain[::-1]


def _gap(
    a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int, state: _Budget
) -> list[tuple[int, int]]:
    """Return the matches of a gap without unique anchors: Myers, else greedy."""
    found = _reduced_myers(a, b, alo, ahi, blo, bhi, state, state.max_edits)
    if found is None:
        state.bounded = True

        def greedy(x: list[int], y: list[int]) -> list[tuple[int, int]]:
            return _greedy(x, y, lambda i: state.check(alo + (ahi - alo) * i // len(x)))

        found = _reduced(a, b, alo, ahi, blo, bhi, greedy) or []
    return found


def _reduced_myers(
    a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int, state: _Budget, cap: int
) -> list[tuple[int, int]] | None:
    """Return Myers's matches of a gap within ``cap`` edits, else None."""
    return _reduced(a, b, alo, ahi, blo, bhi, lambda x, y: _myers(x, y, state, cap))


def _reduced(
    a: list[int], b: list[int], alo: int, ahi: int, blo: int, bhi: int, matcher: Matcher
) -> list[tuple[int, int]] | None:
    """Run ``matcher`` on a gap without the keys absent from its other side (never matched,
    as GNU diff leaves them out too) and map its matches back to positions."""
    keys_a, keys_b = set(a[alo:ahi]), set(b[blo:bhi])
    xs = [i for i in range(alo, ahi) if a[i] in keys_b]
    ys = [j for j in range(blo, bhi) if b[j] in keys_a]
    if not xs or not ys:
        return []
    found = matcher([a[i] for i in xs], [b[j] for j in ys])
    if found is None:
        return None
    return [(xs[x], ys[y]) for x, y in found]


def _myers(a: list[int], b: list[int], state: _Budget, cap: int) -> list[tuple[int, int]] | None:
    """Return the matches of a shortest edit script (Myers 1986), or None past ``cap`` edits
    or the budget."""
    n, m = len(a), len(b)
    cap = min(cap, n + m)
    offset = cap + 1
    v = [0] * (2 * cap + 3)
    trace: list[list[int]] = []
    for d in range(cap + 1):
        state.steps -= d + 1
        if state.steps < 0:
            return None
        if d % TICK_EDITS == TICK_EDITS - 1:
            state.check()
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            if x >= n and y >= m:
                trace.append(v[offset - d : offset + d + 1])
                return _myers_path(a, b, trace)
        trace.append(v[offset - d : offset + d + 1])
    return None


def _myers_path(a: list[int], b: list[int], trace: list[list[int]]) -> list[tuple[int, int]]:
    """Walk Myers's saved frontiers back from the end; return the diagonal moves (matches).

    ``trace[d][k + d]`` is the furthest x reached on diagonal k with d edits.
    """
    x, y = len(a), len(b)
    matches: list[tuple[int, int]] = []
    for d in range(len(trace) - 1, 0, -1):
        k = x - y
        prev = trace[d - 1]
        down = k == -d or (k != d and prev[k - 1 + d - 1] < prev[k + 1 + d - 1])
        prev_k = k + 1 if down else k - 1
        prev_x = prev[prev_k + d - 1]
        snake_x = prev_x if down else prev_x + 1  # where the edit landed, the snake began
        while x > snake_x:
            x, y = x - 1, y - 1
            matches.append((x, y))
        x, y = prev_x, prev_x - prev_k
    while x > 0 and y > 0:  # d = 0: the common opening
        x, y = x - 1, y - 1
        matches.append((x, y))
    return matches[::-1]


def _greedy(
    a: list[int], b: list[int], tick: Callable[[int], None] | None = None
) -> list[tuple[int, int]]:
    """Match in one pass: at a mismatch, skip to the nearer next occurrence of either key
    (``tick`` is told the position in ``a`` every GREEDY_TICK steps)."""
    where_a: dict[int, list[int]] = defaultdict(list)
    where_b: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(a):
        where_a[key].append(i)
    for j, key in enumerate(b):
        where_b[key].append(j)

    def next_at(where: dict[int, list[int]], key: int, start: int) -> int | None:
        places = where.get(key, ())
        n = bisect.bisect_left(places, start)
        return places[n] if n < len(places) else None

    matches = []
    i = j = steps = 0
    while i < len(a) and j < len(b):
        steps += 1
        if tick is not None and steps % GREEDY_TICK == 0:
            tick(i)
        if a[i] == b[j]:
            matches.append((i, j))
            i, j = i + 1, j + 1
            continue
        in_b = next_at(where_b, a[i], j)
        in_a = next_at(where_a, b[j], i)
        skip_b = in_b - j if in_b is not None else GREEDY_WINDOW + 1
        skip_a = in_a - i if in_a is not None else GREEDY_WINDOW + 1
        if min(skip_a, skip_b) > GREEDY_WINDOW:
            i, j = i + 1, j + 1
        elif skip_b <= skip_a:
            j = in_b  # type: ignore[assignment]
        else:
            i = in_a  # type: ignore[assignment]
    return matches


# -- two runs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepFacts:
    """What the alignment needs of one step (no args, results or text, only digests)."""

    seq: int
    kind: str
    tool: str
    key: str  # what must be equal for two steps to align
    shape: str  # what must be equal for two unaligned steps to pair as "changed"
    outcome: tuple[str, str | None]  # status and result digest
    tokens: int
    cost: float
    offset: float | None  # seconds since the run started


@dataclass(frozen=True, slots=True)
class Row:
    """One aligned row: a step of each run, or of one of them."""

    kind: str  # equal | changed | removed (left only) | inserted (right only)
    left: int | None  # index into Comparison.left_steps
    right: int | None
    changed: tuple[str, ...] = ()  # "args", "result", "status", "text"
    volatile: tuple[str, ...] = ()  # what differs only in volatile values: "result"


@dataclass(frozen=True, slots=True)
class LoopStart:
    """Where a run started to loop: its first warn or stop finding."""

    detector: str
    severity: str
    tool: str
    started_at: int  # the loop's first iteration (the firing step when unknown)
    fired_at: int


@dataclass(frozen=True, slots=True)
class Totals:
    steps: int
    tool_calls: int
    tokens: int
    cost: float
    seconds: float | None


@dataclass
class Comparison:
    """Two runs aligned step by step, with their totals and loop starts."""

    left: Run
    right: Run
    left_steps: list[StepFacts]
    right_steps: list[StepFacts]
    rows: list[Row]
    bounded: bool
    left_loop: LoopStart | None
    right_loop: LoopStart | None
    counts: dict[str, int] = field(default_factory=dict)  # rows by kind
    volatile_only: int = 0  # equal rows whose results differ only in volatile values
    volatile_bounded: bool = False  # some changed results were not read (VOLATILE_BUDGET)

    def totals(self, side: str) -> Totals:
        """Return a side's steps, calls, tokens, cost and duration (None when untimed)."""
        run, steps = (
            (self.left, self.left_steps) if side == "left" else (self.right, self.right_steps)
        )
        offsets = [s.offset for s in steps if s.offset is not None]
        seconds = run.duration_seconds
        if seconds is None and offsets:
            seconds = max(offsets)
        return Totals(
            steps=len(steps),
            tool_calls=sum(1 for s in steps if s.kind == Step.Kind.TOOL_CALL),
            tokens=sum(s.tokens for s in steps),
            cost=sum(s.cost for s in steps),
            seconds=seconds,
        )

    def loop_row(self, side: str) -> int | None:
        """Return the index of the row holding a side's loop start, if it looped."""
        loop = self.left_loop if side == "left" else self.right_loop
        index = self.index_of(side, loop.started_at) if loop is not None else None
        if index is None:
            return None
        for n, row in enumerate(self.rows):
            if (row.left if side == "left" else row.right) == index:
                return n
        return None

    def index_of(self, side: str, seq: int) -> int | None:
        """Return the index into a side's steps of its step with this seq, if it has one."""
        steps = self.left_steps if side == "left" else self.right_steps
        n = bisect.bisect_left(steps, seq, key=attrgetter("seq"))
        return n if n < len(steps) and steps[n].seq == seq else None


# One pass over a run's steps, in chunks of seqs, with what the alignment needs computed by
# PostgreSQL: digests of results and texts (never the values themselves) and seconds since
# the run started (`origin`: the run's start, else its first step's).
_FACTS_SQL = """
SELECT seq, kind, tool,
       CASE WHEN kind = 'tool_call' THEN 'c' || COALESCE(NULLIF(call_sig, ''), tool)
            ELSE kind || ':' || COALESCE(md5(text), '') END,
       status, md5(result::text),
       COALESCE(tokens_in, 0)::bigint + COALESCE(tokens_out, 0), COALESCE(cost, 0)::float8,
       EXTRACT(EPOCH FROM started_at - %(origin)s::timestamptz)::float8
FROM runs_step WHERE run_id = %(run)s AND seq > %(after)s AND seq <= COALESCE((
    SELECT seq FROM runs_step WHERE run_id = %(run)s AND seq > %(after)s
    ORDER BY seq OFFSET %(last)s LIMIT 1), 2147483647)
ORDER BY seq
"""
# Steps read with one query (the tick is told between chunks). The chunk's last seq is found
# first: with LIMIT on the outer query, PostgreSQL may digest every later step before it sorts.
FACTS_CHUNK = 10_000


def step_facts(run: Run, tick: Tick | None = None) -> list[StepFacts]:
    """Return a run's steps as alignment facts, in order; ``tick`` is told the share read
    (of `Run.step_count`) after each chunk."""
    rows: list[tuple] = []
    with connection.cursor() as cursor:
        origin = run.started_at
        if origin is None:
            cursor.execute("SELECT MIN(started_at) FROM runs_step WHERE run_id = %s", [run.pk])
            origin = cursor.fetchone()[0]
        after = -1
        while True:
            params = {"origin": origin, "run": run.pk, "after": after, "last": FACTS_CHUNK - 1}
            cursor.execute(_FACTS_SQL, params)
            chunk = cursor.fetchall()
            rows.extend(chunk)
            if tick is not None:
                tick(min(len(rows) / run.step_count, 1.0) if run.step_count else 1.0)
            if len(chunk) < FACTS_CHUNK:
                break
            after = chunk[-1][0]
    with _no_gc_pauses():
        return _facts(rows)


def _facts(rows: list[tuple]) -> list[StepFacts]:
    return [
        StepFacts(
            seq=seq,
            kind=kind,
            tool=tool,
            key=key,
            shape=f"c{tool}" if kind == Step.Kind.TOOL_CALL else kind,
            outcome=(status, result_md5),
            tokens=tokens,
            cost=cost,
            offset=offset,
        )
        for seq, kind, tool, key, status, result_md5, tokens, cost, offset in rows
    ]


def align_steps(
    left: list[StepFacts], right: list[StepFacts], tick: Tick | None = None
) -> tuple[list[Row], bool]:
    """Return the rows aligning two runs' steps, and whether a bound was hit (``tick``: as
    for `align`)."""
    pairs, bounded = align([s.key for s in left], [s.key for s in right], tick=tick)
    rows: list[Row] = []
    gap_left: list[int] = []
    gap_right: list[int] = []
    for i, j in [*pairs, (None, None)]:
        if i is not None and j is None:
            gap_left.append(i)
            continue
        if i is None and j is not None:
            gap_right.append(j)
            continue
        if gap_left or gap_right:
            paired, gap_bounded = _pair_gap(left, right, gap_left, gap_right)
            rows.extend(paired)
            bounded = bounded or gap_bounded
            gap_left, gap_right = [], []
        if i is not None and j is not None:
            if left[i].outcome == right[j].outcome:
                rows.append(Row(EQUAL, i, j))
            else:
                rows.append(Row(CHANGED, i, j, _outcome_differences(left[i], right[j])))
    return rows, bounded


def _pair_gap(
    left: list[StepFacts], right: list[StepFacts], gap_left: list[int], gap_right: list[int]
) -> tuple[list[Row], bool]:
    """Pair the unmatched steps between two matches by tool (or kind): those are changes."""
    if not gap_left or not gap_right:
        rows = [Row(REMOVED, i, None) for i in gap_left]
        return rows + [Row(INSERTED, None, j) for j in gap_right], False
    pairs, bounded = align([left[i].shape for i in gap_left], [right[j].shape for j in gap_right])
    rows = []
    for x, y in pairs:
        i = gap_left[x] if x is not None else None
        j = gap_right[y] if y is not None else None
        if i is not None and j is not None:
            what = _outcome_differences(left[i], right[j])
            if left[i].key != right[j].key:
                what = ("args" if left[i].kind == Step.Kind.TOOL_CALL else "text", *what)
            rows.append(Row(CHANGED if what else EQUAL, i, j, what))
        elif i is not None:
            rows.append(Row(REMOVED, i, None))
        else:
            rows.append(Row(INSERTED, None, j))
    return rows, bounded


def _outcome_differences(a: StepFacts, b: StepFacts) -> tuple[str, ...]:
    """Return what differs in the outcome of two steps: their result, their status."""
    what = []
    if a.outcome[1] != b.outcome[1]:
        what.append("result")
    if a.outcome[0] != b.outcome[0]:
        what.append("status")
    return tuple(what)


# The results of some steps as JSON text, when not longer than a limit.
_RESULTS_SQL = """
SELECT seq, result::text FROM runs_step
WHERE run_id = %s AND seq = ANY(%s::integer[]) AND length(result::text) <= %s ORDER BY seq
"""


def settle_volatile(
    left: Run,
    right: Run,
    left_steps: list[StepFacts],
    right_steps: list[StepFacts],
    rows: list[Row],
    tick: Tick | None = None,
) -> tuple[list[Row], bool]:
    """Return the rows with "result" taken out of what changed, and into `Row.volatile`,
    where two results differ only in volatile values (see the module's docstring), and
    whether the budget ran out before every changed result was read. ``tick`` is told the
    share of those rows done before each batch."""
    todo = [
        n
        for n, row in enumerate(rows)
        if "result" in row.changed and "status" not in row.changed  # the same status
    ]
    results = _Results(VOLATILE_BUDGET)
    out = list(rows)
    for start in range(0, len(todo), VOLATILE_BATCH):
        if tick is not None:
            tick(start / len(todo))
        batch = todo[start : start + VOLATILE_BATCH]
        pairs = [(left_steps[rows[n].left], right_steps[rows[n].right]) for n in batch]  # type: ignore[index]
        texts = results.fetch(left, [a for a, _ in pairs]) | results.fetch(
            right, [b for _, b in pairs]
        )
        for n, (a, b) in zip(batch, pairs, strict=True):
            if not (results.scrub(a, texts) and results.scrub(b, texts)):
                return out, True
            if results.volatile_only(a, b):
                row = rows[n]
                changed = tuple(what for what in row.changed if what != "result")
                kind = CHANGED if changed else EQUAL
                out[n] = Row(kind, row.left, row.right, changed, ("result",))
    return out, False


class _Results:
    """The scrubbed results of one comparison, each scrubbed once (by digest), within a budget."""

    def __init__(self, budget: int) -> None:
        self.texts: dict[str, str | None] = {}  # digest -> scrubbed text (None: too long)
        self.codes: dict[str, str] = {}  # digest -> exit code and HTTP status (failed calls)
        self.budget = budget  # characters of JSON text left to scrub

    def fetch(self, run: Run, steps: list[StepFacts]) -> dict[str, str]:
        """Return {digest: JSON text} of these steps' results still to scrub, leaving out
        those longer than VOLATILE_CHARS."""
        wanted: dict[str, int] = {}  # digest -> the seq of one step to read it from
        for step in steps:
            status, digest = step.outcome
            if digest is not None and not self._done(digest, status in FAILED):
                wanted.setdefault(digest, step.seq)
        if not wanted:
            return {}
        seqs = {seq: digest for digest, seq in wanted.items()}
        with connection.cursor() as cursor:
            cursor.execute(_RESULTS_SQL, [run.pk, list(seqs), VOLATILE_CHARS])
            return {seqs[seq]: text for seq, text in cursor.fetchall()}

    def scrub(self, step: StepFacts, fetched: dict[str, str]) -> bool:
        """Scrub a step's result from its fetched text unless done; False past the budget."""
        status, digest = step.outcome
        if digest is None or self._done(digest, status in FAILED):
            return True
        text = fetched.get(digest)  # None: longer than VOLATILE_CHARS
        if text is not None and len(text) > self.budget:
            return False
        try:
            result = orjson.loads(text) if text is not None else None
        except orjson.JSONDecodeError:  # nested deeper than orjson reads: as too long
            text = None
        if text is None:
            self.texts[digest] = None  # it stays changed
            return True
        self.budget -= len(text)
        self.texts[digest] = scrub_value(result)
        if status in FAILED:
            self.codes[digest] = _error_codes(result)
        return True

    def volatile_only(self, a: StepFacts, b: StepFacts) -> bool:
        """Return whether two steps' scrubbed results, of the same status, differ only in
        volatile values."""
        text_a, text_b = self._text(a), self._text(b)
        if text_a is None or text_a != text_b:
            return False
        if a.outcome[0] in FAILED:
            code_a = self.codes.get(a.outcome[1] or "")
            return code_a is not None and code_a == self.codes.get(b.outcome[1] or "")
        return True

    def _done(self, digest: str, failed: bool) -> bool:
        """Return whether a result is scrubbed (with its codes, for a failed call) or too long."""
        if digest not in self.texts:
            return False
        return self.texts[digest] is None or not failed or digest in self.codes

    def _text(self, step: StepFacts) -> str | None:
        digest = step.outcome[1]
        return scrub_value(None) if digest is None else self.texts.get(digest)


def _error_codes(result: Any) -> str:
    """Return the exit code and HTTP status a failed call's result names: never volatile."""
    fault = error_fault(result)
    exit_code = fault.key.partition("exit=")[2].partition(";")[0]  # the key opens with them
    return f"{exit_code};{fault.status}"


def loop_start(run: Run) -> LoopStart | None:
    """Return where a run started to loop: its first warn or stop finding, by firing step."""
    finding = (
        Finding.objects.filter(run=run, severity__in=[Finding.Severity.WARN, Finding.Severity.STOP])
        .order_by("fired_at", "id")
        .first()
    )
    if finding is None:
        return None
    started = finding.started_at if finding.started_at is not None else finding.fired_at
    return LoopStart(finding.detector, finding.severity, finding.tool, started, finding.fired_at)


# -- one comparison, as the worker computes it ---------------------------------------------

# Each phase of `compare_runs` and its share of the whole (reading the steps is weighed by
# each run's step count within READ_SHARE).
READ_SHARE = 0.6
ALIGN_SHARE = 0.25
VOLATILE_SHARE = 0.13
Progress = Callable[[str, float], None]  # told the phase (in words) and the share done


def _phase(progress: Progress | None, phase: str, start: float, share: float) -> Tick | None:
    """Return a tick that reports a phase's own share done as a share of the whole."""
    if progress is None:
        return None
    progress(phase, start)
    return lambda done: progress(phase, start + share * done)


def compare_runs(left: Run, right: Run, progress: Progress | None = None) -> Comparison:
    """Align two runs' steps and gather their totals and loop starts (reads only).

    ``progress``, when given, is told what is being done and how far along the comparison
    is, between chunks of the work; whatever it raises stops the comparison.
    """
    sizes = max(left.step_count + right.step_count, 1)
    left_share = READ_SHARE * left.step_count / sizes
    read = _phase(progress, "reading the left run's steps", 0.0, left_share)
    left_steps = step_facts(left, read)
    read = _phase(progress, "reading the right run's steps", left_share, READ_SHARE - left_share)
    right_steps = step_facts(right, read)
    rows, bounded = align_steps(
        left_steps, right_steps, _phase(progress, "aligning the steps", READ_SHARE, ALIGN_SHARE)
    )
    checking = _phase(
        progress, "checking changed results", READ_SHARE + ALIGN_SHARE, VOLATILE_SHARE
    )
    rows, volatile_bounded = settle_volatile(left, right, left_steps, right_steps, rows, checking)
    if progress is not None:
        progress(
            "finding where each run started to loop", READ_SHARE + ALIGN_SHARE + VOLATILE_SHARE
        )
    return Comparison(
        left=left,
        right=right,
        left_steps=left_steps,
        right_steps=right_steps,
        rows=rows,
        bounded=bounded,
        left_loop=loop_start(left),
        right_loop=loop_start(right),
        counts=dict(Counter(row.kind for row in rows)),
        volatile_only=sum(1 for row in rows if row.volatile and row.kind == EQUAL),
        volatile_bounded=volatile_bounded,
    )


# -- the stored form -----------------------------------------------------------------------

# The version of the stored form and of what it holds: part of every cache key, so a new
# alignment or a new form never meets a comparison stored by an older one.
FORMAT = 2
_KINDS = (EQUAL, CHANGED, REMOVED, INSERTED)
_WHAT = ("args", "text", "result", "status")  # the order a Row lists what changed in
_WHAT_OF = [tuple(w for n, w in enumerate(_WHAT) if mask >> n & 1) for mask in range(16)]


def encode(cmp: Comparison) -> bytes:
    """Return a comparison (without its two Run rows) in its stored form: a JSON header and
    packed arrays (rows, and the steps' seqs, kinds, tools, statuses, tokens, cost and time
    offsets), compressed with zlib. The alignment keys and result digests are not kept."""
    header: dict[str, Any] = {
        "format": FORMAT,
        "order": sys.byteorder,
        "bounded": cmp.bounded,
        "loops": [asdict(loop) if loop else None for loop in (cmp.left_loop, cmp.right_loop)],
        "counts": cmp.counts,
        "volatile_only": cmp.volatile_only,
        "volatile_bounded": cmp.volatile_bounded,
    }
    kind_of = {kind: n for n, kind in enumerate(_KINDS)}
    arrays: list[tuple[str, array]] = [
        ("rows.kind", array("b", [kind_of[row.kind] for row in cmp.rows])),
        ("rows.left", array("i", [-1 if row.left is None else row.left for row in cmp.rows])),
        ("rows.right", array("i", [-1 if row.right is None else row.right for row in cmp.rows])),
        ("rows.changed", array("b", [_mask(row.changed) for row in cmp.rows])),
        ("rows.volatile", array("b", [_mask(row.volatile) for row in cmp.rows])),
    ]
    for side, steps in (("left", cmp.left_steps), ("right", cmp.right_steps)):
        names: dict[str, dict[str, int]] = {"kind": {}, "tool": {}, "status": {}}
        codes = {
            what: array("i", [names[what].setdefault(value, len(names[what])) for value in values])
            for what, values in (
                ("kind", (s.kind for s in steps)),
                ("tool", (s.tool for s in steps)),
                ("status", (s.outcome[0] for s in steps)),
            )
        }
        header[side] = {what: list(found) for what, found in names.items()}
        arrays += [
            (f"{side}.seq", array("q", [s.seq for s in steps])),
            *((f"{side}.{what}", code) for what, code in codes.items()),
            (f"{side}.tokens", array("q", [s.tokens for s in steps])),
            (f"{side}.cost", array("d", [s.cost for s in steps])),
            (f"{side}.offset", array("d", [_NAN if s.offset is None else s.offset for s in steps])),
        ]
    header["arrays"] = [(name, values.typecode, len(values)) for name, values in arrays]
    head = orjson.dumps(header)
    body = b"".join(values.tobytes() for _, values in arrays)
    return zlib.compress(len(head).to_bytes(4, "big") + head + body, 1)


@contextlib.contextmanager
def _no_gc_pauses():
    """Hold the cyclic garbage collector while hundreds of thousands of small objects that
    hold no cycles are made: otherwise each generation-2 pass walks the web process's whole
    heap: a 100k-step decode took 1.6-1.9x as long beside 2M other objects (load 4-5)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def decode(data: bytes, left: Run, right: Run) -> Comparison:
    """Return the comparison `encode` stored, with these two runs. Its steps carry what the
    page shows; their alignment key, shape and result digest are empty (not kept)."""
    with _no_gc_pauses():
        return _decode(data, left, right)


def _decode(data: bytes, left: Run, right: Run) -> Comparison:
    raw = zlib.decompress(data)
    size = int.from_bytes(raw[:4], "big")
    header = orjson.loads(raw[4 : 4 + size])
    at = 4 + size
    arrays: dict[str, array] = {}
    for name, typecode, length in header["arrays"]:
        values = array(typecode)
        values.frombytes(raw[at : at + length * values.itemsize])
        if header["order"] != sys.byteorder:
            values.byteswap()
        arrays[name] = values
        at += length * values.itemsize
    steps = {}
    for side in ("left", "right"):
        names = header[side]
        kinds, tools, statuses = names["kind"], names["tool"], names["status"]
        steps[side] = [
            StepFacts(seq, kinds[kind], tools[tool], "", "", (statuses[status], None), tokens,
                      cost, None if offset != offset else offset)  # NaN: no time
            for seq, kind, tool, status, tokens, cost, offset in zip(
                *(arrays[f"{side}.{what}"] for what in _STEP_COLUMNS), strict=True
            )
        ]  # fmt: skip
    rows = [
        Row(_KINDS[kind], None if i < 0 else i, None if j < 0 else j, _WHAT_OF[c], _WHAT_OF[v])
        for kind, i, j, c, v in zip(
            *(arrays[f"rows.{what}"] for what in ("kind", "left", "right", "changed", "volatile")),
            strict=True,
        )
    ]
    left_loop, right_loop = (LoopStart(**loop) if loop else None for loop in header["loops"])
    return Comparison(
        left=left,
        right=right,
        left_steps=steps["left"],
        right_steps=steps["right"],
        rows=rows,
        bounded=header["bounded"],
        left_loop=left_loop,
        right_loop=right_loop,
        counts=header["counts"],
        volatile_only=header["volatile_only"],
        volatile_bounded=header["volatile_bounded"],
    )


_NAN = float("nan")
_STEP_COLUMNS = ("seq", "kind", "tool", "status", "tokens", "cost", "offset")


def _mask(what: tuple[str, ...]) -> int:
    return sum(1 << _WHAT.index(w) for w in what)


def _state(run: Run) -> str:
    """What changes when a run's steps or findings do: its analysis (a policy change
    re-analyzes), its live appends, and retention taking its steps."""
    expired = run.steps_expired_at.isoformat() if run.steps_expired_at else ""
    analyzed = run.analyzed_at.isoformat() if run.analyzed_at else ""
    return f"{run.pk}:{analyzed}:{run.step_count}:{run.version}:{expired}"


def cache_key(left: Run, right: Run) -> str:
    """Return the digest of what a comparison of these two runs depends on."""
    text = f"{FORMAT}|{_state(left)}|{_state(right)}"
    return hashlib.sha256(text.encode()).hexdigest()


# The last few stored comparisons this process decoded: paging through one and unfolding its
# stretches would otherwise decode it again on every request. Keyed by the cache key, which
# holds FORMAT and both runs' state, so a changed run or a new module misses.
_CACHE: OrderedDict[str, Comparison] = OrderedDict()
_CACHE_PAIRS = 4
_CACHE_LOCK = threading.Lock()  # threaded servers share the module


def stored_comparison(job: CompareJob, left: Run, right: Run) -> Comparison:
    """Return a done job's comparison, with these two runs (decoded once per process)."""
    with _CACHE_LOCK:
        if (cached := _CACHE.get(job.cache_key)) is not None:
            _CACHE.move_to_end(job.cache_key)
    if cached is not None:
        return replace(cached, left=left, right=right)
    data = CompareJob.objects.values_list("result", flat=True).get(pk=job.pk)
    comparison = decode(bytes(data), left, right)
    with _CACHE_LOCK:
        _CACHE[job.cache_key] = comparison
        while len(_CACHE) > _CACHE_PAIRS:
            _CACHE.popitem(last=False)
    return comparison


# -- the job: opened by the page, computed by the worker ------------------------------------

PROGRESS_SECONDS = 0.5  # how often a running job writes its progress (and reads cancel)
# A job with no sign of life for this long (its worker died, or its message was lost) is
# queued again by the next visit; the worker writes its heartbeat every PROGRESS_SECONDS.
STALE_SECONDS = 60
UNFINISHED = (CompareJob.Status.QUEUED, CompareJob.Status.RUNNING)


class Stopped(Exception):
    """The job was cancelled, or another claim took it over: stop computing."""


def _stale_cutoff() -> datetime:
    seconds = min(STALE_SECONDS, settings.LOOPBOARD_STALE_SECONDS)
    return timezone.now() - timedelta(seconds=seconds)


def open_job(left: Run, right: Run) -> CompareJob:
    """Return the comparison job of these two runs as they are now, creating and queueing it
    (on commit) when there is none.

    Two requests at once get the same job (a unique constraint on the pair and its cache
    key). A new job replaces the pair's jobs of older states. A job whose worker died or
    whose message was lost (no sign of life for the stale period) is queued again, or
    cancelled if Cancel was pressed. A cancelled or failed job stays as it is until `retry`.
    """
    key = cache_key(left, right)
    with transaction.atomic():
        # Without the result: a poll never reads it, and a page reads it only to decode it.
        job, created = CompareJob.objects.defer("result").get_or_create(
            left=left,
            right=right,
            cache_key=key,
            defaults={"project_id": left.project_id, "heartbeat_at": timezone.now()},
        )
        if created:
            CompareJob.objects.filter(left=left, right=right).exclude(pk=job.pk).delete()
            queue.queue_compare(job.pk)
        elif job.status in UNFINISHED and (job.heartbeat_at or job.created_at) < _stale_cutoff():
            if _revive(job.pk):
                queue.queue_compare(job.pk)
            job.refresh_from_db(fields=["status", "heartbeat_at", "finished_at"])
    return job


def _revive(job_id: int) -> bool:
    """End a job without a sign of life that was asked to cancel, else put it back to queued
    (one caller wins); return whether it must be queued again."""
    now = timezone.now()
    stale = CompareJob.objects.filter(
        pk=job_id, status__in=UNFINISHED, heartbeat_at__lt=_stale_cutoff()
    )
    stale.filter(cancel_requested=True).update(status=CompareJob.Status.CANCELLED, finished_at=now)
    queued = stale.filter(cancel_requested=False).update(
        status=CompareJob.Status.QUEUED, heartbeat_at=now
    )
    return bool(queued)


def requeue_stale() -> int:
    """Queue again every job left without a sign of life (for recovery); a dead worker's job
    that was asked to cancel is cancelled. Returns how many were queued."""
    stale = CompareJob.objects.filter(status__in=UNFINISHED, heartbeat_at__lt=_stale_cutoff())
    job_ids = [job_id for job_id in stale.values_list("pk", flat=True) if _revive(job_id)]
    for job_id in job_ids:
        queue.queue_compare(job_id)
    return len(job_ids)


def cancel(left: Run, right: Run) -> CompareJob | None:
    """Ask the pair's unfinished job to stop: a queued one is cancelled at once, a running
    one at its next progress write. Returns the pair's latest job (None when there is none)."""
    jobs = CompareJob.objects.filter(left=left, right=right)
    jobs.filter(status=CompareJob.Status.QUEUED).update(
        status=CompareJob.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    )
    jobs.filter(status=CompareJob.Status.RUNNING).update(cancel_requested=True)
    return jobs.first()


def retry(left: Run, right: Run) -> CompareJob:
    """Queue a cancelled or failed comparison of the pair (as the runs are now) again."""
    job = open_job(left, right)
    with transaction.atomic():
        again = CompareJob.objects.filter(
            pk=job.pk, status__in=[CompareJob.Status.CANCELLED, CompareJob.Status.FAILED]
        ).update(
            status=CompareJob.Status.QUEUED, cancel_requested=False, progress=0, phase="",
            error="", heartbeat_at=timezone.now(), finished_at=None,
        )  # fmt: skip
        if again:
            queue.queue_compare(job.pk)
    job.refresh_from_db()
    return job


CLAIM = f"""
    UPDATE {CompareJob._meta.db_table}
    SET status = 'running', attempt = attempt + 1, heartbeat_at = now(), progress = 0,
        started_at = COALESCE(started_at, now())
    WHERE id = %s AND NOT cancel_requested
      AND (status = 'queued' OR (status = 'running' AND heartbeat_at < %s))
    RETURNING attempt
"""

PROGRESS = f"""
    UPDATE {CompareJob._meta.db_table}
    SET progress = %s, phase = %s, heartbeat_at = now()
    WHERE id = %s AND attempt = %s AND status = 'running'
    RETURNING cancel_requested
"""


def run_job(job_id: int) -> CompareJob | None:
    """Claim the job and compute it to its end (done, cancelled or failed); the task body.

    Returns None when the job is not there to claim: finished, cancelled, replaced, or held
    by a worker with a fresh heartbeat. A lost database is raised (the task retries; a job
    left running is queued again once stale); any other error fails the job with the reason.
    """
    with connection.cursor() as cursor:
        cursor.execute(CLAIM, [job_id, _stale_cutoff()])
        row = cursor.fetchone()
    if row is None:
        return None
    attempt = row[0]
    job = CompareJob.objects.select_related("left", "right").defer("result").get(pk=job_id)
    mine = CompareJob.objects.filter(pk=job_id, attempt=attempt, status=CompareJob.Status.RUNNING)
    try:
        if cache_key(job.left, job.right) != job.cache_key:
            raise ValueError("a run changed since this comparison was asked for: open it again")
        comparison = compare_runs(job.left, job.right, _Heartbeat(job_id, attempt))
        mine.update(
            status=CompareJob.Status.DONE, result=encode(comparison), progress=1, phase="",
            finished_at=timezone.now(), heartbeat_at=timezone.now(),
        )  # fmt: skip
    except Stopped:
        mine.filter(cancel_requested=True).update(
            status=CompareJob.Status.CANCELLED, finished_at=timezone.now()
        )
    except OperationalError:
        raise
    except SoftTimeLimitExceeded:
        _fail(mine, "the comparison took longer than the worker's time limit")
    except Exception as exc:
        log.exception("comparison job %s failed", job_id)
        _fail(mine, f"{type(exc).__name__}: {exc}")
    job.refresh_from_db()
    return job


def _fail(mine: QuerySet[CompareJob], error: str) -> None:
    mine.update(status=CompareJob.Status.FAILED, error=error[:2000], finished_at=timezone.now())


class _Heartbeat:
    """The progress of one claim of a job: written at most every PROGRESS_SECONDS; raises
    Stopped when the job was cancelled, deleted (replaced) or claimed again."""

    def __init__(self, job_id: int, attempt: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.last = time.monotonic()
        self.phase = ""

    def __call__(self, phase: str, done: float) -> None:
        now = time.monotonic()
        if phase == self.phase and now - self.last < PROGRESS_SECONDS:
            return
        self.phase, self.last = phase, now
        with connection.cursor() as cursor:
            cursor.execute(PROGRESS, [min(done, 1.0), phase, self.job_id, self.attempt])
            row = cursor.fetchone()
        if row is None or row[0]:
            raise Stopped


# -- which run to compare with -------------------------------------------------------------

_VARIABLE = re.compile(r"[0-9a-f]{8,}|\d+")


def name_pattern(name: str) -> str | None:
    """Return a regex matching names like this one with other numbers or ids (run-7, run-8)."""
    parts = _VARIABLE.split(name)
    if len(parts) == 1 or not "".join(parts).strip(" -_#:./"):
        return None
    return "^" + r"(?:[0-9a-f]{8,}|\d+)".join(re.escape(part) for part in parts) + "$"


def default_other(run: Run) -> Run | None:
    """Return the run to compare with by default: the previous run of the same task
    (same metadata task, same name, or the same name or session id with other numbers),
    else of the same agent, else the previous run of the project; a later one when none
    came before."""
    others = Run.objects.filter(project_id=run.project_id).exclude(pk=run.pk)
    meta = run.metadata if isinstance(run.metadata, dict) else {}
    tests = []
    if isinstance(meta.get("task"), str) and meta["task"]:
        tests.append(Q(metadata__task=meta["task"]))
    tests.append(Q(name=run.name))
    if pattern := name_pattern(run.name):
        tests.append(Q(name__regex=pattern))
    if run.external_id != run.name and (pattern := name_pattern(run.external_id)):
        tests.append(Q(external_id__regex=pattern))
    if run.agent:
        tests.append(Q(agent=run.agent))
    tests.append(Q())
    before = Q(created_at__lt=run.created_at) | Q(created_at=run.created_at, pk__lt=run.pk)
    for test in tests:
        same = others.filter(test)
        found = same.filter(before).order_by("-created_at", "-id").first()
        if found is None:
            found = same.order_by("created_at", "id").first()
        if found is not None:
            return found
    return None


def candidates(run: Run, query: str = "", first: Run | None = None, limit: int = 50) -> list[Run]:
    """Return runs to compare with: ``first`` (already allowed), then the run's project's
    other runs, newest first, whose name or session id holds ``query`` (or whose id it is)."""
    others = Run.objects.filter(project_id=run.project_id).exclude(pk=run.pk)
    if first is not None:
        others = others.exclude(pk=first.pk)
    if query:
        test = Q(name__icontains=query) | Q(external_id__icontains=query)
        if query.lstrip("#").isdigit():
            test |= Q(pk=int(query.lstrip("#")))
        others = others.filter(test)
    found = others.only("id", "name", "verdict", "step_count", "created_at")
    found = list(found.order_by("-created_at", "-id")[:limit])
    return [first, *found] if first is not None and not query else found
