"""What the engine gives back: findings, the ledger, a live check, a run's analysis.

Plain frozen data with ``to_dict()`` for JSON; wording lives in ``message``, colour and
layout belong to whoever shows it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SEVERITIES", "Analysis", "Check", "Finding", "LedgerEntry", "Waste", "worst"]

SEVERITIES = ("info", "warn", "stop")
_RANK = {"ok": 0, "info": 1, "warn": 2, "stop": 3}


def worst(severities: Any) -> str:
    """Return the run verdict for some severities: ok, warn or stop (info is ok)."""
    best = "ok"
    for severity in severities:
        if _RANK[severity] > _RANK[best]:
            best = severity
    return "ok" if best == "info" else best


@dataclass(frozen=True, slots=True)
class Waste:
    """What a loop cost: the steps after its first warn, and their tokens, cost and time.

    tokens/cost/seconds are None when the trace does not record them.
    """

    steps: int = 0
    tokens: int | None = None
    cost: float | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Finding:
    """One detected loop or breach, with the threshold it crossed and what to do instead."""

    detector: str  # registry name, e.g. "repeat"
    severity: str  # info | warn | stop
    tool: str | None  # the tool involved (None for message loops, step budgets)
    signature: str  # call signature (or the detector's own key: cycle, batch, text)
    seqs: tuple[int, ...]  # steps involved (the first 100)
    count: int  # how many times, in the detector's unit (calls, cycles, batches)
    threshold: int  # the threshold the count crossed for this severity
    fired_at: int  # seq of the step where the finding first fired (its first threshold)
    message: str  # what is repeated, since when, what to do instead (for an agent)
    rule: str  # the policy row that set the threshold
    waste: Waste = field(default_factory=Waste)
    stop_at: int | None = None  # seq where it crossed the stop threshold (== fired_at if at once)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seqs"] = list(self.seqs)
        return out


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One tool call in the progress ledger."""

    seq: int
    tool: str
    signature: str  # call signature
    progress_signature: str  # call + result + status
    repeat_of: int | None  # first seq of the calls this one repeats without progress
    count: int  # calls in that no-progress group so far (1 = new)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Analysis:
    """The engine's verdict on a run."""

    verdict: str  # ok | warn | stop
    stall_score: float  # repeated (no-progress) tool calls / tool calls
    findings: tuple[Finding, ...]  # ordered by fired_at
    ledger: tuple[LedgerEntry, ...]
    stall_series: tuple[tuple[int, float], ...]  # (seq, stall score so far), <= ~200 points
    steps: int
    tool_calls: int
    waste: Waste  # after the first warn of the run

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
        }
