"""The live loop check ("would this next call be a loop?") for an agent's loop."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import detection

from ..models import Project, Run
from . import policy, storage


def check_next_call(
    project: Project,
    tool: str,
    args: Any = None,
    *,
    run: Run | None = None,
    steps: Iterable[detection.Step] = (),
) -> detection.Check:
    """Replay a run's steps (a stored run, or the steps given) through the engine's Monitor
    with the project's policy, then ask whether `tool(args)` would be a loop.

    The answer's message is what the agent should tell its model.
    """
    monitor = detection.Monitor(policy.engine_policy(project))
    history = storage.iter_steps(run.pk) if run is not None else steps
    for step in history:
        monitor.observe(step)
    return monitor.check(tool, args)


def step_from_call(seq: int, call: dict[str, Any]) -> detection.Step:
    """Return the engine's step for one call or message given to the live check API."""
    kind = call.get("kind") or ("tool_call" if call.get("tool") else "assistant")
    if call.get("role") in ("user", "assistant", "system") and not call.get("tool"):
        kind = call["role"]
    return detection.Step(
        seq=seq,
        kind=kind,
        id=call.get("id"),
        parent_id=call.get("parent_id"),
        tool=call.get("tool"),
        args=call.get("args"),
        result=call.get("result"),
        status=call["status"] if call.get("status") in ("error", "invalid") else "ok",
        text=call.get("text") or call.get("content"),
    )
