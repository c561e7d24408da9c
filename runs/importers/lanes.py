"""Lanes: which actor each step of a run belongs to (the engine counts per lane).

A lane is one agent's own sequence of actions (``detection.Step.lane``; None for the run's main
agent). The rule, for every format:

- a step belongs to the lane of its parent (``parent_id``), or to the main lane when it has
  none or its parent is not in the run;
- a lane opens only where the evidence says another actor: at a step an importer has marked
  with a lane of its own (an agent span nested in another agent, a sidechain, a thread, an
  agent id, OTLP agent spans of different identities that overlap in time: see each
  importer), and at the first step under a call that starts a sub-agent
  (``Task``, ``Agent``, ``spawn_agent``…: ``kit.starts_subagent``), whose lane is
  named after that call;
- everything else inherits: intermediate spans that wrap each step of one agent (a turn, a
  step, a chain, a graph node, the chat span a call was rebuilt from) open no lane, however
  deep they nest, so the same call made in successive turns is one agent's repeat.

``assign_lanes`` runs once per run, after the importer, for every format (``iter_runs`` and the
OTLP collector), so no importer has to apply it itself.
"""

from __future__ import annotations

from detection.model import Run

from .kit import starts_subagent


def assign_lanes(run: Run) -> Run:
    """Give every step without a lane the lane of its parent (or its sub-agent call's)."""
    if not any(step.parent_id is not None or step.lane is not None for step in run.steps):
        return run  # a chain: one lane
    by_id = {step.id: step for step in run.steps if step.id is not None}
    for step in run.steps:  # in order: a parent seen earlier has its lane by now
        if step.lane is not None:
            continue
        parent = by_id.get(step.parent_id) if step.parent_id is not None else None
        if parent is None or parent is step:
            continue
        if parent.kind == "tool_call" and starts_subagent(parent.tool):
            step.lane = f"agent:{parent.id}"
        else:
            step.lane = parent.lane
    return run
