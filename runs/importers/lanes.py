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

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from detection.model import Run, Step

from .kit import starts_subagent
from .kit.spool import StepSpool

#: A spooled run's steps remembered by id as parents (the most recently seen): a step whose
#: parent is further back keeps the main lane.
MAX_PARENTS = 65536


def assign_lanes(run: Run) -> Run:
    """Give every step without a lane the lane of its parent (or its sub-agent call's).

    A spooled run is one pass over its spool (`lane_stream`), and only when some step has a
    parent or a lane (`StepSpool.tree`, noted by the pass that wrote it)."""
    if isinstance(run.steps, StepSpool):
        if run.steps.tree and not run.steps.lanes_assigned:
            forward = run.steps.forward
            run.steps = run.steps.rewrite(lambda steps: lane_stream(steps, forward))
        run.steps.lanes_assigned = True
        return run
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


def lane_stream(
    steps: Iterable[Step], forward: dict[str, tuple[str | None, str, str | None]]
) -> Iterator[Step]:
    """`assign_lanes` as one pass, for a spooled run: a parent is found among the MAX_PARENTS
    steps with an id seen most recently before its child (one further back is not found:
    the child keeps the main lane, as when it has none), or, written after its child, in
    `forward` (what the pass that wrote the spool noted of it: StepSpool.forward)."""
    # id -> (lane, whether the step starts a sub-agent)
    parents: OrderedDict[str, tuple[str | None, bool]] = OrderedDict()
    for step in steps:
        parent = parents.get(step.parent_id) if step.parent_id is not None else None
        if parent is None and step.parent_id is not None and str(step.parent_id) in forward:
            lane, kind, tool = forward[str(step.parent_id)]
            parent = (lane, kind == "tool_call" and starts_subagent(tool))
        if step.lane is None and parent is not None and step.parent_id != step.id:
            lane, starts = parent
            step.lane = f"agent:{step.parent_id}" if starts else lane
        if step.id is not None:
            starts = step.kind == "tool_call" and starts_subagent(step.tool)
            parents[step.id] = (step.lane, starts)
            parents.move_to_end(step.id)
            if len(parents) > MAX_PARENTS:
                parents.popitem(last=False)
        yield step
