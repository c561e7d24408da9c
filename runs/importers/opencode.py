"""OpenCode session export, `opencode export <sessionID>` (format notes §3.20).

One JSON document `{info: Session, messages: [{info: Message, parts: [Part]}], todos?}`; the
messages are read one at a time (ijson), so an export of any size streams. One run per file,
id = `info.id` (`ses_…`); title, directory, version and `parentID` (set on a sub-agent's
session) go to metadata. Times are epoch milliseconds.

Messages, in file order (OpenCode writes them by id, which ascends in time):
- user `info` -> a user step with the text of its `text` parts (synthetic ones included:
  they are what the model read);
- assistant -> `reasoning` parts a reasoning step, `text` parts an assistant step (tokens
  and cost from `info.tokens`/`info.cost` on the message's first step), and each `tool` part
  a tool_call: tool = `tool`, args = `state.input`, id = `callID`; the calls of one model
  call (between two `step-start` parts) are one batch.
  Result and status from `state`: `completed` -> `output` (ok, unless `metadata.exit` is
  non-zero, or the shared text rules find an error: OpenCode only appends "(Command timed
  out after N ms)" to a timed-out output); `error` -> `error` text, status error;
  `pending`/`running` in a finished export -> an interrupted call, result
  "[Tool execution was interrupted]", status error.
- `info.error` on an assistant message (ProviderAuthError, APIError, MessageAbortedError…)
  -> a system step naming it, and a warning.
- `subtask`/`agent` parts and `step-start`/`step-finish`/`patch`/`snapshot`/`file` parts are
  context and are left out; a `task` tool call keeps `state.metadata.sessionId` (the child
  session) in its arguments' place only as metadata: an export holds one session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import fnumber, number, parse_time
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import Limits, first_byte, iter_members

name = "opencode"
label = "OpenCode session export (JSON)"

INTERRUPTED = "[Tool execution was interrupted]"


def claim(sample: Sample) -> Claim:
    """`{info: {id: "ses_…"}, messages: [{info, parts}]}`."""
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object")
    info, messages = top.get("info"), top.get("messages")
    if not isinstance(info, dict) or not isinstance(messages, list):
        return Claim.no("no `info` object with a `messages` list of {info, parts}")
    shaped = [m for m in messages[:20] if isinstance(m, dict) and "info" in m and "parts" in m]
    session = str(info.get("id", "")).startswith("ses_")
    if shaped and session:
        return Claim(0.95, "an OpenCode export: info.id `ses_…`, messages of {info, parts}")
    if shaped:
        return Claim(0.7, "messages of {info, parts} (OpenCode's shape)")
    if session and not messages:
        return Claim(0.6, "an OpenCode session `ses_…` with no messages")
    return Claim.no("the messages are not {info, parts} objects")


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one session of the export."""
    if not first_byte(stream):
        raise TraceError("empty file", source=source)
    run = Run(id=os.path.basename(source) or "run", format=name)
    skips = Skips()
    found = False
    for key, value in _top_level(stream, source=source, limits=limits):
        if key == "info" and isinstance(value, dict):
            _describe(run, value)
        elif key == "message":
            found = True
            index, message = value
            try:
                _message(run, message, limits)
            except TooManySteps as exc:
                exc.source = source
                raise
            except TraceError as exc:
                field = f"messages[{index}]" + (f".{exc.field}" if exc.field else "")
                skips.add(TraceError(exc.reason, source=source, field=field))
    if not found and not run.metadata:
        raise TraceError("not an OpenCode export: no `info` and no `messages`", source=source)
    yield finish_run(skips.apply(run))


