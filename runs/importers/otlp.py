"""OpenTelemetry traces: OTLP/JSON, JSONL of OTLP requests, binary OTLP protobuf, span records.

Accepted shapes: an `ExportTraceServiceRequest` in the protobuf JSON mapping
(`resourceSpans[].scopeSpans[].spans[]`, camelCase or snake_case, ids hex or base64, int64 as
text or numbers), JSONL of such requests (one per line; also flat span records with
`trace_id`, `span_id`, `parent_span_id`, `attributes: {key: value}` as some hooks write them),
and binary protobuf (one request, or several concatenated: read one ResourceSpans at a time).

Grouping: one run per `session.id` / `gen_ai.conversation.id` (span or resource attribute;
every span of a trace goes where any span of that trace says), else one run per traceId; runs
in order of first appearance; steps ordered by start time (stable; a span without a start time
keeps its place after the span before it). The tree: Step.id = span id, parent_id = parent
span id (a parent missing from the file makes the span a root, per the model's rule).

Span -> step (GenAI semantic conventions and OpenInference attributes):
- tool: `gen_ai.operation.name = execute_tool` or `openinference.span.kind = TOOL`
  -> tool_call; tool = `gen_ai.tool.name` | `tool.name` | span name without "execute_tool ";
  args = `gen_ai.tool.call.arguments` | `tool_call.function.arguments` | `input.value` (parsed
  when JSON; `tool.parameters` is a schema, never used as args); result =
  `gen_ai.tool.call.result` | `output.value` (text as given). OpenInference RETRIEVER spans are
  tool calls too (tool = span name).
- model call: `chat`/`text_completion`/`generate_content` or kind LLM -> assistant step; text =
  the output message text (`gen_ai.output.messages` text parts, `llm.output_messages.*.message
  .content`), None when the model only called tools; tokens from `gen_ai.usage.*_tokens` |
  `llm.token_count.prompt/completion`; cost from `llm.cost.total`; the model goes to metadata.
- agent/chain (`invoke_agent`, `create_agent`, kind AGENT/CHAIN) and any other span -> a
  `system` step with text = span name, so the tree shows it; never a tool call.
- batch_id of a tool step: the model span whose output lists its `gen_ai.tool.call.id`,
  else the latest model span before it under the same parent.
- Errors are explicit: span status code 2 / "STATUS_CODE_ERROR" / "ERROR", an `error.type`
  attribute, or an `exception` event -> status "error"; a failed tool without a result gets
  the error message (status message, error.type or exception.message) as its result.
- A span id seen twice in one trace (a batch exported twice) is kept once, with a warning.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from .base import (
    Limits,
    Skips,
    TooManySteps,
    TraceError,
    clip_json,
    clip_strings,
    head_values,
    iter_json,
    iter_jsonl,
    looks_like_jsonl,
    parse_json_text,
    stream_head,
)

name = "otlp"
label = "OpenTelemetry OTLP traces (JSON, JSONL, protobuf)"

TOOL_OPS = {"execute_tool"}
LLM_OPS = {"chat", "text_completion", "generate_content", "completion"}
AGENT_OPS = {"invoke_agent", "create_agent"}
ERROR_CODES = {2, "2", "STATUS_CODE_ERROR", "ERROR", "error", "Error"}
SESSION_KEYS = ("session.id", "gen_ai.conversation.id")
_OUTPUT_CALL_ID = re.compile(r"llm\.output_messages\.\d+\.message\.tool_calls\.\d+\.tool_call\.id")
_OUTPUT_TEXT = re.compile(r"llm\.output_messages\.(\d+)\.message\.content")


@dataclass(slots=True)
class Span:
    """One span, decoded from JSON or protobuf, before it becomes a step."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: float | None
    end: float | None
    error: bool
    message: str
    attrs: dict[str, Any]
    session: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


# --- sniffing


def _is_request(value: Any) -> bool:
    return isinstance(value, dict) and ("resourceSpans" in value or "resource_spans" in value)


