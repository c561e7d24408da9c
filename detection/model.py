"""The common trace model: what importers produce and what the engine reads.

Plain data only. Importers (runs/importers) build these; the engine (detection)
reads them; the Django app (runs) stores them as rows. ``Step`` lives in detection/step.py,
which is compiled with the engine; this module stays plain Python.

Tree shape: when no step of a run has a ``parent_id`` the run is one linear path.
Otherwise ``parent_id`` names the ``id`` of another step (a span parent, a
ThinkNode, a sub-agent's Task call); a step whose parent is missing from the run
is a root. A step "sees" the earlier steps whose parent is one of its own
ancestors (or its own parent): calls in sequence under one agent share their
history, while two sibling sub-trees (two sub-agents, two branches) do not.
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
        return sum(1 for step in self.steps if step.kind == "tool_call")
