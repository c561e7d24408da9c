"""What the engine gives back: findings, the ledger, a live check, a run's analysis.

Plain data with ``to_dict()`` for JSON, read-only by convention; wording lives in
``message``, colour and layout belong to whoever shows it. The classes made per finding or
per call are written out rather than dataclasses: mypyc compiles their constructors to C,
where a dataclass keeps a generated Python ``__init__`` (a run can have thousands).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from struct import error as StructError
from struct import pack as _pack
from typing import Any, Final

__all__ = [
    "SEVERITIES", "Analysis", "Check", "Finding", "Ledger", "LedgerEntry", "Waste", "worst",
]  # fmt: skip

SEVERITIES: Final = ("info", "warn", "stop")
_RANK: Final = {"ok": 0, "info": 1, "warn": 2, "stop": 3}


def worst(severities: Any) -> str:
    """Return the run verdict for some severities: ok, warn or stop (info is ok)."""
    best = "ok"
    for severity in severities:
        if _RANK[severity] > _RANK[best]:
            best = severity
    return "ok" if best == "info" else best


class Waste:
    """What a loop cost: its own iterations after it first warned, up to its last one.

    The steps from the warn to the loop's last iteration count (those in between belong to
    the loop); the steps after the agent moved on do not. tokens/cost/seconds are those
    steps' own, None when the trace does not record them.
    """

    __slots__ = ("cost", "seconds", "steps", "tokens")

    def __init__(
        self,
        steps: int = 0,
        tokens: int | None = None,
        cost: float | None = None,
        seconds: float | None = None,
    ) -> None:
        self.steps = steps
        self.tokens = tokens
        self.cost = cost
        self.seconds = seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "cost": self.cost,
            "seconds": self.seconds,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Waste):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Waste({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


class Finding:
    """One detected loop or breach, with the threshold it crossed and what to do instead.

    Plain slots and a written-out __init__ (not a dataclass): mypyc compiles it into a C
    constructor, where a dataclass keeps a Python-level one (a run can have thousands).
    """

    __slots__ = (
        "count", "detector", "fired_at", "loop", "message", "rule", "seqs", "severity",
        "signature", "started_at", "stop_at", "threshold", "tool", "waste",
    )  # fmt: skip

    def __init__(
        self,
        detector: str,  # registry name, e.g. "repeat"
        severity: str,  # info | warn | stop
        tool: str | None,  # the tool involved (None for message loops, step budgets)
        signature: str,  # call signature (or the detector's own key: cycle, batch, text)
        seqs: tuple[int, ...],  # steps involved (the first 100)
        count: int,  # how many times, in the detector's unit (calls, cycles, batches)
        threshold: int,  # the threshold the count crossed for this severity
        fired_at: int,  # seq of the step where the finding first fired (its first threshold)
        message: str,  # what is repeated, since when, what to do instead (for an agent)
        rule: str,  # the policy row that set the threshold
        waste: Waste | None = None,  # its own iterations after its first warn (Waste)
        stop_at: int | None = None,  # seq where it crossed the stop threshold
        started_at: int | None = None,  # seq of the loop's first iteration (default: fired_at)
        loop: int = -1,  # index (in the run's findings) of the loop it belongs to; -1: its own
    ) -> None:
        self.detector = detector
        self.severity = severity
        self.tool = tool
        self.signature = signature
        self.seqs = seqs
        self.count = count
        self.threshold = threshold
        self.fired_at = fired_at
        self.message = message
        self.rule = rule
        self.waste = waste if waste is not None else Waste()
        self.stop_at = stop_at
        self.started_at = started_at if started_at is not None else fired_at
        self.loop = loop

    def to_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "severity": self.severity,
            "tool": self.tool,
            "signature": self.signature,
            "seqs": list(self.seqs),
            "count": self.count,
            "threshold": self.threshold,
            "fired_at": self.fired_at,
            "message": self.message,
            "rule": self.rule,
            "waste": self.waste.to_dict(),
            "stop_at": self.stop_at,
            "started_at": self.started_at,
            "loop": self.loop,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Finding({self.detector!r}, {self.severity!r}, tool={self.tool!r}, "
            f"count={self.count}, started_at={self.started_at}, fired_at={self.fired_at}, "
            f"seqs={self.seqs!r})"
        )


class LedgerEntry:
    """One tool call in the progress ledger."""

    __slots__ = ("count", "progress_signature", "repeat_of", "seq", "signature", "tool")

    def __init__(
        self,
        seq: int,
        tool: str,
        signature: str,  # call signature
        progress_signature: str,  # call + result + status (ok, error or invalid)
        repeat_of: int | None,  # first seq of the calls this one repeats without progress
        count: int,  # calls in that no-progress group so far (1 = new)
    ) -> None:
        self.seq = seq
        self.tool = tool
        self.signature = signature
        self.progress_signature = progress_signature
        self.repeat_of = repeat_of
        self.count = count

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "tool": self.tool,
            "signature": self.signature,
            "progress_signature": self.progress_signature,
            "repeat_of": self.repeat_of,
            "count": self.count,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LedgerEntry):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LedgerEntry({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"


_NO_REPEAT: Final = -(2**63)  # the ledger's repeat_of column: the call repeated nothing
_NO_BITS: Final = "0" * 16  # (the digest column's word for a text kept as it is, in _odd)
#: Calls held as plain lists before they are packed into the columns: packing a batch is a
#: few C calls (a join, bytes.fromhex, array.extend) instead of a dozen calls per call.
PACK_EVERY: Final = 1024


def _append(column: Any, value: Any) -> Any:
    """Append to an int column; return the column (a list from there on when the value is
    no machine word: a seq of a trace's own, say)."""
    try:
        column.append(value)
    except (OverflowError, TypeError):
        column = list(column)
        column.append(value)
    return column


def _extend(column: Any, values: list[Any]) -> Any:
    """``_append`` each value in turn; return the column (all at once when all fit)."""
    if isinstance(column, list):
        column.extend(values)
        return column
    try:  # (all or nothing; struct reads ints as array does, only faster)
        column.frombytes(_pack(f"{len(values)}q", *values))
    except (OverflowError, TypeError, StructError):
        for value in values:
            column = _append(column, value)
    return column


def _hex_digits(text: str) -> bool:
    """Whether a text is 16 hex digits as the engine writes a digest (lower case)."""
    if len(text) != 16:
        return False
    try:
        return bytes.fromhex(text).hex() == text
    except ValueError:
        return False


def _pack_digests(column: bytearray, texts: list[str], odd: dict[tuple[int, int], str],
                  first: int, which: int, tools: list[str]) -> None:  # fmt: skip
    """Append the 64 bits of each text of 16 hex digits; keep any other text as it is in
    ``odd`` (``which`` 0: a signature's digits after its tool's name, 1: a result digest)."""
    joined = "".join(texts)
    try:
        packed = bytes.fromhex(joined)
    except ValueError:
        packed = b""
    if len(packed) * 2 == len(joined) and joined.lower() == joined:  # (none left out or upper)
        column += packed  # (every text of the engine's: 16 hex digits each)
        return
    for index, text in enumerate(texts):
        if not _hex_digits(text):
            odd[(first + index, which)] = f"{tools[first + index]}:{text}" if not which else text
            text = _NO_BITS
        column += bytes.fromhex(text)


class Ledger:
    """The progress ledger of a run: one LedgerEntry per tool call, in order.

    Kept as columns of machine words: the call's seq, its repeat and count, and its signature
    and result digest as their 64 bits (the engine's digests are 16 hex digits; any other text
    is kept as it is, by index), the tool and status as shared strings. A run of a million
    calls costs about 56 bytes a call, adds no million objects for the garbage collector to
    walk, and keeps none of its steps alive; entries are made as they are read (iterate it,
    index it, or take ``repeats()``). The last calls added (up to PACK_EVERY) wait in plain
    lists and are packed in one go, when there are that many or when the ledger is read.
    """

    __slots__ = ("_count", "_new", "_new_count", "_new_rdig", "_new_repeat", "_new_seq",
                 "_new_sig", "_odd", "_rdig", "_repeat_of", "_seq", "_sig", "_status", "_tool",
                 "_tools")  # fmt: skip

    def __init__(self) -> None:
        # int columns: machine words (a list when a value does not fit one: _append)
        self._seq: Any = array("q")
        self._repeat_of: Any = array("q")
        self._count: Any = array("q")
        self._sig = bytearray()  # 64 bits of the signature's digest a call (see _odd)
        self._rdig = bytearray()
        self._tool: list[str] = []
        self._status: list[str] = []
        self._tools: dict[str, str] = {}  # one string per tool name
        self._odd: dict[tuple[int, int], str] = {}  # (index, 0 sig | 1 rdig) -> its text
        # the calls not packed yet: their seqs, repeats, counts and digests' hex digits
        self._new = 0
        self._new_seq: list[Any] = []
        self._new_repeat: list[Any] = []
        self._new_count: list[Any] = []
        self._new_sig: list[str] = []
        self._new_rdig: list[str] = []

    def add(
        self,
        seq: int,
        name: str,
        status: str,
        sig: str,
        digits: str,
        rdig: str,
        repeat_of: int | None,
        count: int,
    ) -> None:
        """Add a call of tool ``name``; ``status`` is "ok", "error" or "invalid" (the engine
        calls any other step status "ok"). ``digits`` are the 16 hex digits that end ``sig``
        after the tool's name and ":" (``sig`` is ``f"{name}:{digits}"``), or "" when ``sig``
        is another text."""
        tools = self._tool
        index = len(tools)
        if index and tools[index - 1] is name:
            tool = name  # (the tool of the call before: its one string already)
        else:
            found = self._tools.get(name)
            if found is None:
                found = self._tools[name] = name
            tool = found
        tools.append(tool)
        self._status.append(status)
        if len(digits) != 16:
            self._odd[(index, 0)] = sig
            digits = _NO_BITS
        self._new_sig.append(digits)
        if len(rdig) != 16:
            self._odd[(index, 1)] = rdig
            rdig = _NO_BITS
        self._new_rdig.append(rdig)  # (hex digits or not: see _pack_digests)
        self._new_seq.append(seq)
        self._new_repeat.append(_NO_REPEAT if repeat_of is None else repeat_of)
        self._new_count.append(count)
        self._new += 1
        if self._new >= PACK_EVERY:
            self._pack()

    def _pack(self) -> None:
        """Move the calls not packed yet into the columns."""
        if not self._new:
            return
        first = len(self._tool) - self._new
        self._seq = _extend(self._seq, self._new_seq)
        self._repeat_of = _extend(self._repeat_of, self._new_repeat)
        self._count = _extend(self._count, self._new_count)
        _pack_digests(self._sig, self._new_sig, self._odd, first, 0, self._tool)
        _pack_digests(self._rdig, self._new_rdig, self._odd, first, 1, self._tool)
        self._new = 0
        self._new_seq, self._new_repeat, self._new_count = [], [], []
        self._new_sig, self._new_rdig = [], []

    def copy(self) -> Ledger:
        self._pack()
        twin = Ledger()
        twin._seq, twin._repeat_of = self._seq[:], self._repeat_of[:]
        twin._count, twin._sig = self._count[:], bytearray(self._sig)
        twin._rdig, twin._tool = bytearray(self._rdig), list(self._tool)
        twin._status, twin._tools, twin._odd = (
            list(self._status),
            dict(self._tools),
            dict(self._odd),
        )
        return twin

    def __len__(self) -> int:
        return len(self._tool)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Ledger of {len(self._tool)} calls>"

    def entry(self, index: int) -> LedgerEntry:
        self._pack()
        tool, status, odd = self._tool[index], self._status[index], self._odd
        sig = odd.get((index, 0)) if odd else None
        if sig is None:
            sig = f"{tool}:{self._sig[8 * index : 8 * index + 8].hex()}"
        rdig = odd.get((index, 1)) if odd else None
        if rdig is None:
            rdig = self._rdig[8 * index : 8 * index + 8].hex()
        repeat_of = self._repeat_of[index]
        return LedgerEntry(
            self._seq[index], tool, sig, f"{sig}:{rdig}:{status}",
            None if repeat_of == _NO_REPEAT else repeat_of, self._count[index],
        )  # fmt: skip

    def __getitem__(self, index: int) -> LedgerEntry:
        if index < 0:
            index += len(self._tool)
        if not 0 <= index < len(self._tool):
            raise IndexError("ledger index out of range")
        return self.entry(index)

    def __iter__(self) -> Iterator[LedgerEntry]:
        for index in range(len(self._tool)):
            yield self.entry(index)

    def repeats(self) -> Iterator[LedgerEntry]:
        """Yield only the calls that repeated an earlier one without progress."""
        self._pack()
        for index, first in enumerate(self._repeat_of):
            if first != _NO_REPEAT:
                yield self.entry(index)


@dataclass(slots=True)
class Check:
    """The answer to "would this next call be a loop?", before it is made."""

    verdict: str  # ok | warn | stop
    findings: tuple[Finding, ...]
    message: str  # what to tell the model ("" when ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "findings": [finding.to_dict() for finding in self.findings],
            "message": self.message,
        }


