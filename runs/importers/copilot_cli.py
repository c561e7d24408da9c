"""GitHub Copilot CLI session events, `events.jsonl` (format notes §3.17).

Each line: `{type, data, id, timestamp, parentId, agentId?}`; `parentId` chains events in
time (a linked list, not a call tree), so the run is linear except for sub-agents.
`copilot -p … --output-format json` prints the same events plus a final `result` line.

Events -> steps (one run per file, id = `session.start.data.sessionId`):
- `session.start`: model, Copilot version and cwd to metadata; `session.model_change`
  updates the model; `session.shutdown`: the per-model totals (`modelMetrics`) to metadata.
- `user.message` -> user step; `assistant.message` -> assistant step (content), and its
  `reasoningText` a reasoning step; each of its `toolRequests` opens a call.
- `tool.execution_start` -> the executed call (opens it, or fills in the requested one with
  the executed arguments), linked by `toolCallId`.
- `tool.execution_complete` -> the result: `result.content` (else `error.message`); status
  "error" when `success` is false, else by the shared text rules (a shell that exits non-zero
  can report `success: true` with "completed with exit code 1" in its text).
- `session.error`, `session.warning`, `abort`, `subagent.failed` -> system steps saying so
  (and a warning for errors); other event types are context and are left out.
- Sub-agents: `subagent.started {toolCallId}` names the parent `task` call; the sub-agent's
  events carry `agentId` (older CLIs `data.parentToolCallId`) and hang under that call.
- **Any length**: the steps go into a step spool (kit.spool), so a session is read in the
  memory of the spool's window; a call waiting for its result is held (`_Session.holds`).
  What the reader looks back at is bounded: MAX_OPEN_CALLS calls waiting for their result
  (a result for an older one reads as a call not in the file), an answered call only while
  it is among the newest ANSWERED_STEPS steps (a later start or result for it reads as a
  call of its own), the newest MAX_AGENTS sub-agent ids and task calls waiting for theirs,
  and the first MAX_WARNINGS warnings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_json_text, parse_time
from .detect import Claim, Sample, share
from .errors import MAX_WARNINGS, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import Recent, StepSpool
from .reading import JsonlReader, Limits

name = "copilot-cli"
label = "GitHub Copilot CLI session events"

KNOWN_PREFIXES = ("session.", "user.", "assistant.", "tool.", "subagent.", "permission.")
KNOWN_TYPES = {"abort", "result", "hook.start", "hook.end", "skill.invoked"}
# A session of any length is read in bounded memory: its steps are spooled (kit.spool; a call
# still waiting for its result is held, see `_Session.holds`), and what the reader looks back
# at is bounded too.
MAX_OPEN_CALLS = 8192  # calls waiting for their result (the oldest is given up)
ANSWERED_STEPS = 2048  # an answered call may still be named while among the newest steps
MAX_AGENTS = 1024  # sub-agent ids known, and task calls waiting for theirs (the newest)


def _is_event(record: Any) -> bool:
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        return False
    kind = record.get("type")
    return isinstance(kind, str) and (kind.startswith(KNOWN_PREFIXES) or kind in KNOWN_TYPES)


def claim(sample: Sample) -> Claim:
    """JSONL of `{type: "session.start"|"tool.execution_start"|…, data: {…}, id}` events."""
    if not sample.maybe_jsonl:
        return Claim.no("not JSONL")
    fit = share(sample.records, _is_event)
    if not fit:
        return Claim.no("no `{type: session.*|tool.*|assistant.*, data}` event")
    start = next((r for r in sample.objects() if r.get("type") == "session.start"), None)
    producer = (start or {}).get("data", {}).get("producer") if start else None
    if producer == "copilot-agent":
        return Claim(0.95, f'{fit:.0%} Copilot events; session.start says producer "copilot-agent"')
    return Claim(0.8 * fit, f"{fit:.0%} of the records are Copilot CLI session events")


class _Session:
    def __init__(self, run: Run, limits: Limits) -> None:
        self.run, self.limits = run, limits
        # call id -> (its place in the run, the call): calls waiting for their result, and
        # answered calls among the newest ANSWERED_STEPS steps (swept every ANSWERED_STEPS).
        self.waiting: Recent[str, tuple[int, Step]] = Recent(MAX_OPEN_CALLS, refresh=False)
        self.answered: dict[str, tuple[int, Step]] = {}
        # sub-agent id -> its task call id (the newest MAX_AGENTS named)
        self.agents: Recent[str, str] = Recent(MAX_AGENTS, refresh=True)
        self.pending_agents: list[str] = []  # task calls whose sub-agent id is not known yet

    def add(self, step: Step) -> Step:
        add_step(self.run, step, limits=self.limits, source="")  # parse names the line
        if len(self.run.steps) % ANSWERED_STEPS == 0:
            oldest = len(self.run.steps) - ANSWERED_STEPS
            self.answered = {k: e for k, e in self.answered.items() if e[0] >= oldest}
        return step

    def call(self, key: str | None) -> Step | None:
        """The call a later event names by its id: waiting, or answered not long ago."""
        if key is None:
            return None
        waiting = self.waiting.get(key)
        if waiting is not None:
            return waiting[1]
        answered = self.answered.get(key)
        return answered[1] if answered is not None and self._recent(answered[0]) else None

    def answer(self, key: str | None, step: Step) -> None:
        """`step`, the call with id `key`, has its result: it waits no more."""
        if key is None:
            return
        entry = self.waiting.get(key)
        if entry is not None and entry[1] is step:
            self.answered[key] = self.waiting.pop(key)

    def holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change, so the spool holds
        it: a call waiting for its result, or an answered one still among the newest
        ANSWERED_STEPS steps (only when the window is smaller than that)."""
        if step.kind != "tool_call" or step.id is None:
            return False
        key = str(step.id)
        waiting, answered = self.waiting.get(key), self.answered.get(key)
        if waiting is not None and waiting[1] is step:
            return True
        return answered is not None and answered[1] is step and self._recent(answered[0])

    def _recent(self, place: int) -> bool:
        return place >= len(self.run.steps) - ANSWERED_STEPS

    def warn(self, text: str) -> None:
        if len(self.run.warnings) < MAX_WARNINGS:
            self.run.warnings.append(text[:500])

    def parent_of(self, event: dict, data: dict) -> str | None:
        parent = data.get("parentToolCallId")
        if isinstance(parent, str) and parent:
            return parent
        agent = event.get("agentId")
        if not isinstance(agent, str) or not agent:
            return None
        if agent not in self.agents and self.pending_agents:
            self.name_agent(agent, self.pending_agents.pop(0))
        return self.agents.get(agent)

    def name_agent(self, agent: str, call_id: str) -> None:
        self.agents.put(agent, call_id)

    def open_call(self, call_id: Any, tool: Any, args: Any, **fields: Any) -> Step:
        key = str(call_id) if call_id is not None else None
        step = self.call(key)
        if step is not None:
            if args is not None:
                step.args = tool_step(tool="", args=args, limits=self.limits).args
            return step
        step = self.add(
            tool_step(
                tool=str(tool or "(unknown)"), args=args, limits=self.limits, id=key, **fields
            )
        )
        if key is not None:
            self.answered.pop(key, None)  # answered long ago: no event names it any more
            self.waiting.put(key, (len(self.run.steps) - 1, step))  # the oldest gives up waiting
        return step


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of the file: its steps are spooled (kit.spool), so a session of
    any length is read in the memory of the spool's window."""
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    steps = StepSpool()
    run = Run(id=os.path.basename(source) or "run", format=name, steps=steps)  # type: ignore[arg-type]
    session = _Session(run, limits)
    steps.hold = session.holds
    for line, event in reader:
        try:
            _event(session, event)
        except TooManySteps as exc:
            exc.source, exc.line = source, line
            raise
        except TraceError as exc:
            reader.reject(TraceError(exc.reason, source=source, line=line, field=exc.field))
    steps.hold = None  # read: no step changes any more
    del session
    reader.check_not_empty()
    yield finish_run(reader.skips.apply(run))


