"""The common trace model: what importers produce and what the engine reads.

Plain data only. Importers (runs/importers) build these; the engine (detection)
reads them; the Django app (runs) stores them as rows. ``Step`` lives in detection/step.py,
which is compiled with the engine; this module stays plain Python.

Tree and lanes: ``parent_id`` names the ``id`` of another step (a span parent, a ThinkNode,
a sub-agent's Task call) and builds the tree that the pages draw. The engine does not count
along the tree: it counts per **lane**, one actor's own sequence of actions (``Step.lane``;
None is the run's main agent). Importers open a lane only where the evidence says another
actor or concurrency: a sub-agent (its own agent identity or agent span, a sidechain, an
agent id, a call that runs steps beneath it), an abandoned branch. Intermediate spans that
wrap each step of one agent (a turn, a step, a chain, a graph node, a chat span) are not
lanes, however deep they nest: the same call made in successive turns of one agent is one
sequence. A new lane starts from what the lane of its first step's parent had seen.

Unknown values: ``args`` or ``result`` None means the trace does not carry it (absent,
redacted, content capture off, a hook record without its result). The engine never takes
two unknowns for the same call or the same result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .step import KINDS, Step

__all__ = ["KINDS", "Run", "Step"]


@dataclass(slots=True)
class Run:
    """One agent session: its steps in order plus what the source says about it."""

    id: str  # external id (the source's run/session id, or the file name)
    format: str  # importer name that produced it, e.g. "native"
    steps: list[Step] = field(default_factory=list)
    name: str = ""  # a readable name for lists; defaults to id
    metadata: dict[str, Any] = field(default_factory=dict)  # model, agent, task, ...
    skipped: int = 0  # source lines/records skipped as invalid
    warnings: list[str] = field(default_factory=list)  # "file:line: reason" per skipped item

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.id

    @property
    def tool_calls(self) -> int:
        return sum(1 for step in self.steps if step.is_tool_call)