def _is_span_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and ("traceId" in value or "trace_id" in value)
        and ("spanId" in value or "span_id" in value)
        and "name" in value
    )


def sniff(head: bytes) -> bool:
    """OTLP/JSON (`resourceSpans`), JSONL of requests or span records, or OTLP protobuf."""
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        return True
    values = head_values(head, max_lines=2)
    if not values:
        return False
    first = values[0]
    if isinstance(first, list) and first:
        first = first[0]
    return _is_request(first) or _is_span_record(first)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise IndexError("varint runs past the data")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, allowed: set[int]) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (field number, body, complete) of length-delimited fields; stop at the data's end."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        if tag & 7 != 2 or tag >> 3 not in allowed:
            raise ValueError("not an OTLP field")
        length, pos = _varint(buf, pos)
        yield tag >> 3, buf[pos : pos + length], pos + length <= len(buf)
        pos += length


def looks_like_protobuf(head: bytes) -> bool:
    """Return whether head is an ExportTraceServiceRequest: walk the wire format down to a span
    whose first field is a 16-byte trace id. Text never passes: after 0x0a (a newline) the next
    bytes would have to be valid nested length-delimited fields, ending in a real span.
    """
    try:
        for _, resource_spans, _ in _fields(head, {1}):
            for number, scope_spans, _ in _fields(resource_spans, {1, 2, 3}):
                if number != 2:
                    continue
                for kind, span, _ in _fields(scope_spans, {1, 2, 3}):
                    if kind == 2:
                        tag, pos = _varint(span, 0)
                        length, _ = _varint(span, pos)
                        return tag == 0x0A and length == 16
    except (ValueError, IndexError):
        return False
    return False


# --- decoding spans


def _hex_id(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.hex() or None
    if not isinstance(value, str) or not value:
        return None
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        return base64.b64decode(value, validate=True).hex() or None
    except (binascii.Error, ValueError):
        return value


def _any_value(value: Any) -> Any:
    """Return the Python value of an OTLP/JSON AnyValue (plain values pass through)."""
    if not isinstance(value, dict):
        return value
    for key, cast in (
        ("stringValue", str),
        ("string_value", str),
        ("boolValue", bool),
        ("bool_value", bool),
        ("intValue", int),
        ("int_value", int),
        ("doubleValue", float),
        ("double_value", float),
    ):
        if key in value:
            try:
                return cast(value[key])
            except (TypeError, ValueError):
                return value[key]
    array = value.get("arrayValue", value.get("array_value"))
    if isinstance(array, dict):
        return [_any_value(item) for item in array.get("values") or []]
    kvlist = value.get("kvlistValue", value.get("kvlist_value"))
    if isinstance(kvlist, dict):
        return _attributes(kvlist.get("values"))
    if "bytesValue" in value or "bytes_value" in value:
        return value.get("bytesValue", value.get("bytes_value"))
    return value or None


def _attributes(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # flat records: {key: value}
        return {str(k): _any_value(v) for k, v in raw.items()}
    attrs: dict[str, Any] = {}
    for item in raw or []:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attrs[item["key"]] = _any_value(item.get("value"))
    return attrs


def _nanos(value: Any) -> float | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number / 1e9 if number else None


def _get(obj: dict, camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))


def span_from_json(obj: Any, resource: dict[str, Any]) -> Span:
    """Return a Span from its OTLP/JSON object (or a flat span record)."""
    if not isinstance(obj, dict):
        raise TraceError(f"a span must be an object, not {type(obj).__name__}")
    trace_id = _hex_id(_get(obj, "traceId", "trace_id"))
    span_id = _hex_id(_get(obj, "spanId", "span_id"))
    if not trace_id or not span_id:
        raise TraceError("a span needs traceId and spanId", field="spanId")
    status = obj.get("status")
    code = status.get("code") if isinstance(status, dict) else status
    message = status.get("message", "") if isinstance(status, dict) else ""
    attrs = _attributes(obj.get("attributes"))
    events = [
        (str(e.get("name", "")), _attributes(e.get("attributes")))
        for e in obj.get("events") or []
        if isinstance(e, dict)
    ]
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=_hex_id(_get(obj, "parentSpanId", "parent_span_id")),
        name=str(obj.get("name", "")),
        start=_nanos(_get(obj, "startTimeUnixNano", "start_time_unix_nano")),
        end=_nanos(_get(obj, "endTimeUnixNano", "end_time_unix_nano")),
        error=code in ERROR_CODES,
        message=str(message or ""),
        attrs=attrs,
        events=events,
    )
    span.session = _session(attrs, resource) or _text(obj.get("session_id"))
    return span


