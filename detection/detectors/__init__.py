"""The streaming detectors, by name, in the catalogue's order (``detection.catalogue``).

The engine (``engine.Monitor._tool_call``) runs them in that order on each call, and the
"secondary" ones (blocker, result stall, read range, near repeat) stay quiet on a step another
detector has already flagged, so one loop gives one finding.
"""

from __future__ import annotations

from ..catalogue import NAMES
from .base import Event
from .blocker import Blocker
from .patterns import BatchRepeat, Oscillation
from .repeat import MutatingFailure, Repeat
from .similarity import NearRepeat, ReadRange, ResultStall
from .streams import MessageLoop, Streak

_CLASSES: dict[str, type] = {
    "oscillation": Oscillation,
    "repeat": Repeat,
    "mutating_failure": MutatingFailure,
    "blocker": Blocker,
    "batch_repeat": BatchRepeat,
    "result_stall": ResultStall,
    "read_range": ReadRange,
    "near_repeat": NearRepeat,
    "streak": Streak,
    "message_loop": MessageLoop,
}
#: Kept by the engine itself (per run, not per path): no class of their own.
ENGINE_DETECTORS = ("budget",)
#: name -> detector class, in the catalogue's order (a name the catalogue lacks is never run).
DETECTORS: dict[str, type] = {name: _CLASSES[name] for name in NAMES if name in _CLASSES}

__all__ = ["DETECTORS", "ENGINE_DETECTORS", "Event"]
