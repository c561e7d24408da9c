"""The detector catalogue (DESIGN.md, "Detectors"): name -> streaming detector class.

The engine (detection/engine.py, ``Monitor._tool_call``) runs them in this order on each
call, and the "secondary" ones (result stall, read range, near repeat) stay quiet on a step
another detector has already flagged, so one loop gives one finding.
"""

from __future__ import annotations

from .base import Event
from .patterns import BatchRepeat, Oscillation
from .repeat import MutatingFailure, Repeat
from .similarity import NearRepeat, ReadRange, ResultStall
from .streams import MessageLoop, Streak

DETECTORS: dict[str, type] = {
    "oscillation": Oscillation,  # before repeat: a call inside a cycle is the cycle's
    "repeat": Repeat,
    "mutating_failure": MutatingFailure,
    "batch_repeat": BatchRepeat,
    "result_stall": ResultStall,
    "read_range": ReadRange,
    "near_repeat": NearRepeat,
    "streak": Streak,
    "message_loop": MessageLoop,
}
#: Budgets (step limit, tool quota, tokens, cost) are kept by the engine itself: they are
#: per run, not per path. Listed here so the catalogue is complete.
ENGINE_DETECTORS = ("budget",)

__all__ = ["DETECTORS", "ENGINE_DETECTORS", "Event"]