def _session(attrs: dict[str, Any], resource: dict[str, Any]) -> str | None:
    for source in (attrs, resource):
        for key in SESSION_KEYS:
            if source.get(key) not in (None, ""):
                return str(source[key])
    return None


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def spans_from_json_resource(resource_spans: Any) -> Iterator[Span]:
    """Yield the spans of one OTLP/JSON ResourceSpans object."""
    if not isinstance(resource_spans, dict):
        raise TraceError("resourceSpans items must be objects")
    resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
    scopes = (
        _get(resource_spans, "scopeSpans", "scope_spans")
        or resource_spans.get("instrumentationLibrarySpans")
        or []
    )
    for scope in scopes:
        for span in (scope or {}).get("spans") or []:
            yield span_from_json(span, resource)


def _pb_value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def spans_from_pb_resource(resource_spans: Any) -> Iterator[Span]:
    """Yield the spans of one protobuf ResourceSpans message."""
    resource = {kv.key: _pb_value(kv.value) for kv in resource_spans.resource.attributes}
    for scope in resource_spans.scope_spans:
        for pb in scope.spans:
            attrs = {kv.key: _pb_value(kv.value) for kv in pb.attributes}
            events = [
                (e.name, {kv.key: _pb_value(kv.value) for kv in e.attributes}) for e in pb.events
            ]
            yield Span(
                trace_id=pb.trace_id.hex(),
                span_id=pb.span_id.hex(),
                parent_id=pb.parent_span_id.hex() or None,
                name=pb.name,
                start=pb.start_time_unix_nano / 1e9 or None,
                end=pb.end_time_unix_nano / 1e9 or None,
                error=pb.status.code == 2,
                message=pb.status.message,
                attrs=attrs,
                session=_session(attrs, resource),
                events=events,
            )


def spans_from_request(request: Any) -> Iterator[Span]:
    """Yield the spans of one ExportTraceServiceRequest: protobuf message, bytes or JSON dict."""
    if isinstance(request, bytes | bytearray):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest.FromString(bytes(request))
    if isinstance(request, dict):
        if _is_span_record(request):
            yield span_from_json(request, {})
            return
        for resource_spans in _get(request, "resourceSpans", "resource_spans") or []:
            yield from spans_from_json_resource(resource_spans)
        return
    for resource_spans in request.resource_spans:
        yield from spans_from_pb_resource(resource_spans)


# --- spans to steps


def _op(span: Span) -> str:
    op = str(span.attrs.get("gen_ai.operation.name") or "").lower()
    kind = str(span.attrs.get("openinference.span.kind") or "").upper()
    if op in TOOL_OPS or kind in ("TOOL", "RETRIEVER"):
        return "tool"
    if op in LLM_OPS or kind == "LLM":
        return "llm"
    return "group"


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if attrs.get(key) is not None:
            return attrs[key]
    return None


def _error_text(span: Span) -> str | None:
    for _, attrs in span.events:
        if attrs.get("exception.message"):
            return str(attrs["exception.message"])
    return span.message or _text(span.attrs.get("error.type"))


