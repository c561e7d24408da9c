"""Gemini CLI: headless `--output-format stream-json`, and the chat recordings (JSONL and JSON).

Two importers in one module. Format notes: §3.6 (stream-json, the `.json` recording) and
§3.27 (the JSONL recording, Gemini CLI 0.40 and later).

**Tool-call outcome** (both importers, `call_status`). Gemini's `status` is explicit, so it
wins: `error` -> "error", or "invalid" when the CLI refused the call itself (`Tool "x" not
found in registry`, a sub-agent's `Unauthorized tool call`, stream-json error type
`tool_not_registered`: the agent produced no valid action); `cancelled` -> "error" (the call
was declined or interrupted); an in-progress status left behind by a process that died
(`scheduled`, `validating`, `awaiting_approval`, `executing`, ...) -> "ok" with no result. A
`success` means the tool ran, not that the command did: the shell tool reports its command's
failure only in its text (`Command: ...`, `Output: ...`, `Exit Code: 1`). So for the shell
tool (`run_shell_command`, or a result in that layout) an `Exit Code: N` line decides; without
one, the shared text rules (text_errors) read the text, after the CLI's own `(none)`
placeholder lines (`Error: (none)`, `Signal: (none)`, ...) are dropped, plus Gemini's own rule
(`Signal: 9`: killed). Other tools' `success` stays "ok".

`gemini-stream` (JSONL, one event per line; a new `init` starts a new run):
- `init` -> run id `session_id`, metadata model. Lines before the first `init` belong to the
  run that follows it.
- `message` role `user` -> `user` step; role `assistant` -> `assistant` step, consecutive
  `delta: true` chunks concatenated into one step. A `message` without `timestamp` (the
  metaphi harness's own first message) is injected -> a `system` step.
- `tool_use` -> `tool_call` step (id `tool_id`, tool `tool_name`, args `parameters`);
  `tool_result` fills it by `tool_id`: result = `output` (or `error.message`), status by the
  outcome rule above. A call never answered keeps result None and status ok; a result whose
  call is absent -> its own step, tool "(unknown)". `batch_id` = "resp-<n>": calls after the
  same assistant text, with no result or user message between them, share it.
- `result` -> metadata (status, stats incl. tokens and duration); `error` -> a `system` step.

`gemini-chat`, one importer for both encodings of a chat recording (one format, two
encodings: the records are the same `MessageRecord`s, and resuming a `.json` session
continues it in a `.jsonl`), chosen by the file's first line:

- `.json` (§3.6 (b)): one object `{sessionId, projectHash, startTime, lastUpdated, messages}`,
  read incrementally: the messages one at a time (`messages.item`), the metadata keys from
  the head of the file (they come before `messages`).
- `.jsonl` (§3.27): a metadata line `{sessionId, projectHash, startTime, lastUpdated, kind}`
  (or a legacy full record with `messages`), then one record per line, told apart as the CLI
  itself does: `{"$rewindTo": id}`; a message (`id` string); `{"$set": {...}}`; a metadata
  line (`sessionId` and `projectHash`). Anything else is skipped and counted.
  - A message id written again replaces that message's earlier version in its first-seen
    place (the CLI re-appends a message each time its tool calls or tokens change).
  - `$set` updates the metadata (`lastUpdated`, `summary`, `kind`, ...). A `$set` with
    `messages` is a checkpoint (history compressed or masked): its messages replace the
    versions and the order of those so far. Messages it leaves out (the turns compressed
    into a summary, the CLI notices the model's history never holds) are not lost: they stay
    where they were, before the checkpoint's next message; `metadata["checkpoints"]` counts.
  - `$rewindTo` drops that message and everything after it from the live conversation (an
    unknown id drops all). The dropped messages are kept as an **abandoned branch**: a
    `system` step "abandoned branch ..." hangs under the last step before the rewound
    message (a root when there is none) with the branch's steps under it; the live steps that
    follow hang under that same step. So the two are siblings and neither sees the other's
    calls (detection/model.py), while both see what came before. A branch is placed right
    after the step it hangs under (it happened before what the live branch did next).
    metadata: `rewinds`, `abandoned_messages`. A run without rewinds and sub-agents is linear.
  - **Any length** (both encodings): the steps go into a step spool (kit.spool), so a
    recording is read in the memory of the spool's window. The newest live messages (half the
    spool's window: 1,024) stay open; older ones are laid out as steps and change no more. A
    message written again after that keeps its earlier version (noted). A checkpoint
    replaces and orders only the open messages: one it lists that is laid out keeps its place
    and version. A rewind drops only open messages: to a message laid out already (or
    unknown, once some are), it drops every open message, as a branch under the last message
    laid out (noted). A call made in content parts waits for its result among the newest
    MAX_OPEN_CALLS call ids, and is held in the spool while it waits.

Messages -> steps (both encodings):
- `user` -> `user` step (`content`: a string or `[Part]`, text parts joined). A user message
  holding only `functionResponse` parts is not a turn: its parts answer the calls made in
  content parts (below), by id, else in order.
- `gemini` -> `reasoning` step (`thoughts`, "subject: description"), `assistant` step
  (`content`, when not empty), then one `tool_call` step per `toolCalls` entry (id, name,
  args; result = `functionResponse.response.output`, or `.error`, or other parts' text, or a
  string `resultDisplay` when there is no response; status by the outcome rule). A message
  without `toolCalls` whose content has `functionCall` parts (a checkpoint rebuilt from the
  model's history) gives those as calls. `batch_id` = the message id; tokens
  (`tokens.input`, `tokens.output`) on the message's first step; `model` -> metadata.
- `info`, `warning`, `error` (CLI notices: API errors, quota, cancellations; an error may be
  visible only there) -> `system` steps, text "<type>: <content>"; counted in
  `metadata["notices"]`. Other types -> `system` steps too.
- A tool call with `agentId` was made by that sub-agent: its calls hang under a `system`
  step "sub-agent <id>" placed before the first of them, so they see the main history so far
  and the main agent does not see them; `metadata["sub_agents"]` lists the ids. A recording
  of a sub-agent itself (`kind: "subagent"`) is a run of its own (metadata `kind`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_time
from .detect import Claim, Sample, share
from .errors import Skips, TraceError, too_many_held
from .kit import add_step, check_step_limit, finish_run, set_result, spool, text_step, tool_step
from .kit.spool import HashSet, Recent, StepSpool
from .reading import (
    JsonlReader,
    Limits,
    clip_json,
    clip_strings,
    iter_document,
    looks_like_jsonl,
    partial_json,
    stream_head,
)

STREAM_TYPES = {"init", "message", "tool_use", "tool_result", "result", "error"}
MESSAGE_TYPES = {"user", "gemini", "info", "error", "warning"}
META_KEYS = ("sessionId", "projectHash", "startTime", "lastUpdated", "kind", "summary")
# A chat recording of any length is read in bounded memory: its steps are spooled (kit.spool),
# the newest live messages stay open (half the spool's window: 1,024), and a call made in
# content parts waits for its result among the newest MAX_OPEN_CALLS call ids.
MAX_OPEN_CALLS = 8192

# --- the outcome of a tool call (both importers)

SHELL_TOOLS = {"run_shell_command", "shell"}
GEMINI_RULES = text_errors.rules(
    ("killed by signal", r"^Signal: (?:[1-9]\d*|SIG[A-Z]+)[ \t]*$"),
)
_SHELL_LAYOUT = re.compile(r"\A\s*Command: ")
_EXIT_FIELD = re.compile(r"^Exit Code: (-?\d+)[ \t]*$", re.MULTILINE)
_PLACEHOLDER = re.compile(
    r"^(?:Error|Signal|Exit Code|Background PIDs|Process Group PGID): \(none\)[ \t]*$",
    re.MULTILINE,
)
_REFUSED = re.compile(r'Tool "[^"\n]*" not found in registry|Unauthorized tool call')


def call_status(
    status: Any,
    output: Any,
    *,
    tool: str,
    error: Any = None,
    error_type: Any = None,
) -> str:
    """Return "ok", "error" or "invalid" for a call (the module's outcome rule)."""
    status = str(status or "").lower()
    if error is not None or status == "error":
        text = error if isinstance(error, str) else output if isinstance(output, str) else ""
        refused = str(error_type or "").lower() == "tool_not_registered"
        return "invalid" if refused or _REFUSED.search(text) else "error"
    if status == "cancelled":
        return "error"
    if status not in ("", "success"):
        return "ok"  # still in progress when the file was written
    return "error" if shell_failed(output, tool) else "ok"


def shell_failed(output: Any, tool: str) -> bool:
    """Return whether a shell tool's text output reports a failed command."""
    if not isinstance(output, str) or not (tool in SHELL_TOOLS or _SHELL_LAYOUT.match(output)):
        return False
    code = _EXIT_FIELD.search(output)
    if code is not None:
        return int(code.group(1)) != 0
    return text_errors.is_error(_PLACEHOLDER.sub("", output), GEMINI_RULES)


def _set_call(step: Step, result: Any, status: str, limits: Limits, **kwargs: Any) -> None:
    set_result(step, result, error=status != "ok", limits=limits, **kwargs)
    step.status = status


# --- gemini-stream


def _stream_claim(sample: Sample) -> Claim:
    """JSONL of Gemini stream-json events, with a mark only Gemini writes."""
    if sample.layout != "jsonl":
        return Claim.no("not JSONL")
    records = sample.records
    fit = share(records, lambda r: isinstance(r, dict) and r.get("type") in STREAM_TYPES)
    if not fit:
        return Claim.no("no record is a stream-json event (init, message, tool_use, ...)")
    marks = [m for r in sample.objects() if (m := _stream_mark(r))]
    if not marks:
        return Claim.no(
            "no `init` with session_id, `tool_use`/`tool_result` with tool_id, delta "
            "message or `result` with stats"
        )
    return Claim(
        0.6 + 0.35 * fit,
        f"{fit:.0%} of the records are stream-json events; {len(marks)} carry Gemini's "
        f"fields (first: {marks[0]})",
    )


def _stream_mark(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    if kind == "init" and "session_id" in record:
        return "init with session_id"
    if kind in ("tool_use", "tool_result") and "tool_id" in record:
        return f"{kind} with tool_id"
    if kind == "message" and record.get("delta") is True:
        return "message with delta"
    if kind == "result" and isinstance(record.get("stats"), dict):
        return "result with stats"
    return None


class _Stream:
    """The `gemini-stream` importer."""

    name = "gemini-stream"
    label = "Gemini CLI stream-json"
    claim = staticmethod(_stream_claim)

    @staticmethod
    def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield one run per session (`init`) in the file, each as soon as it ends.

        A run carries the lines skipped since the run before it (so lines before an `init`
        count on the run that follows).
        """
        reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
        session = _Session(limits, source, 0)
        count = 0

        def done(run: Run) -> Run:
            reader.skips.apply(run)
            reader.skips.count, reader.skips.warnings = 0, []
            return finish_run(run)

        for line, event in reader:
            if event.get("type") == "init" and session.started:
                yield done(session.finish())
                count += 1
                session = _Session(limits, source, count)
            session.line = line
            session.event(event)
        reader.check_not_empty()
        if session.started or session.steps:
            yield done(session.finish())


@dataclass
class _Session:
    limits: Limits
    source: str
    index: int  # sessions before it in the file
    run: Run = field(init=False)
    line: int | None = None  # the line being read
    calls: dict[str, Step] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "gemini-cli"})
    started: bool = False
    delta: Step | None = None
    response: int = 0
    in_response: bool = False

    def __post_init__(self) -> None:
        self.run = Run(id=self.run_id(), format=_Stream.name)

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def run_id(self) -> str:
        default = f"{os.path.basename(self.source) or 'run'}#{self.index + 1}"
        return str(self.meta.get("session_id") or default)

    def finish(self) -> Run:
        self.run.id = self.run.name = self.run_id()
        self.run.metadata = self.meta
        return self.run

    def add(self, step: Step, event: dict[str, Any], *, model: bool) -> Step:
        step.started_at = parse_time(event.get("timestamp", event.get("ts")))
        if model:
            if not self.in_response:
                self.response += 1
                self.in_response = True
            step.batch_id = f"resp-{self.response}"
        else:
            self.in_response = False
        if step.kind != "assistant":
            self.delta = None
        return add_step(self.run, step, limits=self.limits, source=self.source, line=self.line)

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "init":
            self.started = True
            for key, target in (("session_id", "session_id"), ("model", "model")):
                if event.get(key):
                    self.meta[target] = clip_strings(str(event[key]), 200)
            self.run.id = self.run_id()
        elif kind == "message":
            self.message(event)
        elif kind == "tool_use":
            self.tool_use(event)
        elif kind == "tool_result":
            self.tool_result(event)
        elif kind == "result":
            self.meta["status"] = clip_json(event.get("status"), self.limits)
            if isinstance(event.get("stats"), dict):
                self.meta["stats"] = clip_json(event["stats"], self.limits)
        elif kind == "error":
            text = content_text(event.get("message") or event.get("error"))
            self.add(text_step("system", text, limits=self.limits), event, model=False)

    def message(self, event: dict[str, Any]) -> None:
        text = content_text(event.get("content"))
        role = event.get("role")
        if "timestamp" not in event:  # the harness's own message: injected, not a user turn
            self.add(text_step("system", text, limits=self.limits), event, model=False)
        elif role == "assistant":
            if event.get("delta") is True and self.delta is not None:
                self.delta.text = clip_strings(
                    (self.delta.text or "") + text, self.limits.max_value_chars
                )
                return
            step = self.add(text_step("assistant", text, limits=self.limits), event, model=True)
            self.delta = step if event.get("delta") is True else None
        else:
            self.add(text_step("user", text, limits=self.limits), event, model=False)

    def tool_use(self, event: dict[str, Any]) -> None:
        tool_id = str(event.get("tool_id") or "")
        unique = tool_id
        while unique and any(s.id == unique for s in self.calls.values()):
            unique += "#"
        step = tool_step(
            tool=str(event.get("tool_name") or ""),
            args=event.get("parameters"),
            limits=self.limits,
            id=unique or None,
        )
        self.add(step, event, model=True)
        if tool_id:
            self.calls[tool_id] = step

    def tool_result(self, event: dict[str, Any]) -> None:
        call = self.calls.pop(str(event.get("tool_id") or ""), None)
        self.in_response = False
        if call is None:
            call = self.add(
                tool_step(tool="(unknown)", args={}, limits=self.limits), event, model=False
            )
            self.meta["results_without_call"] = self.meta.get("results_without_call", 0) + 1
        result = event.get("output")
        error = event.get("error")
        error_text = error_type = None
        if isinstance(error, dict):
            error_text, error_type = error.get("message"), error.get("type")
            if result is None:
                result = error_text
        elif isinstance(error, str):
            error_text = result = error if result is None else result
        status = call_status(
            event.get("status"), result, tool=call.tool, error=error_text, error_type=error_type
        )
        _set_call(
            call,
            result,
            status,
            self.limits,
            ended_at=parse_time(event.get("timestamp", event.get("ts"))),
        )


# --- gemini-chat: detection


def _is_metadata(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("sessionId"), str)
        and isinstance(record.get("projectHash"), str)
        and not isinstance(record.get("id"), str)
    )


def _is_message(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and record.get("type") in MESSAGE_TYPES
    )


def _is_chat_record(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    return (
        _is_message(record)
        or isinstance(record.get("$set"), dict)
        or isinstance(record.get("$rewindTo"), str)
    )


def _gemini_only(record: Any) -> bool:
    """A record only a Gemini recording writes: a `gemini` message, a `$set`, a `$rewindTo`."""
    return isinstance(record, dict) and (
        (_is_message(record) and record.get("type") == "gemini")
        or isinstance(record.get("$set"), dict)
        or isinstance(record.get("$rewindTo"), str)
    )


def _chat_claim(sample: Sample) -> Claim:
    """A chat recording: the `.json` object, or JSONL of a metadata line and records."""
    top = sample.top
    if isinstance(top, dict) and "messages" in top:
        messages = top.get("messages")
        if not isinstance(messages, list):
            return Claim.no("`messages` is not an array")
        fit = share(messages, _is_message) if messages else 1.0
        if _is_metadata(top) and fit >= 0.5:
            return Claim(
                0.95,
                f"one object with sessionId, projectHash and messages; {fit:.0%} of the "
                "messages are {id, type: user|gemini|info|error|warning}",
            )
        if isinstance(top.get("sessionId"), str) and messages and any(map(_gemini_only, messages)):
            return Claim(0.5 + 0.3 * fit, "sessionId and messages with `type: gemini`")
        return Claim.no("an object with messages, but no sessionId/projectHash")
    if sample.layout != "jsonl":
        return Claim.no("neither a chat recording object nor JSONL")
    records = sample.records
    meta = [r for r in records if _is_metadata(r)]
    body = [r for r in records if not _is_metadata(r)]
    fit = share(body, _is_chat_record)
    first = records[0] if records else None
    if _is_metadata(first) and (not body or fit >= 0.5):
        keys = [k for k in ("startTime", "lastUpdated", "kind") if k in first]
        return Claim(
            0.95 if body else 0.9,
            f"a metadata line (sessionId, projectHash{''.join(', ' + k for k in keys)}) "
            f"then {fit:.0%} of {len(body)} records are messages, $set or $rewindTo",
        )
    if not fit:
        return Claim.no(
            "no metadata line with sessionId and projectHash, and no record is "
            "{id, type: user|gemini|info|error|warning}, $set or $rewindTo"
        )
    if any(map(_gemini_only, body)):
        return Claim(
            0.5 + 0.35 * fit + (0.05 if meta else 0.0),
            f"{fit:.0%} of the records are chat-recording records, some only Gemini writes "
            "(`type: gemini`, $set, $rewindTo)",
        )
    return Claim(0.3 * fit, f"{fit:.0%} of the records are {{id, type: user|info|...}} records")


# --- gemini-chat: messages to steps


@dataclass(slots=True, eq=False)
class _Message:
    """One message's steps (its latest version), and what it answers or asks of others."""

    id: str
    steps: list[Step] = field(default_factory=list)
    responses: list[tuple[str | None, str, Any, str]] = field(default_factory=list)
    agents: dict[int, str] = field(default_factory=dict)  # index in steps -> agentId
    pending: dict[int, str] = field(default_factory=dict)  # index -> call id, from parts


@dataclass(slots=True, eq=False)
class _Branch:
    anchor: _Message | None  # the last live message before the rewound one
    messages: list[_Message]
    line: int | None


def _parts(content: Any) -> list[Any]:
    if isinstance(content, list):
        return content
    return [content] if content is not None else []


def _response_value(part: dict[str, Any]) -> tuple[Any, Any]:
    """(output, error) of a functionResponse part."""
    fr = part.get("functionResponse")
    response = fr.get("response") if isinstance(fr, dict) else None
    if not isinstance(response, dict):
        return response, None
    if "error" in response:
        return response["error"], response["error"]
    if "output" in response:
        return response["output"], None
    return response, None


def _call_result(call: dict[str, Any]) -> tuple[Any, Any]:
    """(result, error) of a ToolCallRecord: its functionResponse outputs, else other parts."""
    raw = call.get("result")
    outputs: list[Any] = []
    error = None
    if isinstance(raw, str):
        outputs.append(raw)
    for part in _parts(raw) if not isinstance(raw, str) else []:
        if isinstance(part, dict) and "functionResponse" in part:
            value, failed = _response_value(part)
            error = failed if failed is not None else error
            outputs.append(value)
        elif part is not None:
            text = content_text(part)
            if text:
                outputs.append(text)
    if not outputs and isinstance(call.get("resultDisplay"), str):
        outputs.append(call["resultDisplay"])
    if not outputs:
        return None, error
    return (outputs[0] if len(outputs) == 1 else outputs), error


def build_message(record: dict[str, Any], meta: dict[str, Any], limits: Limits) -> _Message:
    """Return the steps of one MessageRecord (see the module rules)."""
    kind, msg_id = record.get("type"), str(record.get("id") or "")
    when = parse_time(record.get("timestamp"))
    message = _Message(msg_id)
    content = record.get("content")
    if kind == "user":
        texts = []
        for part in _parts(content):
            if isinstance(part, dict) and "functionResponse" in part:
                fr = part["functionResponse"] if isinstance(part["functionResponse"], dict) else {}
                value, error = _response_value(part)
                name = str(fr.get("name") or "")
                message.responses.append(
                    (
                        _text_id(fr.get("id")),
                        name,
                        value,
                        call_status(None, value, tool=name, error=error),
                    )
                )
            else:
                text = content_text(part)
                if text:
                    texts.append(text)
        if texts or not message.responses:
            text = content if isinstance(content, str) else "\n".join(texts)
            message.steps.append(text_step("user", text, limits=limits, id=msg_id))
    elif kind == "gemini":
        _gemini_steps(record, message, meta, limits)
    else:
        notices = meta.setdefault("notices", {})
        label = str(kind) if isinstance(kind, str) else "message"
        notices[label[:40]] = notices.get(label[:40], 0) + 1
        text = f"{label}: {content_text(content)}"
        message.steps.append(text_step("system", text, limits=limits, id=msg_id))
    for step in message.steps:
        step.started_at = step.started_at or when
    return message


def _text_id(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)[:200]


def _gemini_steps(
    record: dict[str, Any], message: _Message, meta: dict[str, Any], limits: Limits
) -> None:
    msg_id = message.id
    if isinstance(record.get("model"), str) and record["model"]:
        meta["model"] = record["model"][:200]
    thoughts = [
        f"{t.get('subject', '')}: {t.get('description', '')}".strip(": ")
        for t in record.get("thoughts") or []
        if isinstance(t, dict)
    ]
    steps = message.steps
    if thoughts:
        steps.append(
            text_step("reasoning", "\n".join(thoughts), limits=limits, id=f"{msg_id}:thoughts")
        )
    content = record.get("content")
    text = content_text([p for p in _parts(content) if not _is_call_part(p)])
    if text.strip():
        steps.append(text_step("assistant", text, limits=limits, id=msg_id))
    calls = record.get("toolCalls")
    if isinstance(calls, list) and calls:
        for number_, call in enumerate(calls):
            if isinstance(call, dict):
                steps.append(_chat_call(call, f"{msg_id}:call{number_}", limits))
                if isinstance(call.get("agentId"), str) and call["agentId"]:
                    message.agents[len(steps) - 1] = call["agentId"][:200]
    else:
        for number_, part in enumerate(_parts(content)):
            if _is_call_part(part):
                fc = part["functionCall"]
                call_id = _text_id(fc.get("id")) or f"{msg_id}:call{number_}"
                steps.append(
                    tool_step(
                        tool=str(fc.get("name") or ""),
                        args=fc.get("args"),
                        limits=limits,
                        id=call_id,
                    )
                )
                message.pending[len(steps) - 1] = call_id
    if not steps:
        steps.append(text_step("assistant", text, limits=limits, id=msg_id))
    for step in steps:
        step.batch_id = msg_id or None
    tokens = record.get("tokens") if isinstance(record.get("tokens"), dict) else {}
    steps[0].tokens_in, steps[0].tokens_out = (
        number(tokens.get("input")),
        number(tokens.get("output")),
    )


def _is_call_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("functionCall"), dict)


def _chat_call(call: dict[str, Any], default_id: str, limits: Limits) -> Step:
    step = tool_step(
        tool=sys.intern(str(call.get("name") or "")[:200]),  # one copy of each name
        args=call.get("args"),
        limits=limits,
        id=_text_id(call.get("id")) or default_id,
        started_at=parse_time(call.get("timestamp")),
    )
    result, error = _call_result(call)
    status = call_status(call.get("status"), result, tool=step.tool, error=error)
    _set_call(step, result, status, limits)
    if str(call.get("status") or "").lower() not in ("", "success", "error", "cancelled"):
        step.result = None  # still in progress: no result yet
    return step


# --- gemini-chat: the conversation state


class _Recording:
    """The live messages (last version of each id, in order), the abandoned branches, and the
    metadata, record by record. The newest `window` live messages stay open (a later version
    may replace one, a checkpoint reorder them, a rewind drop them); `settle()` lays out the
    older ones as steps (`_Layout`) into the run's spool, and `run()` the rest."""

    def __init__(self, *, source: str, limits: Limits, skips: Skips) -> None:
        self.source, self.limits, self.skips = source, limits, skips
        self.meta: dict[str, Any] = {"agent": "gemini-cli"}
        self.live: dict[str, _Message] = {}  # the open live messages, oldest first
        self.window = max(1, spool.WINDOW // 2)  # open live messages, at most
        self.laid = HashSet()  # ids of the live messages laid out (closed)
        self.last: _Message | None = None  # the last live message laid out
        self.held = 0  # steps held, live and abandoned
        steps = StepSpool()
        run_id = self.run_id(os.path.basename(source) or "run")
        run = Run(id=run_id, format=_Chat.name, metadata=self.meta, steps=steps)  # type: ignore[arg-type]
        self.layout = _Layout(self, run)
        steps.hold = self.layout.holds

    def _count(self, delta: int, line: int | None) -> None:
        self.held += delta  # what the run will hold: laying it out adds a step per marker
        if self.held > self.limits.max_held_steps:
            raise too_many_held(self.limits.max_held_steps, source=self.source, line=line)
        run_id = self.run_id(os.path.basename(self.source) or "run")
        total = len(self.layout.run.steps) + self.held
        check_step_limit(total, run_id, limits=self.limits, source=self.source, line=line)

    def message(self, record: dict[str, Any], line: int | None) -> None:
        """Add a message, or replace the earlier version of its id in place."""
        if self.closed(record.get("id")):
            self.skips.note(
                f"{self.source}:{line}: message {str(record['id'])[:80]!r} written again after "
                f"{self.window} newer messages: the earlier version stands"
            )
            return
        built = build_message(record, self.meta, self.limits)
        old = self.live.get(built.id)
        if old is None:
            self.live[built.id] = built
            self._count(len(built.steps), line)
        else:
            self._count(len(built.steps) - len(old.steps), line)
            old.steps, old.responses = built.steps, built.responses
            old.agents, old.pending = built.agents, built.pending

    def set(self, update: dict[str, Any], line: int | None) -> None:
        """A metadata update; with `messages`, a checkpoint (see the module rules)."""
        self.metadata(update)
        messages = update.get("messages")
        if isinstance(messages, list):
            self.checkpoint(messages, line)

    def metadata(self, record: dict[str, Any]) -> None:
        for key in META_KEYS:
            value = record.get(key)
            if isinstance(value, str) and value:
                self.meta[key] = clip_strings(value, 1000)

    def closed(self, message_id: Any) -> bool:
        """Whether this message is laid out already: it changes no more."""
        return message_id in self.laid and message_id not in self.live

    def checkpoint(self, messages: list[Any], line: int | None) -> None:
        """Replace the open live messages by the checkpoint's, keeping those it leaves out (a
        message it lists that is laid out already keeps its place and version)."""
        self.meta["checkpoints"] = self.meta.get("checkpoints", 0) + 1
        before = {id(m): n for n, m in enumerate(self.live.values())}
        listed: dict[int, _Message] = {}
        for index, record in enumerate(messages):
            if not (isinstance(record, dict) and isinstance(record.get("id"), str)):
                self.skips.add(
                    TraceError(
                        "not a message record (no string `id`)",
                        source=self.source,
                        line=line,
                        field=f"$set.messages[{index}]",
                    )
                )
                continue
            if self.closed(record["id"]):
                continue
            self.message(record, line)
            message = self.live[record["id"]]
            listed[id(message)] = message
        left = [m for m in self.live.values() if id(m) in before and id(m) not in listed]
        merged: list[_Message] = []
        waiting: list[_Message] = []  # new with the checkpoint (a summary): before the next
        taken = 0
        for message in listed.values():
            if id(message) not in before:
                waiting.append(message)
                continue
            while taken < len(left) and before[id(left[taken])] < before[id(message)]:
                merged.append(left[taken])
                taken += 1
            merged.extend(waiting)
            waiting = []
            merged.append(message)
        merged.extend(left[taken:])
        merged.extend(waiting)
        self.live = {m.id: m for m in merged}

    def rewind(self, target: str, line: int | None) -> None:
        """Drop `target` and what follows from the live messages, keeping them as a branch.
        Only open messages are dropped: a target laid out already, or unknown once some
        message is, drops every open message (after the last one laid out)."""
        order = list(self.live.values())
        index = next((n for n, m in enumerate(order) if m.id == target), None)
        if index is None:
            index = 0
            what = "no live message: every message so far"
            if self.last is not None:
                what = f"no message of the newest {self.window}: every one of those"
            self.skips.note(
                f"{self.source}:{line}: $rewindTo {target[:80]!r} names {what} is dropped "
                "(kept as an abandoned branch)"
            )
        dropped = order[index:]
        self.meta["rewinds"] = self.meta.get("rewinds", 0) + 1
        if not dropped:
            return
        self.meta["abandoned_messages"] = self.meta.get("abandoned_messages", 0) + len(dropped)
        anchor = order[index - 1] if index else self.last
        self.layout.anchor(_Branch(anchor, dropped, line))
        self.live = {m.id: m for m in order[:index]}

    def settle(self) -> None:
        """Lay out the live messages older than the newest `window`: they change no more."""
        if len(self.live) > self.window:
            self.layout.run.id = self.run_id(os.path.basename(self.source) or "run")
        while len(self.live) > self.window:
            message = self.live.pop(next(iter(self.live)))
            self.lay(message)

    def lay(self, message: _Message) -> None:
        self.held -= len(message.steps)
        self.layout.live(message)
        self.laid.add(message.id)
        self.last = message

    def run_id(self, default_id: str) -> str:
        return str(self.meta.get("sessionId") or default_id)

    def run(self, default_id: str) -> Run:
        run = self.layout.run
        run.id = run.name = self.run_id(default_id)
        for message in list(self.live.values()):
            self.lay(message)
        self.live = {}
        run = self.layout.finish()
        run.steps.hold = None  # type: ignore[attr-defined] # laid out: no step changes
        return run


class _Layout:
    """Lay out the messages as steps, live message by live message: branches and sub-agents as
    sub-trees (module rules). A branch is laid out after its anchor message, once the next
    live message is (no later branch can then hang there)."""

    def __init__(self, recording: _Recording, run: Run) -> None:
        self.recording, self.run = recording, run
        self.limits = recording.limits
        self.at: dict[int, list[_Branch]] = {}  # id(anchor) (0: none) -> its branches
        self.seen = HashSet()  # the step ids laid out
        self.repeats: dict[str, int] = {}  # a step id laid out more than once -> how often
        # call id -> the calls made in content parts waiting for a result (the newest)
        self.open: Recent[str, list[Step]] = Recent(MAX_OPEN_CALLS, refresh=False)
        self.waiting: set[int] = set()  # id() of the steps in `open`
        self.agents: set[str] = set()
        # the top sequence: the parent of the next live step, the last one's id, the markers
        self.current: str | None = None
        self.last: str | None = None
        self.markers: dict[str, str] = {}
        self.started = False
        self.previous: _Message | None = None  # the last live message laid out

    def anchor(self, branch: _Branch) -> None:
        key = id(branch.anchor) if branch.anchor is not None else 0
        self.at.setdefault(key, []).append(branch)

    def holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still get its result."""
        return id(step) in self.waiting

    def live(self, message: _Message) -> None:
        """Lay out the next live message (after the branches of the one before)."""
        self._branches_before()
        self.current, self.last = self.lay(message, self.current, self.last, self.markers)
        self.previous = message

    def finish(self) -> Run:
        self._branches_before()
        if self.agents:
            self.run.metadata["sub_agents"] = sorted(self.agents)
        return self.run

    def _branches_before(self) -> None:
        if not self.started:
            self.started = True
            for branch in self.at.pop(0, []):
                self.branch(branch, None)
        if self.previous is not None:
            branches = self.at.pop(id(self.previous), [])
            for branch in branches:
                self.branch(branch, self.last)
                self.current = self.last
            self.previous = None

    def add(self, step: Step, parent: str | None) -> Step:
        if step.id is not None and not self.seen.add(step.id):
            count = self.repeats.get(step.id, 1) + 1
            self.repeats[step.id] = count
            step.id = f"{step.id}#{count}"
        step.parent_id = parent
        return add_step(self.run, step, limits=self.limits, source=self.recording.source)

    def marker(self, text: str, name: str, parent: str | None) -> Step:
        """Add the step that opens a sub-agent or an abandoned branch: a lane of its own."""
        return self.add(text_step("system", text, limits=self.limits, id=name, lane=name), parent)

    def lay(
        self,
        message: _Message,
        current: str | None,
        last: str | None,
        markers: dict[str, str],
    ) -> tuple[str | None, str | None]:
        """Lay out one message's steps; return the next (current, last)."""
        self.answer(message, current)
        for index, step in enumerate(message.steps):
            agent = message.agents.get(index)
            if agent is None:
                last = self.add(step, current).id
                continue
            if agent not in markers:
                self.agents.add(agent)
                markers[agent] = self.marker(f"sub-agent {agent}", f"agent:{agent}", current).id
            self.add(step, markers[agent])
        for index, call_id in message.pending.items():
            step = message.steps[index]
            gone = self.open.put(call_id, self.open.get(call_id, []) + [step])
            self.waiting.add(id(step))
            if gone is not None:
                self.waiting.difference_update(id(s) for s in gone[1])
        return current, last

    def sequence(self, messages: list[_Message], parent: str | None) -> None:
        """Lay out a branch's messages under `parent`, with the branches they anchor."""
        current = last = parent
        markers: dict[str, str] = {}
        for message in messages:
            current, last = self.lay(message, current, last, markers)
            for branch in self.at.pop(id(message), []):
                self.branch(branch, last)
                current = last

    def branch(self, branch: _Branch, parent: str | None) -> None:
        first = branch.messages[0].id
        where = f" (`$rewindTo` at line {branch.line})" if branch.line else ""
        text = (
            f"abandoned branch: {len(branch.messages)} messages from {first[:80]!r} were "
            f"dropped by a rewind{where}"
        )
        self.recording.held -= sum(len(m.steps) for m in branch.messages)
        marker = self.marker(text, f"branch:{first}", parent)
        self.sequence(branch.messages, marker.id)

    def answer(self, message: _Message, parent: str | None) -> None:
        """Give the calls made in content parts the results a user message's parts carry.

        A result for a call that carries its own (a `toolCalls` entry) repeats it: left out.
        """
        for call_id, name, value, status in message.responses:
            if call_id is not None and call_id in self.seen and not self.open.get(call_id):
                continue
            waiting = self.open.get(call_id or "") or []
            if not waiting and call_id is None:
                waiting = next(
                    (w for w in self.open.values() if w and (not name or w[0].tool == name)), []
                )
            if waiting:
                step = waiting.pop(0)
                self.waiting.discard(id(step))
            else:
                step = tool_step(tool=name, args=None, limits=self.limits, id=call_id)
                self.add(step, parent)
                self.recording.skips.note(
                    f"{self.recording.source}: result for call {call_id!r} matches no call; "
                    "kept as a step of its own"
                )
            _set_call(step, value, status, self.limits)


# --- gemini-chat: the importer


class _Chat:
    """The `gemini-chat` importer (both encodings of a chat recording)."""

    name = "gemini-chat"
    label = "Gemini CLI chat recording (JSONL or JSON)"
    claim = staticmethod(_chat_claim)

    @staticmethod
    def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield the one run of a chat recording."""
        default_id = os.path.basename(source) or "run"
        if looks_like_jsonl(stream_head(stream)):
            recording = _read_jsonl(stream, source=source, limits=limits)
            recording.meta["recording"] = "jsonl"
        else:
            recording = _read_document(stream, source=source, limits=limits)
            recording.meta["recording"] = "json"
        run = recording.run(default_id)
        yield finish_run(recording.skips.apply(run))


MALFORMED = (TypeError, AttributeError, KeyError)


def _read_jsonl(stream: IO[bytes], *, source: str, limits: Limits) -> _Recording:
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    recording = _Recording(source=source, limits=limits, skips=reader.skips)
    for line, record in reader:
        try:
            if isinstance(record.get("$rewindTo"), str):
                recording.rewind(record["$rewindTo"], line)
            elif isinstance(record.get("id"), str):
                recording.message(record, line)
            elif isinstance(record.get("$set"), dict):
                recording.set(record["$set"], line)
            elif isinstance(record.get("sessionId"), str):
                recording.metadata(record)  # the metadata line, or a legacy whole record
                if isinstance(record.get("messages"), list):
                    recording.checkpoint(record["messages"], line)
            else:
                reader.reject(
                    TraceError(
                        "not a Gemini chat record: no `id`, `$set`, `$rewindTo` or `sessionId`",
                        source=source,
                        line=line,
                    )
                )
        except MALFORMED as exc:
            reader.reject(
                TraceError(f"malformed record ({type(exc).__name__})", source=source, line=line)
            )
        recording.settle()
    reader.check_not_empty()
    return recording


def _read_document(stream: IO[bytes], *, source: str, limits: Limits) -> _Recording:
    top = partial_json(stream_head(stream))  # the metadata keys come before `messages`
    recording = _Recording(source=source, limits=limits, skips=Skips())
    if isinstance(top, dict):
        recording.metadata(top)
    seen = 0
    for index, item in enumerate(
        iter_document(stream, "messages.item", source=source, limits=limits)
    ):
        seen += 1
        where = f"messages[{index}]"
        if not isinstance(item, dict):
            recording.skips.add(
                TraceError(
                    f"expected an object, got {type(item).__name__}", source=source, field=where
                )
            )
            continue
        if not isinstance(item.get("id"), str):
            item = {**item, "id": f"#{index}"}
        try:
            recording.message(item, None)
        except MALFORMED as exc:
            recording.skips.add(
                TraceError(f"malformed message ({type(exc).__name__})", source=source, field=where)
            )
        recording.settle()
    if not seen and not (isinstance(top, dict) and isinstance(top.get("messages"), list)):
        raise TraceError(
            "not a Gemini chat recording: no `messages` array", source=source, field="messages"
        )
    return recording


stream = _Stream()
chat = _Chat()