@dataclass(slots=True)
class Analysis:
    """The engine's verdict on a run."""

    verdict: str  # ok | warn | stop
    stall_score: float  # repeated (no-progress) tool calls / tool calls
    findings: tuple[Finding, ...]  # ordered by fired_at
    ledger: Ledger  # one entry per tool call
    stall_series: tuple[tuple[int, float], ...]  # (seq, stall score so far), <= ~200 points
    steps: int
    tool_calls: int
    waste: Waste  # the loops' own waste, each step counted once where loops overlap
    unknown_args: int = 0  # tool calls whose arguments the trace does not carry
    unknown_results: int = 0  # tool calls whose result the trace does not carry

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "stall_score": self.stall_score,
            "findings": [finding.to_dict() for finding in self.findings],
            "ledger": [entry.to_dict() for entry in self.ledger],
            "stall_series": [list(point) for point in self.stall_series],
            "steps": self.steps,
            "tool_calls": self.tool_calls,
            "waste": self.waste.to_dict(),
            "unknown_args": self.unknown_args,
            "unknown_results": self.unknown_results,
        }


def group_loops(findings: Sequence[Finding]) -> list[int]:
    """Return, for each finding, the index of the finding that leads its loop.

    Warn and stop findings over the same calls (sharing a step) are one loop, whichever
    detectors saw it (a failing submit seen by repeat and blocker, a failing write by
    mutating_failure and repeat): the most severe leads, then the earliest to fire. An info
    finding is a loop of its own.
    """
    count = len(findings)
    parent = list(range(count))
    owner: dict[Any, Any] = {}  # seq -> a finding over it (its index)
    joined = False
    for index in range(count):
        finding = findings[index]
        if finding.severity == "info":
            continue
        seqs: Any = finding.seqs  # (read as objects: the dict keys them so anyway)
        me: Any = index  # (one object for all its seqs)
        last: Any = me  # the finding last joined to this one
        for seq in seqs:
            other = owner.setdefault(seq, me)
            if other is not last and other != me:
                parent[_root(parent, index)] = _root(parent, other)
                last = other
                joined = True
    lead = list(range(count))
    if not joined:
        return lead  # every finding is a loop of its own
    members: dict[int, list[int]] = {}  # root -> its set, when more than itself
    for index in range(count):
        root = _root(parent, index)
        if root != index:
            group = members.get(root)
            if group is None:
                members[root] = [root, index]
            else:
                group.append(index)
    for group in members.values():
        first = group[0]
        best = (-_RANK[findings[first].severity], findings[first].fired_at, first)
        for index in group:
            rank = (-_RANK[findings[index].severity], findings[index].fired_at, index)
            if rank < best:
                first, best = index, rank
        for index in group:
            lead[index] = first
    return lead


def _root(parent: list[int], index: int) -> int:
    """Return the representative of index's set (union-find, halving the path)."""
    while parent[index] != index:
        parent[index] = parent[parent[index]]
        index = parent[index]
    return index