def _output_text(attrs: dict[str, Any]) -> str | None:
    messages = parse_json_text(attrs.get("gen_ai.output.messages"))
    pieces: list[str] = []
    if isinstance(messages, list):
        for message in messages:
            for part in (message or {}).get("parts") or [] if isinstance(message, dict) else []:
                if isinstance(part, dict) and part.get("type") == "text":
                    pieces.append(str(part.get("content", "")))
    if not pieces:
        indexed = sorted(
            (int(m.group(1)), v)
            for k, v in attrs.items()
            if (m := _OUTPUT_TEXT.fullmatch(k)) and isinstance(v, str)
        )
        pieces = [v for _, v in indexed]
    if not pieces and isinstance(attrs.get("gen_ai.completion"), str):
        pieces = [attrs["gen_ai.completion"]]
    return "\n".join(pieces) if pieces and any(p.strip() for p in pieces) else None


def _output_call_ids(attrs: dict[str, Any]) -> list[str]:
    ids = [str(v) for k, v in attrs.items() if _OUTPUT_CALL_ID.fullmatch(k)]
    messages = parse_json_text(attrs.get("gen_ai.output.messages"))
    if isinstance(messages, list):
        for message in messages:
            for part in (message or {}).get("parts") or [] if isinstance(message, dict) else []:
                if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id"):
                    ids.append(str(part["id"]))
    return ids


def _tool_step(span: Span, step: Step, limits: Limits) -> str | None:
    attrs = span.attrs
    step.kind = "tool_call"
    tool = _first(attrs, "gen_ai.tool.name", "tool.name", "tool_call.function.name")
    if not tool:
        tool = span.name.removeprefix("execute_tool ").strip() or "(unknown)"
    step.tool = str(tool)[:200]
    args = _first(
        attrs, "gen_ai.tool.call.arguments", "tool_call.function.arguments", "input.value"
    )
    step.args = clip_json(parse_json_text(args), limits)
    result = _first(attrs, "gen_ai.tool.call.result", "output.value")
    error = span.error or "error.type" in attrs or any(n == "exception" for n, _ in span.events)
    if result is None and error:
        result = _error_text(span)
    step.result = clip_json(result, limits)
    step.status = "error" if error else "ok"
    return _text(_first(attrs, "gen_ai.tool.call.id", "tool_call.id"))