def _event(session: _Session, event: dict) -> None:
    kind, data = event.get("type"), event.get("data")
    if not isinstance(data, dict):
        raise TraceError("an event needs a `data` object", field="data")
    run, limits = session.run, session.limits
    fields = {"started_at": parse_time(event.get("timestamp"))}
    parent = session.parent_of(event, data)
    if kind == "session.start":
        if isinstance(data.get("sessionId"), str) and data["sessionId"]:
            run.id = data["sessionId"][:255]
        context = data.get("context") if isinstance(data.get("context"), dict) else {}
        for key, value in (
            ("model", data.get("selectedModel")),
            ("copilot_version", data.get("copilotVersion")),
            ("cwd", context.get("cwd")),
            ("repository", context.get("repository")),
        ):
            if value is not None:
                run.metadata[key] = value
    elif kind == "session.model_change" and data.get("newModel"):
        run.metadata["model"] = data["newModel"]
    elif kind == "session.shutdown":
        if isinstance(data.get("modelMetrics"), dict):
            run.metadata["model_metrics"] = data["modelMetrics"]
    elif kind == "user.message":
        session.add(text_step("user", content_text(data.get("content")), limits=limits, **fields))
    elif kind == "assistant.message":
        reasoning = data.get("reasoningText")
        if isinstance(reasoning, str) and reasoning:
            session.add(text_step("reasoning", reasoning, limits=limits, parent_id=parent))
        text = content_text(data.get("content"))
        if text:
            step = text_step("assistant", text, limits=limits, parent_id=parent, **fields)
            step.tokens_out = number(data.get("outputTokens"))
            session.add(step)
        batch = data.get("messageId") or event.get("id")
        for request in data.get("toolRequests") or []:
            if isinstance(request, dict):
                session.open_call(
                    request.get("toolCallId"),
                    request.get("name"),
                    parse_json_text(request.get("arguments")),
                    batch_id=str(batch) if batch else None,
                    parent_id=parent,
                    **fields,
                )
    elif kind == "tool.execution_start":
        session.open_call(
            data.get("toolCallId"),
            data.get("toolName"),
            parse_json_text(data.get("arguments")),
            parent_id=parent,
            **fields,
        )
    elif kind == "tool.execution_complete":
        _complete(session, data, parent, fields["started_at"])
    elif kind == "subagent.started" and isinstance(data.get("toolCallId"), str):
        agent = event.get("agentId") or data.get("agentId")
        if isinstance(agent, str) and agent:
            session.name_agent(agent, data["toolCallId"])
        else:
            session.pending_agents.append(data["toolCallId"])
            del session.pending_agents[:-MAX_AGENTS]
    elif kind in ("session.error", "session.warning", "subagent.failed", "abort"):
        text = _notice(kind, data)
        if kind != "session.warning":
            session.warn(text)
        session.add(text_step("system", text, limits=limits, parent_id=parent, **fields))


def _complete(session: _Session, data: dict, parent: str | None, when: float | None) -> None:
    call_id = data.get("toolCallId")
    key = str(call_id) if call_id is not None else None
    call = session.call(key)
    if call is None:
        call = session.open_call(call_id, data.get("toolName"), None)
        call.parent_id = parent
        session.warn(f"result for call {call_id!r} matches no earlier call")
    result = data.get("result") if isinstance(data.get("result"), dict) else {}
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    text = result.get("content")
    if text is None and error:
        text = error.get("message")
    failed = data.get("success") is False or text_errors.is_error(text)
    set_result(call, text, error=failed, limits=session.limits, ended_at=when)
    session.answer(key, call)


def _notice(kind: str, data: dict) -> str:
    message = data.get("message") or data.get("error") or data.get("reason") or ""
    if isinstance(message, dict):
        message = message.get("message") or ""
    label = {
        "session.error": "error",
        "session.warning": "warning",
        "subagent.failed": "sub-agent failed",
        "abort": "aborted by the user",
    }[kind]
    detail = data.get("errorType") or data.get("statusCode")
    return f"{label}: {message}" + (f" ({detail})" if detail else "") if message else label
