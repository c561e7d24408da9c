"""Cursor: agent transcripts (JSONL) and hook-event logs (format notes §3.22).

Transcripts (`~/.cursor/projects/<slug>/agent-transcripts/<uuid>/<uuid>.jsonl`): each line
`{role: "user"|"assistant", message: {content: [Block]}}`, with **no ids, timestamps or
usage**. One run per file (id = the file name). Blocks as in Anthropic's API:
- `text` -> a user or assistant step (a user's `<user_query>…</user_query>` wrapper is
  taken off); `thinking` -> a reasoning step;
- `tool_use {name, input}` (also spelled `tool_call` / `tool-call`; no `id`) -> a call;
- `tool_result {tool_use_id?, content}` (also `tool-result`) -> the result of the call it
  names, else of the nearest preceding unanswered call; most transcripts carry no results
  at all, so a call usually keeps result None. `is_error` makes it an error, else the shared
  text rules decide.
- **Any length**: the steps go into a step spool (kit.spool), so a transcript is read in the
  memory of the spool's window; a call waiting for its result is held. The newest
  MAX_OPEN_CALLS unanswered calls wait (a result for an older one goes to the nearest
  call that still waits), each one itself (two equal calls are two), and the first
  MAX_WARNINGS warnings are kept.

Hook logs (a hook that appends its stdin payload to a file): read by `hook_logs`' Cursor
dialect; a file is one or the other, told apart by its records (`hook_event_name`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text
from .detect import Claim, Sample, share
from .errors import MAX_WARNINGS, TooManySteps, TraceError
from .hook_logs import cursor_hooks, is_cursor_event
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import Recent, StepSpool
from .reading import JsonlReader, Limits, head_values, stream_head

name = "cursor"
label = "Cursor agent transcript or hook log (JSONL)"

CALLS = {"tool_use", "tool_call", "tool-call"}
RESULTS = {"tool_result", "tool-result"}
_QUERY = re.compile(r"^\s*<user_query>\s*(.*?)\s*</user_query>\s*$", re.S)
# A transcript of any length is read in bounded memory: its steps are spooled (kit.spool) and
# a call waiting for its result is held. Most transcripts answer no call, so a call waits
# until MAX_OPEN_CALLS newer ones do.
MAX_OPEN_CALLS = 4096  # calls waiting for their result (the oldest is given up)


def _is_line(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and record.get("role") in ("user", "assistant")
        and isinstance(record.get("message"), dict)
        and isinstance(record["message"].get("content"), list | str)
        and not ({"type", "uuid", "sessionId"} & record.keys())  # Claude Code's records
    )


def claim(sample: Sample) -> Claim:
    """Transcript lines `{role, message: {content: [...]}}`, or Cursor hook payloads."""
    hooks = cursor_hooks.claim(sample)
    if hooks.score:
        return hooks
    if not sample.maybe_jsonl:
        return Claim.no("not JSONL")
    fit = share(sample.records, _is_line)
    if not fit:
        return Claim.no("no `{role, message: {content}}` line and no Cursor hook payload")
    blocks = [
        block.get("type")
        for record in sample.objects()
        if _is_line(record)
        for block in record["message"]["content"]
        if isinstance(block, dict) and isinstance(record["message"]["content"], list)
    ]
    queries = any("<user_query>" in str(r.get("message")) for r in sample.objects()[:5])
    score = 0.5 * fit + 0.2 * bool(CALLS & set(blocks)) + 0.2 * queries
    return Claim(score, f"{fit:.0%} of the lines are {{role, message}} transcript lines")


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a transcript, or the runs of a hook log."""
    first = next(iter(head_values(stream_head(stream), max_lines=5)), None)
    if is_cursor_event(first):
        for run in cursor_hooks.parse(stream, source=source, limits=limits):
            run.format = name
            yield run
        return
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    steps = StepSpool()
    run = Run(id=os.path.basename(source) or "run", format=name, steps=steps)  # type: ignore[arg-type]
    # id(call) -> a call without its result, oldest first (the newest MAX_OPEN_CALLS)
    waiting: Recent[int, Step] = Recent(MAX_OPEN_CALLS, refresh=False)
    steps.hold = lambda step: id(step) in waiting
    for line, record in reader:
        try:
            _line(run, record, waiting, limits)
        except TooManySteps as exc:
            exc.source, exc.line = source, line
            raise
        except TraceError as exc:
            reader.reject(TraceError(exc.reason, source=source, line=line, field=exc.field))
    steps.hold = None  # read: no step changes any more
    waiting.clear()
    reader.check_not_empty()
    yield finish_run(reader.skips.apply(run))


def _add(run: Run, step: Step, limits: Limits) -> Step:
    return add_step(run, step, limits=limits, source="")  # parse names the file and line


def _line(run: Run, record: dict, waiting: Recent[int, Step], limits: Limits) -> None:
    if not _is_line(record):
        raise TraceError("expected {role: user|assistant, message: {content}}", field="role")
    role, content = record["role"], record["message"]["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text") or "")
            query = _QUERY.match(text) if role == "user" else None
            _add(run, text_step(role, query.group(1) if query else text, limits=limits), limits)
        elif kind == "thinking":
            _add(
                run, text_step("reasoning", str(block.get("thinking") or ""), limits=limits), limits
            )
        elif kind in CALLS:
            args = block.get("input", block.get("args", block.get("arguments")))
            step = tool_step(tool=str(block.get("name") or "(unknown)"), args=args, limits=limits)
            step.id = str(block["id"]) if block.get("id") else None
            waiting.put(id(step), _add(run, step, limits))  # the oldest gives up waiting
        elif kind in RESULTS:
            _result(run, block, waiting, limits)


def _result(run: Run, block: dict, waiting: Recent[int, Step], limits: Limits) -> None:
    call_id = block.get("tool_use_id")
    named = str(call_id) if call_id else None
    call = next((s for s in waiting.values() if s.id == named), None) if named else None
    if call is None and waiting:
        call = next(reversed(waiting.values()))  # the nearest preceding unanswered call
    if call is None:
        if len(run.warnings) < MAX_WARNINGS:
            run.warnings.append("a tool_result with no call before it; kept as a call of its own")
        call = _add(run, tool_step(tool="(unknown)", args=None, limits=limits), limits)
    else:
        del waiting[id(call)]
    content = block.get("content")
    text = content_text(content)
    failed = block.get("is_error") is True or text_errors.is_error(text)
    set_result(
        call, content if not isinstance(content, list) else text, error=failed, limits=limits
    )
