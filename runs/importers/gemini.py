"""Gemini CLI: headless `--output-format stream-json` and the chat recording JSON.

Two importers in one module; both give linear runs (no parent ids).

`gemini-stream` (JSONL, one event per line; a new `init` starts a new run):
- `init` -> run id `session_id`, metadata model. Lines before the first `init` belong to the
  run that follows it.
- `message` role `user` -> `user` step; role `assistant` -> `assistant` step, consecutive
  `delta: true` chunks concatenated into one step. A `message` without `timestamp` (the
  metaphi harness's own first message) is injected -> a `system` step.
- `tool_use` -> `tool_call` step (id `tool_id`, tool `tool_name`, args `parameters`);
  `tool_result` fills it by `tool_id`: result = `output` (or `error.message`), status
  `error` when `status == "error"` (explicit; no text rules). A call never answered keeps
  result None and status ok; a result whose call is absent -> its own step, tool
  "(unknown)". `batch_id` = "resp-<n>": calls after the same assistant text, with no result
  or user message between them, share it.
- `result` -> metadata (status, stats incl. tokens and duration).

`gemini-chat` (one JSON object `{sessionId, projectHash, startTime, lastUpdated, messages}`):
- `user` -> `user` step; `gemini` -> `reasoning` step (its `thoughts`, "subject:
  description"), `assistant` step (`content`, when not empty), then one `tool_call` step per
  `toolCalls` entry (id, name, args; result = `functionResponse.response.output`, or
  `.error`; status `error` when the call's `status` is "error" or the response has `error`);
  `batch_id` = the message id; tokens (`tokens.input`, `tokens.output`) on the message's
  first step. Other message types (`info`, `error`, `warning`) -> `system` steps.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, number, parse_time
from .errors import TraceError
from .reading import JsonlReader, Limits, head_text, head_values, read_document

STREAM_TYPES = {"init", "message", "tool_use", "tool_result", "result", "error"}


class _Stream:
    """The `gemini-stream` importer."""

    name = "gemini-stream"
    label = "Gemini CLI stream-json"

    @staticmethod
    def sniff(head: bytes) -> bool:
        """JSONL of Gemini events: an `init` with `session_id`, or tool/delta events."""
        values = head_values(head)
        if not values or not all(
            isinstance(v, dict) and v.get("type") in STREAM_TYPES for v in values
        ):
            return False
        for value in values:
            kind = value.get("type")
            if kind == "init" and "session_id" in value:
                return True
            if kind in ("tool_use", "tool_result") and "tool_id" in value:
                return True
            if kind == "message" and value.get("delta") is True:
                return True
            if kind == "result" and isinstance(value.get("stats"), dict):
                return True
        return False

    @staticmethod
    def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield one run per session (`init`) in the file."""
        reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
        session = _Session(limits)
        runs: list[Run] = []
        for _, event in reader:
            if event.get("type") == "init" and session.started:
                runs.append(session.run(source, len(runs)))
                session = _Session(limits)
            session.event(event)
        reader.check_not_empty()
        if session.started or session.steps:
            runs.append(session.run(source, len(runs)))
        for run in runs:
            yield finish_run(reader.skips.apply(run), source=source, limits=limits)


@dataclass
class _Session:
    limits: Limits
    steps: list[Step] = field(default_factory=list)
    calls: dict[str, Step] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "gemini-cli"})
    started: bool = False
    delta: Step | None = None
    response: int = 0
    in_response: bool = False

    def run(self, source: str, index: int) -> Run:
        default = f"{os.path.basename(source) or 'run'}#{index + 1}"
        return Run(
            id=str(self.meta.get("session_id") or default),
            format=_Stream.name,
            steps=self.steps,
            metadata=self.meta,
        )

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
        self.steps.append(step)
        return step

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "init":
            self.started = True
            for key, target in (("session_id", "session_id"), ("model", "model")):
                if event.get(key):
                    self.meta[target] = str(event[key])
        elif kind == "message":
            self.message(event)
        elif kind == "tool_use":
            self.tool_use(event)
        elif kind == "tool_result":
            self.tool_result(event)
        elif kind == "result":
            self.meta["status"] = event.get("status")
            if isinstance(event.get("stats"), dict):
                self.meta["stats"] = event["stats"]
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
                self.delta.text = (self.delta.text or "") + text
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
        error = event.get("status") == "error"
        result = event.get("output")
        if result is None and isinstance(event.get("error"), dict):
            result = event["error"].get("message")
        set_result(
            call,
            result,
            error=error,
            limits=self.limits,
            ended_at=parse_time(event.get("timestamp", event.get("ts"))),
        )


