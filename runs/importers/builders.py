"""Step builders for the agent-harness importers (Claude Code, Codex, Gemini, SWE-agent,
mini-swe-agent, OpenHands), which assemble their steps themselves before numbering them.

Every value goes through `clip_json`, as in the message-list formats: long strings are cut
and values nested deeper than max_depth are replaced, both with a marker.
"""

from __future__ import annotations

from typing import Any

from detection.model import Run, Step

from .errors import TooManySteps
from .reading import Limits, clip_json, clip_strings


def tool_step(*, tool: str, args: Any, limits: Limits, **fields: Any) -> Step:
    """Return a tool_call step: the name cut to 200 chars, no args given as {}, values clipped."""
    return Step(
        seq=0,
        kind="tool_call",
        tool=(tool or "(unknown)")[:200],
        args=clip_json(args if args is not None else {}, limits),
        **fields,
    )


def text_step(kind: str, text: str, *, limits: Limits, **fields: Any) -> Step:
    """Return a message step (user/assistant/system/reasoning) with clipped text."""
    return Step(seq=0, kind=kind, text=clip_strings(text, limits.max_value_chars), **fields)


def set_result(
    step: Step, result: Any, *, error: bool, limits: Limits, ended_at: float | None = None
) -> None:
    """Store a call's result and status on its step."""
    step.result = clip_json(result, limits)
    step.status = "error" if error else "ok"
    if ended_at is not None:
        step.ended_at = ended_at


def finish_run(run: Run, *, source: str, limits: Limits) -> Run:
    """Number the steps 0.. in order and enforce the step limit."""
    if len(run.steps) > limits.max_steps:
        raise TooManySteps(f"run {run.id!r} has more than {limits.max_steps} steps", source=source)
    for seq, step in enumerate(run.steps):
        step.seq = seq
    return run
