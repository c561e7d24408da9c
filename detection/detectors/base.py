"""What detectors share: the event they read, the reporter they tell, small helpers.

The engine (detection/engine.py) computes each call's signatures once, fills one ``Event``
with them and hands it to every detector that can fire for the tool. Each detector keeps its
state per lane (one actor's sequence of actions) in a small class of its own, with a
``copy()`` for when a new lane (a sub-agent) starts from its caller's history.

Types are declared throughout: the package runs as plain Python, and `make` also compiles it
with mypyc (scripts/build_speedups.py), which turns these classes into C structs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..keys import Fault
    from ..policy import ToolSettings

MAX_SEQS: Final = 100  # seqs kept per finding: enough to show the loop, bounded for a live monitor
#: Distinct keys a lane's detector state remembers before it forgets the older half: the calls
#: of a turn made once so far, the failing calls of the run, capped calls, the files and ranges
#: read, the mutations seen. A real turn stays far below it; a turn of more distinct calls (a
#: generated or endless session) then costs the engine a bounded memory (~20 MB a lane),
#: not ~400 bytes for each call. A call made again more than HORIZON / 2 to HORIZON distinct
#: calls after the last time it was remembered counts as a new call.
HORIZON: Final = 65_536
_WORDS: Final = re.compile(r"[a-z0-9_]+")
#: ``json.dumps(value, ensure_ascii=False, default=str)``, with its encoder made once
_JSON: Final = json.JSONEncoder(ensure_ascii=False, default=str)
_JSON_STR: Final = json.encoder.encode_basestring  # (the one _JSON uses: ensure_ascii off)


def _json_scalar(value: Any) -> str | None:
    """``_JSON.encode`` of a string, an int, a bool or None; None for any other value."""
    kind = type(value)
    if kind is str:
        return _JSON_STR(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return None


def _json_flat(value: Any) -> str | None:
    """``_JSON.encode(value)`` for a scalar, or an object (string keys) or array of scalars,
    the usual arguments, without the encoder's set-up; None for any other value."""
    kind = type(value)
    if kind is dict:
        parts: list[str] = []
        for key, item in value.items():
            text = _json_scalar(item)
            if type(key) is not str or text is None:
                return None
            parts.append(_JSON_STR(key) + ": " + text)
        return "{" + ", ".join(parts) + "}"
    if kind is list or kind is tuple:
        parts = []
        for item in value:
            text = _json_scalar(item)
            if text is None:
                return None
            parts.append(text)
        return "[" + ", ".join(parts) + "]"
    return _json_scalar(value)


#: (severity, threshold, policy row): what Threshold.level() returns when a count reaches it.
Level = tuple[str, int, str]
#: A message builder and its arguments: the words are only put together when a finding
#: fires or escalates, with the values of that moment.
Message = Callable[..., str]