def _llm_step(span: Span, step: Step, limits: Limits) -> None:
    attrs = span.attrs
    step.kind = "assistant"
    step.text = clip_strings(_output_text(attrs), limits.max_value_chars)
    step.tokens_in = _int(_first(attrs, "gen_ai.usage.input_tokens", "llm.token_count.prompt"))
    step.tokens_out = _int(
        _first(attrs, "gen_ai.usage.output_tokens", "llm.token_count.completion")
    )
    cost = attrs.get("llm.cost.total")
    step.cost = (
        float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    )
    if span.error or "error.type" in attrs:
        step.status = "error"


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
    """Gathers spans (from any number of requests) and builds the runs at the end."""

    def __init__(self, *, source: str, limits: Limits) -> None:
        self.source, self.limits = source, limits
        self.traces: dict[str, list[Step]] = {}
        self.trace_session: dict[str, str] = {}
        self.seen: dict[str, set[str]] = {}
        self.call_ids: dict[int, str] = {}  # id(step) -> tool call id, for batch ids
        self.issued: dict[str, str] = {}  # tool call id -> model span id that issued it
        self.meta: dict[str, dict[str, Any]] = {}  # trace id -> metadata found on its spans
        self.warnings: dict[str, list[str]] = {}

    def add(self, span: Span) -> None:
        """Turn one span into a step of its trace."""
        seen = self.seen.setdefault(span.trace_id, set())
        steps = self.traces.setdefault(span.trace_id, [])
        if span.span_id in seen:
            notes = self.warnings.setdefault(span.trace_id, [])
            if len(notes) < 100:
                notes.append(f"{self.source}: span {span.span_id} appears twice; kept the first")
            return
        if len(steps) >= self.limits.max_steps:
            raise TooManySteps(
                f"trace {span.trace_id} has more than {self.limits.max_steps} spans",
                source=self.source,
            )
        seen.add(span.span_id)
        if span.session and span.trace_id not in self.trace_session:
            self.trace_session[span.trace_id] = span.session
        steps.append(self._step(span))

    def _step(self, span: Span) -> Step:
        step = Step(
            seq=len(self.traces[span.trace_id]),
            kind="system",
            id=span.span_id,
            parent_id=span.parent_id,
            started_at=span.start,
            ended_at=span.end,
        )
        op = _op(span)
        meta = self.meta.setdefault(span.trace_id, {})
        if op == "tool":
            call_id = _tool_step(span, step, self.limits)
            if call_id:
                self.call_ids[id(step)] = call_id
        elif op == "llm":
            _llm_step(span, step, self.limits)
            for call_id in _output_call_ids(span.attrs):
                self.issued.setdefault(call_id, span.span_id)
            model = _first(
                span.attrs, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name"
            )
            if model:
                meta.setdefault("model", str(model))
        else:
            step.text = clip_strings(span.name, self.limits.max_value_chars)
            step.status = "error" if span.error else "ok"
            agent = _first(span.attrs, "gen_ai.agent.name", "agent.name")
            if agent:
                meta.setdefault("agent", str(agent))
            task = span.attrs.get("input.value")
            if isinstance(task, str) and task and parse_json_text(task) is task:
                meta.setdefault("task", clip_strings(task, 2000))
        return step

    def runs(self) -> list[Run]:
        """Return the runs: traces grouped by session, in order of first appearance."""
        runs: dict[str, Run] = {}
        for trace_id, steps in self.traces.items():
            key = self.trace_session.get(trace_id, trace_id)
            run = runs.get(key)
            if run is None:
                run = runs[key] = Run(id=key, format=name, metadata={"trace_ids": []})
                if key != trace_id:
                    run.metadata["session_id"] = key
            run.metadata["trace_ids"].append(trace_id)
            for meta_key, value in self.meta.get(trace_id, {}).items():
                run.metadata.setdefault(meta_key, value)
            run.steps.extend(steps)
            run.warnings.extend(self.warnings.get(trace_id, []))
            if len(run.steps) > self.limits.max_steps:
                raise TooManySteps(
                    f"run {key!r} has more than {self.limits.max_steps} steps", source=self.source
                )
        for run in runs.values():
            self._order(run)
            run.name = _run_name(run)
        return list(runs.values())

    def _order(self, run: Run) -> None:
        last = float("-inf")
        keys = []
        for step in run.steps:
            if step.started_at is not None:
                last = step.started_at
            keys.append(last)
        order = sorted(range(len(run.steps)), key=keys.__getitem__)
        run.steps = [run.steps[i] for i in order]
        latest_model: dict[str | None, str] = {}
        for seq, step in enumerate(run.steps):
            step.seq = seq
            if step.kind == "assistant" and step.id:
                latest_model[step.parent_id] = step.id
            elif step.kind == "tool_call":
                call_id = self.call_ids.get(id(step))
                step.batch_id = self.issued.get(call_id or "") or latest_model.get(step.parent_id)


def runs_from_request(
    request: Any, *, source: str = "otlp", limits: Limits | None = None
) -> list[Run]:
    """Return the runs in one ExportTraceServiceRequest (protobuf, bytes or JSON dict).

    Meant for an OTLP/HTTP endpoint: one request in, its runs out (a run is whatever part of a
    session this request holds).
    """
    collector = Collector(source=source, limits=limits or Limits())
    for span in spans_from_request(request):
        collector.add(span)
    return collector.runs()


