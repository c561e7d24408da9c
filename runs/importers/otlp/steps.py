"""OpenTelemetry spans and log records to runs: the OTLP file importer (format "otlp") and
the `Collector` the OTLP/HTTP assembly shares with it. Decoding is spans.py's and logs.py's;
which span is what, per dialect, is dialects.py's table; where log records go, placement.py.

Files: an ExportTraceServiceRequest or ExportLogsServiceRequest in OTLP/JSON
(`resourceSpans[].scopeSpans[].spans[]`, `resourceLogs[].scopeLogs[].logRecords[]`), a JSON
array of requests or span records, JSONL of those (one per line, traces and logs mixed), or
binary protobuf (one request, or several concatenated, of one signal). A span or record with
invalid ids is skipped and counted, as the receiver rejects it.

Grouping: one run per session (the dialect table's session keys: `session.id`,
`gen_ai.conversation.id`, `gcp.vertex.agent.session_id`, `langfuse.session.id`,
`traceloop.association.properties.session_id`, `lmnr.association.properties.session_id`,
`coding_agent.session.id`, …; span or resource attribute; every span of a trace goes where any
span of that trace says), else one run per traceId; runs in order of first appearance; steps
ordered by start time (stable; a span without a start time keeps its place after the span
before it). The tree: Step.id = span id, parent_id = parent span id (a parent missing from the
file makes the span a root, per the model's rule).

Span -> step, by the role the dialect table gives it:
- tool -> tool_call; tool = the dialect's tool-name attribute | `gen_ai.tool.name` | the span
  name without "execute_tool " (and the like); args = the dialect's argument attribute (JSON
  text parsed by `content.parse_json_text`; a decorator's `{"args": [...], "kwargs": {...}}`
  unwrapped; OpenInference `tool.parameters` is a schema, never args; None when the span
  carries none: unknown, never {}); result = the dialect's result attribute (text as given; a
  LangChain ToolMessage read as its content and status). How frameworks fill OpenInference's
  generic values (LangGraph's bare argument, smolagents' `final_answer`): frameworks.py.
- llm -> assistant step; text = the output message text (`gen_ai.output.messages` text parts,
  indexed `llm.output_messages.*` / `gen_ai.completion.<i>.content`, or the dialect's output
  attribute read for its text); tokens from the dialect's keys or its usage JSON; cost; the
  model goes to metadata. The tool calls it asked for (GenAI tool_call parts, indexed
  `…tool_calls.<j>.*` keys reassembled, `ai.response.toolCalls`, ADK function_call parts) give
  the batch_id of the tool steps with those ids.
- agent/group -> a `system` step with text = span name, so the tree shows it; never a tool.
- detail (Claude Code's tool.execution / blocked_on_user) -> folded into its parent tool step.
- batch_id of a tool step: the model span that issued its call id, else its parent when that
  is a model span (Vercel AI SDK), else the latest model span before it under the same parent.
- Errors are explicit: span status code 2 / "STATUS_CODE_ERROR" / "ERROR", an `error.type`
  attribute, an `exception` event, or the dialect's own flag (Langfuse level ERROR, Claude
  Code `success: false`, a Google ADK response `{"error": …}`) -> status "error"; a failed
  tool without a result gets the error message as its result.
- A span id seen twice in one trace (a batch exported twice) is kept once, with a warning.
- run.metadata["dialects"] names the dialects other than plain GenAI that read its spans.
- Every run ends in the kit's `finish_run`, given the tool steps' call ids (`call_ids`), so a
  call seen as a span and again as a log event or a model's output is one step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from ..content import parse_json_text
from ..detect import Claim, Sample, share
from ..errors import Skips, TraceError, too_many_held
from ..kit import add_step, check_step_limit, finish_run
from ..lanes import assign_lanes
from ..reading import (
    DEFAULT_LIMITS,
    JsonlReader,
    Limits,
    clip_json,
    clip_strings,
    head_values,
    iter_document,
    looks_like_jsonl,
    partial_json,
    stream_head,
)
from . import logs, placement
from .dialects import AGENT, COMMON, DETAIL, LLM, TOOL, Dialect, classify, keys, unwrap
from .frameworks import (
    FINAL_ANSWER_TOOLS,
    take_contexts,
    tool_call_context,
    tool_message,
)
from .logs import LogEvent, events_from_request, events_of_resource, is_logs_request
from .spans import (
    Rejected,
    Span,
    is_request,
    is_span_record,
    iter_pb_resources,
    looks_like_protobuf,
    optional_text,
    spans_from_request,
    spans_of_resource,
)
from .values import arguments, failure, first, message_parts, text_of

name = "otlp"
label = "OpenTelemetry OTLP traces (JSON, JSONL, protobuf)"

_OUTPUT_TEXT = re.compile(r"llm\.output_messages\.(\d+)\.message\.content")
_COMPLETION_TEXT = re.compile(r"gen_ai\.completion\.(\d+)\.content")
CHAT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages"}  # messages on a model span
_INDEXED_CALL = re.compile(
    r"(?:gen_ai\.completion|llm\.output_messages)\.(\d+)\.(?:message\.)?tool_calls\.(\d+)\.(.+)"
)
# the literal start each of those patterns needs
_PREFIXES: dict[re.Pattern[str], str | tuple[str, ...]] = {
    _OUTPUT_TEXT: "llm.output_messages.",
    _COMPLETION_TEXT: "gen_ai.completion.",
    _INDEXED_CALL: ("gen_ai.completion.", "llm.output_messages."),
}


def sniff(head: bytes) -> bool:
    """OTLP/JSON (`resourceSpans` / `resourceLogs`), JSONL of requests or span records, or
    OTLP protobuf (kept for callers of the old interface; detection uses `claim`)."""
    if head[:1] == b"\x0a" and (looks_like_protobuf(head) or logs.looks_like_protobuf(head)):
        return True
    values = head_values(head, max_lines=2)
    if not values:
        return False
    first = values[0]
    if isinstance(first, list) and first:
        first = first[0]
    return is_request(first) or is_span_record(first) or is_logs_request(first)


def _is_otlp(record: Any) -> bool:
    return is_request(record) or is_span_record(record) or is_logs_request(record)


def claim(sample: Sample) -> Claim:
    """OTLP/JSON trace or logs requests (`resourceSpans` / `resourceLogs`), span records, or
    an OTLP protobuf trace or logs request."""
    head = sample.head
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        return Claim(0.9, "an OTLP protobuf export request (resource spans)")
    if head[:1] == b"\x0a" and logs.looks_like_protobuf(head):
        return Claim(0.9, "an OTLP protobuf logs export request (resource logs)")
    records = sample.records
    if len(records) == 1 and isinstance(records[0], list):
        records = records[0][:200]
    fit = share(records, _is_otlp)
    if not fit:
        return Claim.no(
            "no `resourceSpans` request, no `resourceLogs` request and no span record"
            " (traceId, spanId, name)"
        )
    return Claim(0.9 * fit, f"{fit:.0%} of the records are OTLP requests or span records")


# --- spans to steps


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 is a float infinity
        return None


def _pick(attrs: dict[str, Any], dialect: Dialect, what: str) -> Any:
    return first(attrs, *keys(dialect, what))


def _error_text(span: Span) -> str | None:
    for _, attrs in span.events:
        if attrs.get("exception.message"):
            return str(attrs["exception.message"])
    return span.message or optional_text(span.attrs.get("error.type"))


def _span_error(span: Span) -> bool:
    return span.error or "error.type" in span.attrs or any(n == "exception" for n, _ in span.events)


def _tool_name(span: Span, dialect: Dialect) -> str:
    tool = _pick(span.attrs, dialect, "tool")
    if not tool:
        tool = span.name
        for prefix in keys(dialect, "strip"):
            tool = tool.removeprefix(prefix)
        tool = tool.removesuffix(".tool").strip()  # Traceloop: "<entity>.tool"
    return str(unwrap(tool) or "(unknown)")[:200]


def _tool_step(span: Span, step: Step, dialect: Dialect, limits: Limits) -> str | None:
    attrs = span.attrs
    step.kind = "tool_call"
    step.tool = _tool_name(span, dialect)
    args = arguments(_pick(attrs, dialect, "args"))
    result = _pick(attrs, dialect, "result")
    if step.tool in FINAL_ANSWER_TOOLS:  # smolagents: the agent's answer, not a call
        answer = args.get("answer") if isinstance(args, dict) else None
        step.kind, step.tool = "assistant", None
        step.text = clip_strings(text_of(answer) or text_of(result), limits.max_value_chars)
        return None
    step.args = clip_json(args, limits)
    result = _result_value(result, dialect)
    message = tool_message(result)
    if message is not None:  # a LangChain ToolMessage: its content is the result
        result = message.content
    failed = failure(attrs, dialect, result)
    error = _span_error(span) or failed is not None or (message is not None and message.error)
    if result is None and error:
        result = _error_text(span) or failed
    step.result = clip_json(result, limits)
    step.status = "error" if error else "ok"
    call_id = optional_text(unwrap(_pick(attrs, dialect, "call_id")))
    return call_id or (message.call_id if message is not None else None)


def _result_value(value: Any, dialect: Dialect) -> Any:
    """Return a tool result as the tool gave it: a JSON string literal (how OpenLLMetry,
    MLflow and the Vercel AI SDK serialise a text result) is its text; Google ADK wraps a
    function's return value as `{"result": ...}`."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            value = decoded
    if dialect.name == "google_adk":
        parsed = parse_json_text(value)
        if isinstance(parsed, dict) and len(parsed) == 1 and "result" in parsed:
            return parsed["result"]
    return value


