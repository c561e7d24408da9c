"""The importer kit's steps: build one, add it to its run, finish the run.

`add_step` is the one way a step joins its run, and `check_step_limit` (behind it) the one
place the step limit (`Limits.max_steps`, steps per run) is enforced: the step that would
take a run past it fails the whole file with `too_many_steps`' message, while the file is
read, so an importer never holds more than that many steps of one run. Steps count as they
are read: the copies of one call count until `finish_run` merges them.

Every value goes through `clip_json`, as in the message-list formats: long strings are cut
and values nested deeper than max_depth are replaced, both with a marker. Unknown stays
unknown: arguments or a result the trace does not carry stay None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detection.model import Run, Step

from ..errors import TooManySteps
from ..reading import Limits, clip_json, clip_strings
from .merge import make_ids_unique, merge_copies, merge_stream, unique_stream
from .spool import StepSpool


def tool_step(*, tool: str, args: Any, limits: Limits, **fields: Any) -> Step:
    """Return a tool_call step: the name cut to 200 chars, values clipped; args None (the
    trace does not carry them) stay None."""
    return Step(
        seq=0,
        kind="tool_call",
        tool=(tool or "(unknown)")[:200],
        args=None if args is None else clip_json(args, limits),
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


def too_many_steps(
    run_id: str, limits: Limits, *, source: str, line: int | None = None
) -> TooManySteps:
    """The error for a run that passes the step limit, with where it did."""
    return TooManySteps(
        f"run {run_id!r} has more than {limits.max_steps} steps (the limit of steps per run)",
        source=source,
        line=line,
    )


def check_step_limit(
    count: int, run_id: str, *, limits: Limits, source: str, line: int | None = None
) -> None:
    """Fail (`too_many_steps`) when `count`, the steps a run would hold with the ones being
    added, is over the limit: the check behind `add_step`, for a format that holds a run's
    steps before they are a `Run`'s."""
    if count > limits.max_steps:
        raise too_many_steps(run_id, limits, source=source, line=line)


def add_step(run: Run, step: Step, *, limits: Limits, source: str, line: int | None = None) -> Step:
    """Append `step` to `run` and return it; fail (`too_many_steps`) when the run already
    holds Limits.max_steps steps. `line` is where the step was read, when the format knows."""
    check_step_limit(len(run.steps) + 1, run.id, limits=limits, source=source, line=line)
    run.steps.append(step)
    return step


def finish_run(run: Run, *, call_ids: Mapping[int, str] | None = None) -> Run:
    """The last step of every importer: merge the copies of each call into one step
    (merge.py; `call_ids` names the call id of a tool step whose step id is not it, keyed by
    `id(step)`), make step ids unique within the run and number the steps 0.. in order.

    A spooled run (steps in a `StepSpool`, kit/spool.py) is finished by two passes over its spool, in the
    memory of its window: the merge (a copy joins its call within the spool's window,
    `merge_stream`), then ids and numbers (`unique_stream`). `call_ids` needs steps in
    memory: a spooled run cannot have them. A spool that never left memory (a run shorter
    than twice its window) becomes a list again, finished whole like any other."""
    if isinstance(run.steps, StepSpool) and not run.steps.spilled:
        run.steps = list(run.steps)
    if isinstance(run.steps, StepSpool):
        if call_ids:
            raise ValueError("call_ids name steps in memory: not for a spooled run")
        moved: dict[str, str] = {}
        window = run.steps.window
        merged = run.steps.rewrite(lambda steps: merge_stream(steps, window, moved))
        marked = merged.marked_ids
        run.steps = merged.rewrite(lambda steps: unique_stream(steps, marked=marked, moved=moved))
        return run
    merge_copies(run, call_ids)
    make_ids_unique(run)
    for seq, step in enumerate(run.steps):
        step.seq = seq
    return run