# --- reading files


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the runs of one OTLP file (JSON, JSONL or protobuf); see the module docstring."""
    head = stream_head(stream)
    if not head.strip():
        raise TraceError("empty file", source=source)
    collector = Collector(source=source, limits=limits)
    skips = Skips()
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        spans = _protobuf_spans(stream, source=source)
    elif looks_like_jsonl(head):
        spans = _jsonl_spans(stream, source=source, limits=limits, skips=skips)
    else:
        spans = _document_spans(stream, head, source=source, limits=limits, skips=skips)
    for span in spans:
        collector.add(span)
    runs = collector.runs()
    if not runs:
        if skips.first is not None:
            raise skips.first
        raise TraceError("no spans in the file", source=source)
    for run in runs:
        skips.apply(run)
    yield from runs


def _guarded(
    spans: Iterable[Span], *, where: str, source: str, line: int | None, skips: Skips
) -> Iterator[Span]:
    try:
        yield from spans
    except TraceError as exc:
        skips.add(TraceError(exc.reason, source=source, line=line, field=exc.field or where))


def _jsonl_spans(stream: IO[bytes], *, source: str, limits: Limits, skips: Skips) -> Iterator[Span]:
    for line, value in iter_jsonl(stream, source=source, limits=limits, skips=skips):
        if not (_is_request(value) or _is_span_record(value)):
            skips.add(TraceError("not an OTLP request or span record", source=source, line=line))
            continue
        yield from _guarded(
            spans_from_request(value), where="", source=source, line=line, skips=skips
        )


def _document_spans(
    stream: IO[bytes], head: bytes, *, source: str, limits: Limits, skips: Skips
) -> Iterator[Span]:
    values = head_values(head, max_lines=1)
    first = values[0] if values else None
    if isinstance(first, list):
        for index, item in enumerate(iter_json(stream, "item", source=source, limits=limits)):
            yield from _guarded(
                spans_from_request(item)
                if isinstance(item, dict)
                else iter([span_from_json(item, {})]),
                where=f"[{index}]",
                source=source,
                line=None,
                skips=skips,
            )
        return
    key = (
        "resource_spans"
        if isinstance(first, dict) and "resource_spans" in first
        else "resourceSpans"
    )
    items = iter_json(stream, f"{key}.item", source=source, limits=limits)
    for index, resource_spans in enumerate(items):
        yield from _guarded(
            spans_from_json_resource(resource_spans),
            where=f"{key}[{index}]",
            source=source,
            line=None,
            skips=skips,
        )


def _protobuf_spans(stream: IO[bytes], *, source: str) -> Iterator[Span]:
    """Read top-level fields one at a time, so only one ResourceSpans is in memory."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

    offset = 0
    while True:
        start = offset
        tag, offset = _read_varint(stream, offset, source=source, allow_eof=True)
        if tag is None:
            return
        if tag & 7 != 2:
            raise TraceError(
                f"invalid protobuf: unexpected wire type at byte {start}", source=source
            )
        length, offset = _read_varint(stream, offset, source=source)
        body = stream.read(length)
        if len(body) < length:
            raise TraceError(
                f"truncated protobuf: field at byte {start} needs {length} bytes, {len(body)} left",
                source=source,
            )
        offset += length
        if tag >> 3 != 1:
            continue  # an unknown field: protobuf readers skip those
        try:
            resource_spans = ResourceSpans.FromString(body)
        except DecodeError as exc:
            raise TraceError(
                f"invalid protobuf in the ResourceSpans at byte {start}: {exc}", source=source
            ) from None
        yield from spans_from_pb_resource(resource_spans)


def _read_varint(
    stream: IO[bytes], offset: int, *, source: str, allow_eof: bool = False
) -> tuple[Any, int]:
    value = shift = 0
    while True:
        byte = stream.read(1)
        if not byte:
            if allow_eof and shift == 0:
                return None, offset
            raise TraceError(f"truncated protobuf at byte {offset}", source=source)
        offset += 1
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise TraceError(f"invalid protobuf varint at byte {offset}", source=source)