class _Chat:
    """The `gemini-chat` importer."""

    name = "gemini-chat"
    label = "Gemini CLI chat recording (JSON)"

    @staticmethod
    def sniff(head: bytes) -> bool:
        """A JSON object with `sessionId`, `projectHash` and `messages`."""
        text = head_text(head, len(head))
        return (
            text.startswith("{")
            and re.search(r'"projectHash"\s*:', text) is not None
            and '"sessionId"' in text
            and '"messages"' in text
        )

    @staticmethod
    def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield the one run of a chat recording."""
        doc = read_document(stream, source=source, limits=limits)
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            raise TraceError(
                "not a Gemini chat recording: no `messages` array", source=source, field="messages"
            )
        meta: dict[str, Any] = {"agent": "gemini-cli"}
        for key in ("projectHash", "startTime", "lastUpdated"):
            if doc.get(key):
                meta[key] = doc[key]
        run = Run(
            id=str(doc.get("sessionId") or os.path.basename(source) or "run"),
            format=_Chat.name,
            metadata=meta,
        )
        for message in doc["messages"]:
            if isinstance(message, dict):
                run.steps.extend(_chat_steps(message, meta, limits))
        yield finish_run(run, source=source, limits=limits)


def _chat_steps(message: dict[str, Any], meta: dict[str, Any], limits: Limits) -> list[Step]:
    kind, text = message.get("type"), content_text(message.get("content"))
    when = parse_time(message.get("timestamp"))
    msg_id = str(message.get("id") or "") or None
    if kind == "user":
        return [text_step("user", text, limits=limits, id=msg_id, started_at=when)]
    if kind != "gemini":
        return [text_step("system", text, limits=limits, id=msg_id, started_at=when)]
    if message.get("model"):
        meta.setdefault("model", str(message["model"]))
    steps: list[Step] = []
    thoughts = [
        f"{t.get('subject', '')}: {t.get('description', '')}".strip(": ")
        for t in message.get("thoughts") or []
        if isinstance(t, dict)
    ]
    if thoughts:
        steps.append(text_step("reasoning", "\n".join(thoughts), limits=limits))
    if text.strip():
        steps.append(text_step("assistant", text, limits=limits, id=msg_id))
    for call in message.get("toolCalls") or []:
        if isinstance(call, dict):
            steps.append(_chat_call(call, limits))
    if not steps:
        steps.append(text_step("assistant", text, limits=limits, id=msg_id))
    for step in steps:
        step.batch_id = msg_id
        step.started_at = step.started_at or when
    tokens = message.get("tokens") if isinstance(message.get("tokens"), dict) else {}
    steps[0].tokens_in, steps[0].tokens_out = (
        number(tokens.get("input")),
        number(tokens.get("output")),
    )
    return steps


def _chat_call(call: dict[str, Any], limits: Limits) -> Step:
    step = tool_step(
        tool=str(call.get("name") or ""),
        args=call.get("args"),
        limits=limits,
        id=str(call.get("id") or "") or None,
        started_at=parse_time(call.get("timestamp")),
    )
    outputs, error = [], call.get("status") == "error"
    for part in call.get("result") or []:
        response = ((part or {}).get("functionResponse") or {}).get("response") or {}
        if not isinstance(response, dict):
            continue
        if "error" in response:
            error = True
            outputs.append(response["error"])
        elif "output" in response:
            outputs.append(response["output"])
    result = None if not outputs else outputs[0] if len(outputs) == 1 else outputs
    set_result(step, result, error=error, limits=limits)
    return step


stream = _Stream()
chat = _Chat()
