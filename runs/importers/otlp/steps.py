"""OpenTelemetry spans to runs: the OTLP file importer (format "otlp") and the `Collector`
the OTLP/HTTP assembly shares with it. Decoding is spans.py's.

Files: an ExportTraceServiceRequest in OTLP/JSON (`resourceSpans[].scopeSpans[].spans[]`),
a JSON array of requests or span records, JSONL of those (one per line), or binary protobuf
(one request, or several concatenated). A span with invalid ids is skipped and counted, as
the receiver rejects it.

Grouping: one run per `session.id` / `gen_ai.conversation.id` (span or resource attribute;
every span of a trace goes where any span of that trace says), else one run per traceId; runs
in order of first appearance; steps ordered by start time (stable; a span without a start time
keeps its place after the span before it). The tree: Step.id = span id, parent_id = parent
span id (a parent missing from the file makes the span a root, per the model's rule).

Span -> step (GenAI semantic conventions and OpenInference attributes):
- tool: `gen_ai.operation.name = execute_tool` or `openinference.span.kind = TOOL`
  -> tool_call; tool = `gen_ai.tool.name` | `tool.name` | span name without "execute_tool ";
  args = `gen_ai.tool.call.arguments` | `tool_call.function.arguments` | `input.value` (JSON
  text parsed by `content.parse_json_text`; `tool.parameters` is a schema, never used as
  args); result = `gen_ai.tool.call.result` | `output.value` (text as given). OpenInference
  RETRIEVER spans are tool calls too (tool = span name).
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

import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from ..content import parse_json_text
from ..detect import Claim, Sample, share
from ..errors import Skips, TooManySteps, TraceError, too_many_held
from ..reading import (
    DEFAULT_LIMITS,
    JsonlReader,
    Limits,
    clip_json,
    clip_strings,
    head_values,
    iter_document,
    looks_like_jsonl,
    stream_head,
)
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

name = "otlp"
label = "OpenTelemetry OTLP traces (JSON, JSONL, protobuf)"

TOOL_OPS = {"execute_tool"}
LLM_OPS = {"chat", "text_completion", "generate_content", "completion"}
_OUTPUT_CALL_ID = re.compile(r"llm\.output_messages\.\d+\.message\.tool_calls\.\d+\.tool_call\.id")
_OUTPUT_TEXT = re.compile(r"llm\.output_messages\.(\d+)\.message\.content")


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
    return is_request(first) or is_span_record(first)


def claim(sample: Sample) -> Claim:
    """OTLP/JSON requests (`resourceSpans`), span records, or an OTLP protobuf request."""
    head = sample.head
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        return Claim(0.9, "an OTLP protobuf export request (resource spans)")
    records = sample.records
    if len(records) == 1 and isinstance(records[0], list):
        records = records[0][:200]
    fit = share(records, lambda r: is_request(r) or is_span_record(r))
    if not fit:
        return Claim.no("no `resourceSpans` request and no span record (traceId, spanId, name)")
    return Claim(0.9 * fit, f"{fit:.0%} of the records are OTLP requests or span records")


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
    return span.message or optional_text(span.attrs.get("error.type"))


def _output_parts(attrs: dict[str, Any], kind: str) -> Iterator[dict[str, Any]]:
    """Yield the parts of this type in the `gen_ai.output.messages` of a model span."""
    messages = parse_json_text(attrs.get("gen_ai.output.messages"))
    for message in messages if isinstance(messages, list) else ():
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts or ():
            if isinstance(part, dict) and part.get("type") == kind:
                yield part


def _output_text(attrs: dict[str, Any]) -> str | None:
    pieces = [str(part.get("content", "")) for part in _output_parts(attrs, "text")]
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
    ids += [str(part["id"]) for part in _output_parts(attrs, "tool_call") if part.get("id")]
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
    return optional_text(_first(attrs, "gen_ai.tool.call.id", "tool_call.id"))


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


def _group_step(span: Span, step: Step, limits: Limits, meta: dict[str, Any]) -> None:
    step.text = clip_strings(span.name, limits.max_value_chars)
    step.status = "error" if span.error else "ok"
    agent = _first(span.attrs, "gen_ai.agent.name", "agent.name")
    if agent:
        meta.setdefault("agent", str(agent))
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
        self.held = 0  # spans kept so far, across traces

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
        self.held += 1
        if self.held > self.limits.max_held_steps:
            raise too_many_held(self.limits.max_held_steps, source=self.source)
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
            _group_step(span, step, self.limits, meta)
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
    """Yield the runs of one OTLP file (JSON, JSONL or protobuf); see the module docstring."""
    head = stream_head(stream)
    if not head.strip():
        raise TraceError("empty file", source=source)
    collector = Collector(source=source, limits=limits)
    skips = Skips()
    if head[:1] == b"\x0a" and looks_like_protobuf(head):
        spans = _protobuf_spans(stream, source=source, skips=skips)
    elif looks_like_jsonl(head):
        spans = _jsonl_spans(stream, source=source, limits=limits, skips=skips)
    else:
        spans = _document_spans(stream, head, source=source, limits=limits, skips=skips)
    for span in spans:
        collector.add(span)
    runs = collector.runs()
    if not runs:
        raise skips.first or TraceError("no spans in the file", source=source)
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


def _jsonl_spans(stream: IO[bytes], *, source: str, limits: Limits, skips: Skips) -> Iterator[Span]:
    reader = JsonlReader(stream, source=source, limits=limits, skips=skips)
    for line, value in reader:
        if not (is_request(value) or is_span_record(value)):
            reader.reject(
                TraceError("not an OTLP request or span record", source=source, line=line)
            )
            continue
        yield from spans_from_request(value, rejected=_skip_to(skips, source=source, line=line))


def _document_spans(
    stream: IO[bytes], head: bytes, *, source: str, limits: Limits, skips: Skips
) -> Iterator[Span]:
    values = head_values(head, max_lines=1)
    first = values[0] if values else None
    if isinstance(first, list):
        items = iter_document(stream, "item", source=source, limits=limits)
        for index, item in enumerate(items):
            rejected = _skip_to(skips, source=source, where=f"[{index}]")
            yield from spans_from_request(item, rejected=rejected)
        return
    key = (
        "resource_spans"
        if isinstance(first, dict) and "resource_spans" in first
        else "resourceSpans"
    )
    items = iter_document(stream, f"{key}.item", source=source, limits=limits)
    for index, resource_spans in enumerate(items):
        rejected = _skip_to(skips, source=source, where=f"{key}[{index}]")
        yield from spans_of_resource(resource_spans, rejected=rejected)