def _top_level(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[tuple[str, Any]]:
    """The small top-level `info` object and each message, in document order, streamed."""
    members = iter_members(
        stream, source=source, limits=limits, arrays={"messages": None}, keep={"info"}
    )
    for key, index, value in members:
        if key == "messages" and index is not None:
            yield "message", (index, value)
        elif key == "messages":
            raise TraceError("`messages` must be a list", source=source, field="messages")
        else:
            yield key, value


def _describe(run: Run, info: dict) -> None:
    if isinstance(info.get("id"), str) and info["id"]:
        run.id = info["id"][:255]
    if isinstance(info.get("title"), str) and info["title"]:
        run.name = info["title"][:200]
    for key, field in (("directory", "directory"), ("version", "version"), ("parentID", "parent")):
        if info.get(key) is not None:
            run.metadata[field] = info[key]


def _add(run: Run, step: Step, limits: Limits) -> Step:
    return add_step(run, step, limits=limits, source="")  # parse names the file


def _message(run: Run, message: Any, limits: Limits) -> None:
    if not isinstance(message, dict) or not isinstance(message.get("info"), dict):
        raise TraceError("a message needs an `info` object", field="info")
    info = message["info"]
    parts = message.get("parts") or []
    if not isinstance(parts, list):
        raise TraceError("`parts` must be a list", field="parts")
    role = info.get("role")
    times = info.get("time") if isinstance(info.get("time"), dict) else {}
    when = parse_time(times.get("created"))
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    text = "\n".join(t for t in texts if isinstance(t, str))
    if role == "user":
        _add(
            run, text_step("user", text, limits=limits, id=info.get("id"), started_at=when), limits
        )
        return
    if role != "assistant":
        raise TraceError(f"unknown role {role!r}", field="info.role")
    model = info.get("modelID")
    if isinstance(model, str) and model:
        run.metadata.setdefault("model", model)
    first = len(run.steps)
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "reasoning" and part.get("text"):
            _add(run, text_step("reasoning", str(part["text"]), limits=limits), limits)
    if text:
        _add(run, text_step("assistant", text, limits=limits, started_at=when), limits)
    model_call = 0  # `step-start` parts divide a message into model calls: each is a batch
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "step-start":
            model_call += 1
        if isinstance(part, dict) and part.get("type") == "tool":
            batch = f"{info.get('id')}#{model_call}"
            _add(run, _tool(part, limits, batch=batch), limits)
    error = info.get("error")
    if isinstance(error, dict):
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        notice = f"{error.get('name') or 'error'}: {data.get('message') or ''}".rstrip(": ")
        run.warnings.append(notice[:500])
        _add(run, text_step("system", notice, limits=limits, started_at=when), limits)
    if len(run.steps) > first:
        _usage(run.steps[first], info)


def _usage(step: Step, info: dict) -> None:
    tokens = info.get("tokens") if isinstance(info.get("tokens"), dict) else {}
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    given = number(tokens.get("input"))
    read = number(cache.get("read")) or 0
    step.tokens_in = None if given is None else given + read
    output, reasoning = number(tokens.get("output")), number(tokens.get("reasoning"))
    step.tokens_out = None if output is None else output + (reasoning or 0)
    step.cost = fnumber(info.get("cost"))


def _tool(part: dict, limits: Limits, *, batch: Any) -> Step:
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    times = state.get("time") if isinstance(state.get("time"), dict) else {}
    step = tool_step(
        tool=str(part.get("tool") or "(unknown)"),
        args=state.get("input"),
        limits=limits,
        id=str(part["callID"]) if part.get("callID") is not None else None,
        batch_id=str(batch) if batch else None,
        started_at=parse_time(times.get("start")),
    )
    status = state.get("status")
    ended = parse_time(times.get("end"))
    if status == "completed":
        output = state.get("output")
        metadata = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
        code = number(metadata.get("exit"))
        failed = (code is not None and code != 0) or text_errors.is_error(output, OPENCODE)
        set_result(step, output, error=failed, limits=limits, ended_at=ended)
    elif status == "error":
        set_result(step, state.get("error"), error=True, limits=limits, ended_at=ended)
    else:
        set_result(step, INTERRUPTED, error=True, limits=limits, ended_at=ended)
    return step


OPENCODE = text_errors.rules(
    ("timed out", r"\(Command timed out after \d+ ?ms\)"),
    ("aborted", r"\(Command was aborted\)"),
)
