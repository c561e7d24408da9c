"""loopboard's native JSONL: one event per line (the progress-ledger format is a subset).

Rules (the README's "Native JSONL" section shows an example):
- `type` is `tool_call` or `message`; other types are skipped and counted.
- `run_id` groups lines into runs (default: one run per file, named after the file).
- `seq` orders events (default: line order); `id`/`parent_id` give a tree.
- `status` is `ok`, `error` or `invalid` (the agent produced no valid action; counts as a
  failed call), default `ok`; errors are explicit, never guessed from text.
- A line that is not valid JSON, or not an object, is reported (file, line, reason) and
  skipped; a file with no valid line at all fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from math import isfinite
from typing import IO, Any

from detection.model import Run, Step

from .content import parse_time
from .detect import Claim, Sample, share
from .errors import TraceError, too_many_held
from .kit import add_step, finish_run
from .kit.spool import StepSpool
from .reading import JsonlReader, Limits, clip_json, clip_strings

name = "native"
label = "loopboard native JSONL"

ROLES = {"user", "assistant", "system", "reasoning"}


def _is_event(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    if record.get("type") == "tool_call":
        return isinstance(record.get("tool"), str)
    # Gemini's stream-json has type=message too, with a `delta` flag and a session id
    return (
        record.get("type") == "message"
        and record.get("role", "assistant") in ROLES
        and "delta" not in record
        and "session_id" not in record
    )


def claim(sample: Sample) -> Claim:
    """JSONL whose records are `{type: tool_call, tool, ...}` or `{type: message, role, ...}`."""
    if not sample.maybe_jsonl:
        return Claim.no("not JSONL")
    fit = share(sample.records, _is_event)
    if not fit:
        return Claim.no("no record is {type: tool_call, tool} or {type: message, role}")
    calls = sum(1 for r in sample.objects() if r.get("type") == "tool_call")
    return Claim(
        0.6 * fit, f"{fit:.0%} of the records are native events ({calls} tool_call records)"
    )


def _number(value: Any, field: str, *, source: str, line: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError("expected a number", source=source, line=line, field=field)
    if not isfinite(value):  # 1e400 parses as infinity
        raise TraceError(
            f"expected a finite number, got {value}", source=source, line=line, field=field
        )
    return value


def _text_id(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_event(obj: Any, *, source: str, line: int, limits: Limits) -> Step | None:
    """Return the step for one event object, None for an event type that is skipped."""
    if not isinstance(obj, dict):
        raise TraceError(
            f"expected a JSON object, got {type(obj).__name__}", source=source, line=line
        )
    kind = obj.get("type")
    if kind not in ("tool_call", "message"):
        return None
    seq = _number(obj.get("seq"), "seq", source=source, line=line)
    step = Step(
        seq=line if seq is None else int(seq),
        kind="tool_call",
        id=_text_id(obj.get("id")),
        parent_id=_text_id(obj.get("parent_id")),
        started_at=parse_time(obj.get("ts", obj.get("started_at"))),
        ended_at=parse_time(obj.get("ended_at")),
        tokens_in=_number(obj.get("tokens_in"), "tokens_in", source=source, line=line),
        tokens_out=_number(obj.get("tokens_out"), "tokens_out", source=source, line=line),
        cost=_number(obj.get("cost"), "cost", source=source, line=line),
    )
    if kind == "tool_call":
        tool = obj.get("tool")
        if not isinstance(tool, str) or not tool:
            raise TraceError(
                "a tool_call needs a tool name (string)", source=source, line=line, field="tool"
            )
        status = obj.get("status", "ok")
        if status not in ("ok", "error", "invalid"):
            raise TraceError(
                f"status must be 'ok', 'error' or 'invalid', not {status!r}",
                source=source,
                line=line,
                field="status",
            )
        step.tool = tool[:200]
        step.args = clip_json(obj.get("args"), limits)  # absent: unknown, not {}
        step.result = clip_json(obj.get("result"), limits)
        step.status = status
        step.batch_id = _text_id(obj.get("batch_id"))
    else:
        role = obj.get("role", "assistant")
        if role not in ROLES:
            raise TraceError(
                f"role must be one of {sorted(ROLES)}, not {role!r}",
                source=source,
                line=line,
                field="role",
            )
        content = obj.get("content", "")
        step.kind = role
        step.text = clip_strings(
            content if isinstance(content, str) else str(content), limits.max_value_chars
        )
    return step


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per `run_id` (in order of first appearance), steps ordered by seq.

    Each run's steps are spooled (kit.spool): a run of any length is read in the memory of
    its window, and sorted by seq a chunk at a time when its lines are out of order."""
    default_id = os.path.basename(source) or "run"
    runs: dict[str, Run] = {}
    last_seq: dict[str, int] = {}  # run id -> the seq of its latest step
    unordered: set[str] = set()  # runs whose lines are not in the order of their seq
    held = 0
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    for number, obj in reader:
        try:
            step = parse_event(obj, source=source, line=number, limits=limits)
        except TraceError as exc:
            reader.reject(exc)
            continue
        if step is None:
            continue
        run_id = str(obj.get("run_id") or default_id)
        run = runs.get(run_id)
        if run is None:
            run = runs[run_id] = Run(id=run_id, format=name, steps=StepSpool())  # type: ignore[arg-type]
        add_step(run, step, limits=limits, source=source, line=number)
        if step.seq < last_seq.get(run_id, step.seq):
            unordered.add(run_id)
        last_seq[run_id] = step.seq
        held += 1
        if held > limits.max_held_steps:
            raise too_many_held(limits.max_held_steps, source=source, line=number)
    reader.check_not_empty()
    for run_id, run in runs.items():
        if run_id in unordered:  # stable: ties keep line order
            run.steps = run.steps.sort_by_seq()  # type: ignore[attr-defined]
        yield finish_run(reader.skips.apply(run))
