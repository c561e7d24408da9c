"""What detectors share: the event they read, the lane they keep state in, the interface."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..policy import ToolSettings

MAX_SEQS = 100  # seqs kept per finding: enough to show the loop, bounded for a live monitor
_WORDS = re.compile(r"[a-z0-9_]+")


@dataclass(slots=True)
class Event:
    """One step as the detectors see it: the step plus its signatures."""

    seq: int
    kind: str
    tool: str | None = None
    sig: str = ""  # call signature
    rdig: str = ""  # normalised result digest
    outcome: str = ""  # result digest, or "!error" for any error
    status: str = "ok"
    settings: ToolSettings | None = None
    args: Any = None
    result: Any = None
    batch_id: str | None = None
    text: str | None = None
    repeat_of: int | None = None  # set by the repeat detector, read by the ledger
    group_count: int = 1
    in_cycle: bool = False  # set by oscillation: the repeat detector leaves it to the cycle
    quiet: bool | None = None  # the engine's answer to similarity._skip, known per tool


class Lane:
    """The state of one root-to-node path: per-detector state plus what changed the world."""

    __slots__ = ("epoch", "mutations", "states")

    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states
        self.epoch = 0  # bumped by each new successful call to a mutating tool
        self.mutations: set[str] = set()  # mutating call signatures seen in the scope

    def copy(self) -> Lane:
        return copy.deepcopy(self)


class Reporter(Protocol):
    """The engine side a detector talks to."""

    def report(
        self,
        detector: str,
        key: Any,
        level: tuple[str, int, str],
        count: int,
        tool: str | None,
        signature: str,
        seqs: list[int],
        message: Any,
        *,
        secondary: bool = False,
    ) -> None: ...


class Detector(Protocol):
    """A streaming detector: small per-lane state, one event at a time."""

    name: str

    def new_state(self) -> Any: ...

    def new_turn(self, state: Any, scope: str) -> Any: ...

    def observe(self, state: Any, ev: Event, lane: Lane, out: Reporter) -> None: ...


def add_seq(seqs: list[int], seq: int) -> None:
    """Append a seq unless the list is full or already ends with it."""
    if len(seqs) < MAX_SEQS and (not seqs or seqs[-1] != seq):
        seqs.append(seq)


def short(value: Any, limit: int = 80) -> str:
    """Return a one-line, clipped rendering of a value for a message."""
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def words(text: str, limit: int = 4000) -> frozenset[str]:
    """Return the set of lower-case word tokens of a text (its first ``limit`` chars)."""
    return frozenset(_WORDS.findall(text[:limit].lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Return |a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


POLL_WORDS = ("status", "poll", "wait", "check", "progress", "get_job", "result")


def advice(tool: str | None, *, failing: bool = False) -> str:
    """Return what to do instead, in words an agent can act on."""
    if failing:
        return (
            "Retrying will not make it succeed: change the arguments or the approach, "
            "or report the blocker."
        )
    if tool and any(word in tool.lower() for word in POLL_WORDS):
        return (
            "If you are waiting for something, do one blocking wait instead of polling; "
            "otherwise change the arguments, use another source, or report the blocker."
        )
    return (
        "Use what you already have: change the arguments, use another source, "
        "or, if you are stuck, report the blocker or finish."
    )