class Event:
    """One tool call as the detectors see it: the step plus its signatures."""

    __slots__ = (
        "args", "batch_id", "canonical", "cycle_count", "cycle_level", "cycle_period", "epoch",
        "fault", "group_count", "in_cycle", "invalid", "known_args", "known_result", "outcome",
        "quiet", "rdig", "repeat_of", "result", "seq", "settings", "sig", "status", "tool",
    )  # fmt: skip

    def __init__(self, settings: ToolSettings) -> None:
        self.seq = 0
        self.tool = ""
        self.sig = ""  # call signature: "tool:digest of the normalised arguments"
        self.rdig = ""  # digest of the normalised result
        self.outcome = ""  # the result digest, or "!error" for any error
        self.status = "ok"  # "ok" or "error" (an invalid turn is an error too: see invalid)
        self.invalid = False  # an invalid turn: no valid action (Step.status "invalid")
        self.fault: Fault | None = None  # a failure's fingerprint (keys.error_fault)
        self.settings = settings
        self.args: Any = None
        self.canonical = False  # the arguments are already in canonical form (keys.py)
        self.result: Any = None
        # Unknown values (the trace does not carry them) are never equal to anything: their
        # signature or result digest is unique to the call (see Monitor._tool_call).
        self.known_args = True
        self.known_result = True
        self.batch_id: Any = None  # str | None (any hashable id works)
        self.epoch = 0  # the lane's count of world changes (see Lane.epoch)
        self.quiet = False  # mutating, polling, an acknowledgement or an error: see similarity
        self.repeat_of: int | None = None  # set by the repeat detector, read by the ledger
        self.group_count = 1
        self.in_cycle = False  # set by oscillation: the repeat detector leaves it to the cycle
        # set by oscillation when the cycle is not yet a loop of its own: its period and
        # full cycles; the repeat detector sets cycle_level when its count reached a level
        self.cycle_period = 0
        self.cycle_count = 0
        self.cycle_level: Level | None = None

    def clear_marks(self) -> None:
        """Forget what detectors marked on the previous call."""
        self.repeat_of = None
        self.group_count = 1
        self.in_cycle = False
        self.cycle_period = 0
        self.cycle_level = None


def add_seq(seqs: list[int], seq: int) -> None:
    """Append a seq unless the list is full or already ends with it."""
    if len(seqs) < MAX_SEQS and (not seqs or seqs[-1] != seq):
        seqs.append(seq)


class Tally:
    """Something seen ``count`` times since ``first_seq`` (a file range read, a text said).

    Most are seen once, so the list of seqs for a finding is only made the second time.
    """

    __slots__ = ("count", "first_seq", "seqs")

    def __init__(self, seq: int) -> None:
        self.count = 1
        self.first_seq = seq
        self.seqs: list[int] | None = None

    def again(self, seq: int) -> list[int]:
        """Count it once more; return the seqs where it was seen."""
        seqs = self.seqs
        if seqs is None:
            seqs = self.seqs = [self.first_seq]
        self.count += 1
        add_seq(seqs, seq)
        return seqs

    def copy_tally(self, twin: Tally) -> None:
        """Give a copy (made from first_seq) this one's count and seqs."""
        twin.count = self.count
        twin.seqs = list(self.seqs) if self.seqs is not None else None


def newest_half(mapping: dict[Any, Any]) -> dict[Any, Any]:
    """Return a dict of the newer half of ``mapping``'s keys (insertion order), with their values."""
    return dict(islice(mapping.items(), len(mapping) // 2, None))


def make_room(mapping: dict[Any, Any]) -> dict[Any, Any]:
    """Return ``mapping``, or its newer half once it holds HORIZON keys; call it before adding a
    key, so a map never holds more than HORIZON (one copy for every HORIZON / 2 keys added)."""
    return newest_half(mapping) if len(mapping) >= HORIZON else mapping


def times(count: int) -> str:
    """Return "1 time" or "N times", for the messages the model reads."""
    return f"{count} time" if count == 1 else f"{count} times"


def short(value: Any, limit: int = 80) -> str:
    """Return a one-line, clipped rendering of a value for a message: a string as it is, any
    other value as JSON (what agents and people read, not Python's repr)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            flat = _json_flat(value)
            text = flat if flat is not None else _JSON.encode(value)
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
    head = text[: limit * 8]
    if len(head) < len(text):  # a long text: its head is usually enough to show
        flat = " ".join(head.split())
        if len(flat) > limit:
            return flat[: limit - 1] + "…"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def words(text: str, limit: int = 4000) -> set[str]:
    """Return the set of lower-case word tokens of a text (its first ``limit`` chars).

    Token sets are plain sets, never changed once made (a frozen copy would cost a copy).
    """
    return set(_WORDS.findall(text[:limit].lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    """Return |a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


POLL_WORDS: Final = ("status", "poll", "wait", "check", "progress", "get_job", "result")


def advice(tool: str | None, failing: bool = False) -> str:
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