def _output_parts(attrs: dict[str, Any], kind: str) -> Iterator[dict[str, Any]]:
    """Yield the parts of this type in the `gen_ai.output.messages` of a model span."""
    yield from message_parts(attrs.get("gen_ai.output.messages"), kind)


def _indexed(attrs: dict[str, Any], pattern: re.Pattern[str]) -> list[str]:
    prefix = _PREFIXES[pattern]  # a cheap test first: most keys are not indexed ones
    found = sorted(
        (int(m.group(1)), v)
        for k, v in attrs.items()
        if k.startswith(prefix) and (m := pattern.fullmatch(k)) and isinstance(v, str)
    )
    return [v for _, v in found]


def _output_text(attrs: dict[str, Any], dialect: Dialect = COMMON) -> str | None:
    pieces = [str(part.get("content", "")) for part in _output_parts(attrs, "text")]
    if not pieces:
        pieces = _indexed(attrs, _OUTPUT_TEXT) or _indexed(attrs, _COMPLETION_TEXT)
    if not pieces:
        for key in keys(dialect, "output"):
            if key != "gen_ai.output.messages" and (text := text_of(attrs.get(key))):
                pieces = [text]
                break
    return "\n".join(pieces) if pieces and any(p.strip() for p in pieces) else None


def requested_calls(attrs: dict[str, Any], dialect: Dialect = COMMON) -> list[dict[str, Any]]:
    """Return the tool calls a model span asked for, as {id, name, arguments}: GenAI output
    tool_call parts, OpenInference and OpenLLMetry indexed keys (reassembled), the Vercel AI
    SDK's `ai.response.toolCalls`, ADK's function_call parts."""
    calls: list[dict[str, Any]] = [
        {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
        for p in _output_parts(attrs, "tool_call")
    ]
    indexed: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(_PREFIXES[_INDEXED_CALL]) and (m := _INDEXED_CALL.fullmatch(key)):
            field = m.group(3).removeprefix("tool_call.").removeprefix("function.")
            indexed.setdefault((int(m.group(1)), int(m.group(2))), {})[field] = value
    calls += [indexed[k] for k in sorted(indexed)]
    for key in dialect.calls:
        listed = parse_json_text(attrs.get(key))
        for call in listed if isinstance(listed, list) else ():
            if isinstance(call, dict):
                calls.append({
                    "id": call.get("toolCallId", call.get("id")),
                    "name": call.get("toolName", call.get("name")),
                    "arguments": call.get("args", call.get("input")),
                })  # fmt: skip
    response = parse_json_text(attrs.get("gcp.vertex.agent.llm_response"))
    content = response.get("content") if isinstance(response, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    for part in parts if isinstance(parts, list) else ():
        call = part.get("function_call") if isinstance(part, dict) else None
        if isinstance(call, dict):
            calls.append(
                {"id": call.get("id"), "name": call.get("name"), "arguments": call.get("args")}
            )
    return [c for c in calls if c.get("id") or c.get("name")]


def _usage(attrs: dict[str, Any], dialect: Dialect, *names: str) -> int | None:
    for key in dialect.usage:
        usage = parse_json_text(unwrap(attrs.get(key)))
        if isinstance(usage, dict):
            for name in names:
                if (count := _int(usage.get(name))) is not None:
                    return count
    return None


def _cost(value: Any) -> float | None:
    value = parse_json_text(value)
    if isinstance(value, dict):
        value = value.get("total", value.get("total_cost"))
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _llm_step(span: Span, step: Step, dialect: Dialect, limits: Limits) -> None:
    attrs = span.attrs
    step.kind = "assistant"
    step.text = clip_strings(_output_text(attrs, dialect), limits.max_value_chars)
    step.tokens_in = _int(_pick(attrs, dialect, "tokens_in"))
    if step.tokens_in is None:
        step.tokens_in = _usage(attrs, dialect, "input", "input_tokens", "prompt_tokens")
    step.tokens_out = _int(_pick(attrs, dialect, "tokens_out"))
    if step.tokens_out is None:
        step.tokens_out = _usage(attrs, dialect, "output", "output_tokens", "completion_tokens")
    step.cost = _cost(_pick(attrs, dialect, "cost"))
    if _span_error(span) or failure(attrs, dialect) is not None:
        step.status = "error"


def _group_step(
    span: Span, step: Step, dialect: Dialect, limits: Limits, meta: dict[str, Any]
) -> None:
    step.text = clip_strings(span.name, limits.max_value_chars)
    step.status = "error" if span.error or failure(span.attrs, dialect) else "ok"
    agent = _pick(span.attrs, dialect, "agent")
    if agent:
        meta.setdefault("agent", str(unwrap(agent)))
    task = span.attrs.get("input.value")
    if isinstance(task, str) and task and parse_json_text(task) is task:
        meta.setdefault("task", clip_strings(task, 2000))


# --- grouping spans into runs


def _run_name(run: Run) -> str:
    """Name a run after its agent (or root span) and a short id, e.g. "researcher · 2e2d5a87"."""
    label = run.metadata.get("agent")
    if not label:
        root = next((s for s in run.steps if s.parent_id is None and s.kind == "system"), None)
        label = root.text if root is not None else ""
    label = str(label or "").strip()[:120]
    short = run.id if len(run.id) <= 20 else run.id[:12]  # session ids whole, trace ids cut
    return f"{label} · {short}" if label else run.id


class Collector:
    """Gathers spans and log records (from any number of requests) and builds the runs at
    the end: log records join their span (by span id) or the run of their trace or session
    (`placement.py`)."""

    def __init__(self, *, source: str, limits: Limits) -> None:
        self.source, self.limits = source, limits
        self.traces: dict[str, list[Step]] = {}
        self.trace_session: dict[str, str] = {}
        self.seen: dict[str, set[str]] = {}
        self.call_ids: dict[int, str] = {}  # id(step) -> tool call id, for batch ids
        self.issued: dict[str, str] = {}  # tool call id -> model span id that issued it
        self.requested: dict[str, dict[str, Any]] = {}  # tool call id -> the model's request
        self.meta: dict[str, dict[str, Any]] = {}  # trace id -> metadata found on its spans
        self.warnings: dict[str, list[str]] = {}
        self.details: list[Span] = []  # spans that only say how their parent tool call went
        self.logs: list[LogEvent] = []
        self.dialects: dict[str, set[str]] = {}  # trace id -> dialects its spans were read by
        self.held = 0  # spans and log records kept so far, across traces
        self.agents: dict[int, str] = {}  # id(step) of a step made from an agent span -> who
        self.contexts: dict[tuple[str, str], dict[str, Any]] = {}  # LangGraph tools node calls
        self.chats: list[tuple[str, Step, dict[str, Any]]] = []  # model spans with messages

    def _hold(self) -> None:
        self.held += 1
        if self.held > self.limits.max_held_steps:
            raise too_many_held(self.limits.max_held_steps, source=self.source)

    def add(self, span: Span) -> None:
        """Turn one span into a step of its trace."""
        seen = self.seen.setdefault(span.trace_id, set())
        steps = self.traces.setdefault(span.trace_id, [])
        if span.span_id in seen:
            notes = self.warnings.setdefault(span.trace_id, [])
            if len(notes) < 100:
                notes.append(f"{self.source}: span {span.span_id} appears twice; kept the first")
            return
        key = self.run_key(span.trace_id)
        check_step_limit(len(steps) + 1, key, limits=self.limits, source=self.source)
        self._hold()
        seen.add(span.span_id)
        if span.session and span.trace_id not in self.trace_session:
            self.trace_session[span.trace_id] = span.session
        role, dialect = classify(span.name, span.attrs)
        if role == DETAIL:
            self.details.append(span)
            return
        if dialect.name != COMMON.name:
            self.dialects.setdefault(span.trace_id, set()).add(dialect.name)
        steps.append(self._step(span, role, dialect))

    def add_log(self, event: LogEvent) -> None:
        """Keep one log record; it is placed when the runs are built."""
        self._hold()
        self.logs.append(event)

    def _step(self, span: Span, role: str, dialect: Dialect) -> Step:
        step = Step(
            seq=len(self.traces[span.trace_id]),
            kind="system",
            id=span.span_id,
            parent_id=span.parent_id,
            started_at=span.start,
            ended_at=span.end,
        )
        meta = self.meta.setdefault(span.trace_id, {})
        if role == TOOL:
            call_id = _tool_step(span, step, dialect, self.limits)
            if call_id:
                self.call_ids[id(step)] = call_id
        elif role == LLM:
            _llm_step(span, step, dialect, self.limits)
            for call in requested_calls(span.attrs, dialect):
                if call.get("id"):
                    self.issued.setdefault(str(call["id"]), span.span_id)
                    self.requested.setdefault(str(call["id"]), call)
            model = _pick(span.attrs, dialect, "model")
            if model:
                meta.setdefault("model", str(unwrap(model)))
            if CHAT_KEYS & span.attrs.keys():
                self.chats.append((span.trace_id, step, span.attrs))
        else:
            _group_step(span, step, dialect, self.limits, meta)
            context = tool_call_context(span.attrs.get("input.value"))
            if context is not None:
                self.contexts[(span.trace_id, span.span_id)] = context
            if role == AGENT:  # the agent's identity: its name, else the span's
                name = _pick(span.attrs, dialect, "agent")
                self.agents[id(step)] = str(unwrap(name)) if name else span.name
        return step

    def run_key(self, trace_id: str) -> str:
        """Return the id of the run a trace's steps go to: its session, else the trace id."""
        return self.trace_session.get(trace_id, trace_id)

    def runs(self) -> list[Run]:
        """Return the runs: traces grouped by session, in order of first appearance."""
        take_contexts(self)
        placement.fold_details(self)
        placement.rebuild_calls(self)
        placement.place_logs(self)
        runs: dict[str, Run] = {}
        for trace_id, steps in self.traces.items():
            key = self.run_key(trace_id)
            run = runs.get(key)
            if run is None:
                run = runs[key] = Run(id=key, format=name, metadata={"trace_ids": []})
                if key != trace_id:
                    run.metadata["session_id"] = key
            if not trace_id.startswith(placement.LOOSE):
                run.metadata["trace_ids"].append(trace_id)
            for meta_key, value in self.meta.get(trace_id, {}).items():
                run.metadata.setdefault(meta_key, value)
            dialects = self.dialects.get(trace_id)
            if dialects:
                known = run.metadata.setdefault("dialects", [])
                known += sorted(d for d in dialects if d not in known)
            for step in steps:
                add_step(run, step, limits=self.limits, source=self.source)
            run.warnings.extend(self.warnings.get(trace_id, []))
        for run in runs.values():
            if not run.steps:
                continue
            self._order(run)
            self._open_subagent_lanes(run)
            assign_lanes(run)
            run.name = _run_name(run)
        return [finish_run(run, call_ids=self.call_ids) for run in runs.values() if run.steps]

    def _open_subagent_lanes(self, run: Run) -> None:
        """Give each agent span nested in another agent's a lane of its own: a sub-agent.

        The outermost agent is the run's main agent. An agent span inside one of the same
        identity (a framework's span per turn of one agent) is that agent still, and the
        spans between an agent and its calls (turns, steps, chains, graph nodes) open no
        lane (`lanes.py`).
        """
        if not self.agents:
            return
        by_id = {step.id: step for step in run.steps if step.id}
        outermost: list[Step] = []  # agent spans with no agent above them
        for step in run.steps:
            who = self.agents.get(id(step))
            if who is None or step.lane is not None:
                continue
            parent, hops = by_id.get(step.parent_id), 0
            while parent is not None and hops < 1000:
                above = self.agents.get(id(parent))
                if above is not None:
                    if above != who:
                        step.lane = f"agent:{step.id}"
                    break
                parent, hops = by_id.get(parent.parent_id), hops + 1
            else:
                outermost.append(step)
        self._open_concurrent_lanes(outermost)

    def _open_concurrent_lanes(self, outermost: list[Step]) -> None:
        """Give outermost agent spans that overlap in time an agent of another identity each a
        lane of their own: agents that run side by side (under a workflow span, say).

        Neither is the main agent then: each lane starts from what the main lane had seen, not
        from the other agent's calls. Agents one after another (a handoff) and the spans of one
        agent stay one lane: only time overlap is evidence of concurrency.
        """
        timed = sorted(
            (s for s in outermost if s.started_at is not None and s.ended_at is not None),
            key=lambda s: s.started_at,
        )
        running: list[Step] = []  # agent spans not yet ended at the current start
        for step in timed:
            running = [other for other in running if other.ended_at > step.started_at]
            who = self.agents[id(step)]
            beside = [other for other in running if self.agents[id(other)] != who]
            if beside:
                for agent in (step, *beside):
                    agent.lane = agent.lane or f"agent:{agent.id}"
            running.append(step)

    def _order(self, run: Run) -> None:
        last = float("-inf")
        keys_ = []
        for step in run.steps:
            if step.started_at is not None:
                last = step.started_at
            keys_.append(last)
        order = sorted(range(len(run.steps)), key=keys_.__getitem__)
        run.steps = [run.steps[i] for i in order]
        latest_model: dict[str | None, str] = {}
        models = {step.id for step in run.steps if step.kind == "assistant" and step.id}
        for seq, step in enumerate(run.steps):
            step.seq = seq
            if step.kind == "assistant" and step.id:
                latest_model[step.parent_id] = step.id
            elif step.kind == "tool_call":
                call_id = self.call_ids.get(id(step))
                step.batch_id = (
                    self.issued.get(call_id or "")
                    or (step.parent_id if step.parent_id in models else None)  # Vercel AI SDK
                    or latest_model.get(step.parent_id)
                )


def runs_from_request(
    request: Any, *, source: str = "otlp", limits: Limits = DEFAULT_LIMITS
) -> list[Run]:
    """Return the runs in one ExportTraceServiceRequest (protobuf, bytes or JSON dict).

    One request in, its runs out (a run is whatever part of a session this request holds);
    spans with invalid ids are left out.
    """
    collector = Collector(source=source, limits=limits)
    for span in spans_from_request(request):
        collector.add(span)
    return collector.runs()


# --- reading files


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the runs of one OTLP file (JSON, JSONL or protobuf; spans, log records or both);
    see the module docstring."""
    head = stream_head(stream)
    if not head.strip():
        raise TraceError("empty file", source=source)
    collector = Collector(source=source, limits=limits)
    skips = Skips()
    items: Iterator[Span | LogEvent]
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        items = _protobuf_spans(stream, source=source, skips=skips)
    elif head[:1] == b"\x0a" and logs.looks_like_protobuf(head):
        items = _protobuf_events(stream, source=source, skips=skips)
    elif looks_like_jsonl(head):
        items = _jsonl_items(stream, source=source, limits=limits, skips=skips)
    else:
        items = _document_items(stream, head, source=source, limits=limits, skips=skips)
    for item in items:
        if isinstance(item, LogEvent):
            collector.add_log(item)
        else:
            collector.add(item)
    runs = collector.runs()
    if not runs:
        raise skips.first or TraceError("no spans or log records in the file", source=source)
    for run in runs:
        skips.apply(run)
    yield from runs


def _skip_to(skips: Skips, *, source: str, line: int | None = None, where: str = "") -> Rejected:
    """Return a rejected-span callback that counts each one in skips, saying where it was."""

    def rejected(reason: str) -> None:
        skips.add(TraceError(reason, source=source, line=line, field=where or None))

    return rejected


def _protobuf_spans(stream: IO[bytes], *, source: str, skips: Skips) -> Iterator[Span]:
    for index, resource_spans in enumerate(iter_pb_resources(stream, source=source)):
        where = f"resource_spans[{index}]"
        yield from spans_of_resource(
            resource_spans, rejected=_skip_to(skips, source=source, where=where)
        )


def _protobuf_events(stream: IO[bytes], *, source: str, skips: Skips) -> Iterator[LogEvent]:
    for index, resource_logs in enumerate(logs.iter_pb_resources(stream, source=source)):
        where = f"resource_logs[{index}]"
        yield from events_of_resource(
            resource_logs, rejected=_skip_to(skips, source=source, where=where)
        )


def _items_of(value: Any, rejected: Rejected) -> Iterator[Span | LogEvent]:
    if is_logs_request(value):
        yield from events_from_request(value, rejected=rejected)
    else:
        yield from spans_from_request(value, rejected=rejected)


def _jsonl_items(
    stream: IO[bytes], *, source: str, limits: Limits, skips: Skips
) -> Iterator[Span | LogEvent]:
    reader = JsonlReader(stream, source=source, limits=limits, skips=skips)
    for line, value in reader:
        if not (is_request(value) or is_span_record(value) or is_logs_request(value)):
            reader.reject(
                TraceError("not an OTLP request or span record", source=source, line=line)
            )
            continue
        yield from _items_of(value, _skip_to(skips, source=source, line=line))


def _document_items(
    stream: IO[bytes], head: bytes, *, source: str, limits: Limits, skips: Skips
) -> Iterator[Span | LogEvent]:
    values = head_values(head, max_lines=1)
    first = values[0] if values else None
    if isinstance(first, list):
        items = iter_document(stream, "item", source=source, limits=limits)
        for index, item in enumerate(items):
            yield from _items_of(item, _skip_to(skips, source=source, where=f"[{index}]"))
        return
    if not isinstance(first, dict):
        first = partial_json(head)
    found = [k for k in ("resourceSpans", "resource_spans", "resourceLogs", "resource_logs")
             if isinstance(first, dict) and k in first]  # fmt: skip
    if not found:
        found = ["resourceLogs" if b'"resourceLogs"' in head[:4096] else "resourceSpans"]
    for key in found:
        if len(found) > 1:  # both signals in one document: read it once per signal
            stream.seek(0)
        items = iter_document(stream, f"{key}.item", source=source, limits=limits)
        for index, resource in enumerate(items):
            rejected = _skip_to(skips, source=source, where=f"{key}[{index}]")
            if key in ("resourceLogs", "resource_logs"):
                yield from events_of_resource(resource, rejected=rejected)
            else:
                yield from spans_of_resource(resource, rejected=rejected)
