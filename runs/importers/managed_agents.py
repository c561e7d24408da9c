"""Claude Managed Agents session events (beta `managed-agents-2026-04-01`), in the forms
they are saved in:

- the API's event list: JSONL of events, a JSON array of them, or a list page
  `{"data": [events], …}`;
- a recording of SDK traffic, one `[method, payload]` array per line:
  `["client.beta.sessions.create", <session>]`, `["client.beta.sessions.events.send",
  [session_id, {"events": [...]}]]`, `["client.beta.sessions.events.stream", <event>]`;
- the open-hai export, one `{role, kind, time, content?, tool?, raw}` per line (`raw` is the
  event).

An event is `{id: "sevt_…", type: "<domain>.<action>", processed_at, …}`. One run per file
(id = the session id from `sessions.create` or `events.send`, else the file name):

- `user.message` -> `user`, `agent.message` -> `assistant`, `system.message` -> `system`
  steps (content blocks as text); `agent.thinking` carries no text and is counted only.
- Calls: `agent.tool_use`, `agent.mcp_tool_use` (metadata `mcp_server_name` kept in the
  step's batch), `agent.custom_tool_use` -> `tool_call` steps, tool = `name`, args =
  `input`, id = the event's `sevt_` id. Results by that id: `agent.tool_result`
  (`tool_use_id`), `agent.mcp_tool_result` (`mcp_tool_use_id`), `user.custom_tool_result`
  (`custom_tool_use_id`), `user.tool_result` (`tool_use_id`): content as text, `is_error`
  decides; without it the common text rules (`text_errors`) do. A result whose call is not
  in the file is kept as a call of its own, with a warning.
- `user.tool_confirmation` with `result: "deny"`: a call that never gets a result is an
  error whose result is the denial. `session.error` (`error.type`, `message`) and an idle
  `stop_reason` of `retries_exhausted`/`budget_reached` -> `system` steps; a
  `span.model_request_end` with `is_error: true` -> a `system` step too.
- Tokens: each `span.model_request_end.model_usage` goes on the first step made since its
  `span.model_request_start` (tokens_in = input + cache creation + cache read). No cost in
  the format. `session.usage` (cumulative) -> metadata.
- Sent events (`events.send`, no id yet) are steps at the moment they were sent; their echo
  in the stream (same type and the same text or call link) is then skipped. Events seen
  twice by `id` (merged thread and primary streams) are skipped.
- Threads (multi-agent): events of a thread opened by `session.thread_created` (or named by
  `agent.thread_message_sent.to_session_thread_id`) go under the step that opened it, in a
  lane of their own (each thread is another agent); the primary thread is the main lane.
- Times: `processed_at` (RFC 3339), else the export's `time`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_time, token_sum
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import BOM, JsonlReader, Limits, iter_document, looks_like_jsonl, stream_head

name = "managed-agents"
label = "Claude Managed Agents session events"

METHOD_PREFIX = "client.beta.sessions"
DOMAINS = ("agent.", "user.", "session.", "span.", "system.")
CALLS = {"agent.tool_use", "agent.mcp_tool_use", "agent.custom_tool_use"}
RESULTS = {
    "agent.tool_result": "tool_use_id",
    "agent.mcp_tool_result": "mcp_tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "user.tool_result": "tool_use_id",
}
MESSAGES = {"user.message": "user", "agent.message": "assistant", "system.message": "system"}
IDLE_FAILURES = {"retries_exhausted", "budget_reached"}


# --- detection


def _event_of(record: Any) -> dict[str, Any] | None:
    """The API event a record holds (a bare event, a recording line, an open-hai line)."""
    if (
        isinstance(record, list)
        and len(record) == 2
        and record[0] == f"{METHOD_PREFIX}.events.stream"
    ):
        record = record[1]
    if isinstance(record, dict) and isinstance(record.get("raw"), dict) and "kind" in record:
        record = record["raw"]
    if (
        isinstance(record, dict)
        and isinstance(record.get("type"), str)
        and record["type"].startswith(DOMAINS)
        and (str(record.get("id", "")).startswith("sevt_") or "processed_at" in record)
    ):
        return record
    return None


def claim(sample: Sample) -> Claim:
    """`[method, payload]` lines of `client.beta.sessions.*`, or events `{id: sevt_…, type:
    agent.*|user.*|session.*|span.*}` (bare, in a list page, or under an export's `raw`)."""
    records = sample.records
    if isinstance(sample.top, dict) and isinstance(sample.top.get("data"), list):
        records = sample.top["data"]
    if not records:
        return Claim.no("no records")
    methods = sum(
        1
        for r in records
        if isinstance(r, list) and r and isinstance(r[0], str) and r[0].startswith(METHOD_PREFIX)
    )
    if methods:
        fit = methods / len(records)
        return Claim(
            0.6 + 0.39 * fit, f"{fit:.0%} of the lines are `[client.beta.sessions.…, payload]`"
        )
    events = [e for e in (_event_of(r) for r in records) if e is not None]
    if not events:
        return Claim.no("no record is a `sevt_` event with an agent./user./session./span. type")
    fit = len(events) / len(records)
    calls = sum(1 for e in events if e["type"] in CALLS)
    return Claim(
        0.5 + 0.45 * fit, f"{fit:.0%} of the records are Managed Agents events ({calls} tool uses)"
    )


# --- reading


@dataclass
class _State:
    source: str
    limits: Limits
    skips: Skips
    run: Run
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "claude-managed-agents"})
    calls: dict[str, Step] = field(default_factory=dict)  # sevt id of the use event -> step
    answered: set[str] = field(default_factory=set)
    denied: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    echoes: dict[tuple[str, str], list[Step | None]] = field(default_factory=dict)  # sent
    request_open: bool = False
    request_first: Step | None = None
    pending_usage: dict[str, Any] | None = None
    threads: dict[str, Step | None] = field(default_factory=dict)  # sub-thread -> its opener
    last_in_thread: dict[str, str | None] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)

    line: int | None = None  # the line being read (JSONL)

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def add(self, step: Step, when: float | None, thread: str | None = None) -> Step:
        add_step(self.run, step, limits=self.limits, source=self.source, line=self.line)
        step.started_at = when
        step.id = step.id or f"s{len(self.steps)}"
        if thread is not None and thread in self.threads:
            opener = self.threads[thread]
            step.parent_id = self.last_in_thread.get(thread, opener.id if opener else None)
            step.lane = f"thread:{thread}"
            self.last_in_thread[thread] = step.id
        if self.request_open and self.request_first is None:
            self.request_first = step
        if self.pending_usage is not None:
            _usage(step, self.pending_usage)
            self.pending_usage = None
        return step


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a Managed Agents events file."""
    skips = Skips()
    state = _State(source, limits, skips, Run(id=_run_id({}, source), format=name))
    head = stream_head(stream).lstrip(BOM + b" \t\r\n")
    if looks_like_jsonl(head):
        reader = JsonlReader(stream, source=source, limits=limits, skips=skips)
        for line, record in reader:
            state.line = line
            try:
                _record(state, record, line)
            except TooManySteps:
                raise
            except TraceError as exc:
                reader.reject(exc)
        reader.check_not_empty()
    else:
        prefix = "data.item" if head[:1] == b"{" else "item"
        count = 0
        for count, event in enumerate(
            iter_document(stream, prefix, source=source, limits=limits), start=1
        ):
            try:
                _record(state, event, None)
            except TooManySteps:
                raise
            except TraceError as exc:
                skips.add(TraceError(exc.reason, source=source, field=f"{prefix}[{count - 1}]"))
        if not count:
            raise TraceError("no events", source=source)
    _finish(state)
    run = state.run
    run.id, run.metadata = _run_id(state.meta, source), state.meta
    run.name = run.id
    yield finish_run(skips.apply(run))


def _run_id(meta: dict[str, Any], source: str) -> str:
    return str(meta.get("session_id") or os.path.basename(source) or "run")


def _record(state: _State, record: Any, line: int | None) -> None:
    def error(reason: str) -> TraceError:
        return TraceError(reason, source=state.source, line=line)

    if isinstance(record, list):
        if len(record) != 2 or not isinstance(record[0], str):
            raise error("expected a [method, payload] pair")
        _call_record(state, record[0], record[1], error)
        state.run.id = _run_id(state.meta, state.source)
        return
    if not isinstance(record, dict):
        raise error(f"expected an event object, got {type(record).__name__}")
    time = record.get("time")
    if isinstance(record.get("raw"), dict) and "kind" in record:
        record = record["raw"]
    if not isinstance(record.get("type"), str):
        raise error("an event without a `type`")
    _event(state, record, echo=False, fallback_time=parse_time(time))


def _call_record(state: _State, method: str, payload: Any, error: Any) -> None:
    meta = state.meta
    if method.endswith("sessions.create") and isinstance(payload, dict):
        _session(meta, payload)
    elif method.endswith("events.send"):
        session, body = (
            payload if isinstance(payload, list) and len(payload) == 2 else (None, payload)
        )
        if isinstance(session, str):
            meta.setdefault("session_id", session)
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(events, list):
            raise error("events.send without an `events` list")
        for event in events:
            if isinstance(event, dict) and isinstance(event.get("type"), str):
                before = len(state.steps)
                if _event(state, event, echo=False, fallback_time=None, sent=True):
                    made = state.steps[-1] if len(state.steps) > before else None
                    state.echoes.setdefault(_echo_key(event), []).append(made)
    elif method.endswith("events.stream") or method.endswith("events.list"):
        events = payload if isinstance(payload, list) else [payload]
        for event in events:
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise error("a streamed event without a `type`")
            _event(state, event, echo=True, fallback_time=None)
    else:
        state.skipped[method.rsplit(".", 1)[-1]] += 1


def _session(meta: dict[str, Any], session: dict[str, Any]) -> None:
    if isinstance(session.get("id"), str):
        meta["session_id"] = session["id"]
    if isinstance(session.get("title"), str):
        meta["title"] = session["title"][:200]
    agent = session.get("agent")
    if isinstance(agent, dict):
        model = agent.get("model")
        model = model.get("id") if isinstance(model, dict) else model
        if isinstance(model, str):
            meta["model"] = model
        if isinstance(agent.get("name"), str):
            meta["agent_name"] = agent["name"][:200]


def _echo_key(event: dict[str, Any]) -> tuple[str, str]:
    kind = event.get("type", "")
    link = RESULTS.get(kind)
    if link is not None:
        return kind, str(event.get(link))
    if kind == "user.tool_confirmation":
        return kind, str(event.get("tool_use_id"))
    return kind, _text(event.get("content"))[:2000]


def _text(content: Any) -> str:
    """Content blocks as text; a `document` block whose source holds text gives that text."""
    if isinstance(content, list):
        return "\n".join(_block_text(block) for block in content)
    return content_text(content)


def _block_text(block: Any) -> str:
    source = block.get("source") if isinstance(block, dict) else None
    if (
        isinstance(source, dict)
        and block.get("type") == "document"
        and isinstance(source.get("data"), str)
        and source.get("type") in ("text", "plain_text", None)
    ):
        return source["data"]
    return content_text([block])


def _event(
    state: _State,
    event: dict[str, Any],
    *,
    echo: bool,
    fallback_time: float | None,
    sent: bool = False,
) -> bool:
    """Read one event; return whether it made a step or a result."""
    event_id = event.get("id")
    if isinstance(event_id, str):
        if event_id in state.seen:
            return False
        state.seen.add(event_id)
    if not sent and state.echoes:
        waiting = state.echoes.get(_echo_key(event))
        if waiting:  # the stream's copy of an event the client sent: only its time is new
            sent_step = waiting.pop(0)
            if sent_step is not None and sent_step.started_at is None:
                sent_step.started_at = parse_time(event.get("processed_at")) or fallback_time
            return False
    kind = event["type"]
    when = parse_time(event.get("processed_at")) or fallback_time
    thread = event.get("session_thread_id")
    thread = thread if isinstance(thread, str) else None
    limits = state.limits
    if kind in MESSAGES:
        step = text_step(MESSAGES[kind], _text(event.get("content")), limits=limits)
        state.add(step, when, thread)
    elif kind in CALLS:
        step = tool_step(tool=str(event.get("name") or ""), args=event.get("input"), limits=limits)
        step.id = event_id if isinstance(event_id, str) else None
        state.add(step, when, thread)
        if step.id is not None:
            state.calls[step.id] = step
    elif kind in RESULTS:
        _result(state, event, kind, when, thread)
    elif kind == "user.tool_confirmation":
        if event.get("result") == "deny":
            message = event.get("deny_message")
            state.denied[str(event.get("tool_use_id"))] = (
                f"denied: {message}" if isinstance(message, str) else "denied"
            )
    elif kind == "span.model_request_start":
        state.request_open, state.request_first = True, None
    elif kind == "span.model_request_end":
        _request_end(state, event, when, thread)
    elif kind == "session.error":
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        text = f"session error: {error.get('type', 'unknown')}: {error.get('message', '')}"
        state.add(text_step("system", text, limits=limits), when, thread)
    elif kind in ("session.status_idle", "session.thread_status_idle"):
        stop = event.get("stop_reason")
        reason = stop.get("type") if isinstance(stop, dict) else None
        if reason in IDLE_FAILURES and kind == "session.status_idle":
            state.add(text_step("system", f"session idle: {reason}", limits=limits), when)
        else:
            state.skipped[kind] += 1
    elif kind == "session.thread_created":
        _thread(state, event, when, None)
    elif kind == "agent.thread_message_sent":
        target = event.get("to_session_thread_id")
        who = event.get("to_agent_name") or target
        text = f"message to {who}: {_text(event.get('content'))}"
        step = state.add(text_step("assistant", text, limits=limits), when, thread)
        if isinstance(target, str):
            _thread(state, {"session_thread_id": target}, when, step)
    elif kind == "session.usage":
        if isinstance(event.get("usage"), dict):
            state.meta["usage"] = {k: v for k, v in event["usage"].items() if number(v) is not None}
    else:
        state.skipped[kind] += 1
        return False
    return True


def _thread(state: _State, event: dict[str, Any], when: float | None, opener: Step | None) -> None:
    thread = event.get("session_thread_id")
    if not isinstance(thread, str) or thread in state.threads:
        return
    if opener is None:
        who = event.get("agent_name") or thread
        opener = state.add(text_step("system", f"thread started: {who}", limits=state.limits), when)
    state.threads[thread] = opener


def _result(
    state: _State, event: dict[str, Any], kind: str, when: float | None, thread: str | None
) -> None:
    link = event.get(RESULTS[kind])
    link = None if link is None else str(link)
    text = _text(event.get("content"))
    flag = event.get("is_error")
    error = flag if isinstance(flag, bool) else text_errors.is_error(text)
    step = state.calls.get(link) if link is not None else None
    if step is None or link in state.answered:
        state.skips.note(
            f"{state.source}: {kind} for {link!r} matches no earlier tool use; kept as a step "
            "of its own"
        )
        step = tool_step(tool="", args=None, limits=state.limits)
        step.args = None
        state.add(step, when, thread)
    else:
        state.answered.add(link)
    set_result(step, text, error=error, limits=state.limits, ended_at=when)


def _usage(step: Step, usage: dict[str, Any]) -> None:
    tokens_in = token_sum(
        usage, ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    if tokens_in is not None:
        step.tokens_in = tokens_in
    step.tokens_out = number(usage.get("output_tokens"))


def _request_end(
    state: _State, event: dict[str, Any], when: float | None, thread: str | None
) -> None:
    usage = event.get("model_usage")
    if isinstance(usage, dict):
        if state.request_first is not None:
            _usage(state.request_first, usage)
        else:
            state.pending_usage = usage
    state.request_open, state.request_first = False, None
    if event.get("is_error") is True:
        state.add(text_step("system", "model request failed", limits=state.limits), when, thread)


def _finish(state: _State) -> None:
    for link, reason in state.denied.items():
        step = state.calls.get(link)
        if step is not None and link not in state.answered:
            set_result(step, reason, error=True, limits=state.limits)
    if state.skipped:
        state.meta["skipped_events"] = dict(state.skipped)
