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
from typing import Any

from .step import Step

__all__ = [
    "SEVERITIES", "Analysis", "Check", "Finding", "Ledger", "LedgerEntry", "Waste", "worst",
]  # fmt: skip

SEVERITIES = ("info", "warn", "stop")
_RANK = {"ok": 0, "info": 1, "warn": 2, "stop": 3}
#: Step statuses that are a failed call: an error, or an invalid turn (no valid action).
_FAILED = frozenset({"error", "invalid"})


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


_NO_REPEAT = -(2**63)  # the ledger's repeat_of column: the call repeated nothing


def _digest_bits(text: str, start: int) -> int:
    """The 64 bits of a 16-hex-digit digest that ends `text` after `start` characters (as
    the engine writes them), or -1 when it is not one (then the text is kept as it is)."""
    if len(text) - start != 16:
        return -1
    digits = text[start:]
    try:
        bits = int(digits, 16)
    except ValueError:
        return -1
    return bits if f"{bits:016x}" == digits else -1


def _append(column: Any, value: Any) -> Any:
    """Append to an int column; return the column (a list from there on when the value is
    no machine word: a seq of a trace's own, say)."""
    try:
        column.append(value)
    except (OverflowError, TypeError):
        column = list(column)
        column.append(value)
    return column


class Ledger:
    """The progress ledger of a run: one LedgerEntry per tool call, in order.

    Kept as columns of machine words: the call's seq, its repeat and count, and its signature
    and result digest as their 64 bits (the engine's digests are 16 hex digits; any other text
    is kept as it is, by index), the tool and status as shared strings. A run of a million
    calls costs about 56 bytes a call, adds no million objects for the garbage collector to
    walk, and keeps none of its steps alive; entries are made as they are read (iterate it,
    index it, or take ``repeats()``).
    """

    __slots__ = ("_count", "_odd", "_rdig", "_repeat_of", "_seq", "_sig", "_status", "_tool",
                 "_tools")  # fmt: skip

    def __init__(self) -> None:
        # int columns: machine words (a list when a value does not fit one: _append)
        self._seq: Any = array("q")
        self._repeat_of: Any = array("q")
        self._count: Any = array("q")
        self._sig = array("Q")  # 64 bits of the signature's digest (see _odd)
        self._rdig = array("Q")
        self._tool: list[str] = []
        self._status: list[str] = []
        self._tools: dict[str, str] = {}  # one string per tool name
        self._odd: dict[tuple[int, int], str] = {}  # (index, 0 sig | 1 rdig) -> its text

    def add(self, step: Step, sig: str, rdig: str, repeat_of: int | None, count: int) -> None:
        name = step.tool or "?"
        tool = self._tools.setdefault(name, name)
        status = step.status
        index = len(self._seq)
        self._seq = _append(self._seq, step.seq)
        self._tool.append(tool)
        self._status.append("error" if status == "error" else "invalid" if status == "invalid"
                            else "ok")  # fmt: skip
        bits = _digest_bits(sig, len(tool) + 1) if sig.startswith(tool + ":") else -1
        if bits < 0:
            self._odd[(index, 0)] = sig
        self._sig.append(max(bits, 0))
        bits = _digest_bits(rdig, 0)
        if bits < 0:
            self._odd[(index, 1)] = rdig
        self._rdig.append(max(bits, 0))
        self._repeat_of = _append(self._repeat_of, _NO_REPEAT if repeat_of is None else repeat_of)
        self._count = _append(self._count, count)

    def copy(self) -> Ledger:
        twin = Ledger()
        twin._seq, twin._repeat_of = self._seq[:], self._repeat_of[:]
        twin._count, twin._sig = self._count[:], array("Q", self._sig)
        twin._rdig, twin._tool = array("Q", self._rdig), list(self._tool)
        twin._status, twin._tools, twin._odd = (
            list(self._status),
            dict(self._tools),
            dict(self._odd),
        )
        return twin

    def __len__(self) -> int:
        return len(self._seq)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Ledger of {len(self._seq)} calls>"

    def entry(self, index: int) -> LedgerEntry:
        tool, status, odd = self._tool[index], self._status[index], self._odd
        sig = odd.get((index, 0)) if odd else None
        if sig is None:
            sig = f"{tool}:{self._sig[index]:016x}"
        rdig = odd.get((index, 1)) if odd else None
        if rdig is None:
            rdig = f"{self._rdig[index]:016x}"
        repeat_of = self._repeat_of[index]
        return LedgerEntry(
            self._seq[index], tool, sig, f"{sig}:{rdig}:{status}",
            None if repeat_of == _NO_REPEAT else repeat_of, self._count[index],
        )  # fmt: skip

    def __getitem__(self, index: int) -> LedgerEntry:
        if index < 0:
            index += len(self._seq)
        if not 0 <= index < len(self._seq):
            raise IndexError("ledger index out of range")
        return self.entry(index)

    def __iter__(self) -> Iterator[LedgerEntry]:
        for index in range(len(self._seq)):
            yield self.entry(index)

    def repeats(self) -> Iterator[LedgerEntry]:
        """Yield only the calls that repeated an earlier one without progress."""
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
    owner: dict[Any, int] = {}  # seq -> a finding over it
    joined = False
    for index in range(count):
        finding = findings[index]
        if finding.severity == "info":
            continue
        seqs: Any = finding.seqs  # (read as objects: the dict keys them so anyway)
        for seq in seqs:
            other = owner.setdefault(seq, index)
            if other != index:
                parent[_root(parent, index)] = _root(parent, other)
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
