"""OpenAI Agents SDK trace export: `trace` and `trace.span` objects (format notes §3.14).

Files: JSONL of exported objects (what a custom TracingProcessor writes), the ingest body
`{"data": [...]}` (one per line, or one document), or a JSON array. Third-party processors
wrap the objects as `{"event": "span_end", "timestamp", "span": {...}}` (or `"trace"`):
they are unwrapped. Documents stream item by item.

Objects -> runs: one run per `trace_id` (in order of first appearance); the `trace` object
names it (`workflow_name`) and gives `group_id` and `metadata`. Spans are exported when they
end, so children come before their parents: steps are ordered by `started_at` (stable). The
tree: step id = span id, parent_id = `parent_id` (null: a child of the trace, a root).

`span_data.type` -> step:
- `function` -> tool_call: tool = `name`, args = `input` (JSON text, parsed), result =
  `output` (text as given: Python repr for non-strings). Status "error" when the span has an
  `error` (the tool raised, "Error running tool", a rejected approval); a tool that *returns*
  an error string has no `error`: the shared text rules read `output`.
- `generation` -> assistant step: text of the `output` messages, tokens from `usage`
  (`input_tokens`, `output_tokens`), the model to metadata; `response` -> assistant step with
  its usage (the Responses bodies are not exported).
- `agent`, `handoff`, `guardrail`, `custom` (incl. `sdk_span_type` task/turn), `mcp_tools` and
  any other type -> a `system` step whose text says what happened ("handoff triage → billing",
  "guardrail pii: triggered"), so the tree shows it; never a tool call. An `error` on such a
  span ("Max turns exceeded") is added to the run's warnings and the step's text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_json_text, parse_time
from .detect import Claim, Sample, sample_of, share
from .errors import Skips, TraceError, too_many_held
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import JsonlReader, Limits, first_byte, iter_document, looks_like_jsonl, stream_head

name = "openai-agents"
label = "OpenAI Agents SDK trace export"

OBJECTS = {"trace", "trace.span"}
WRAPPER_KEYS = ("span", "trace", "item")


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict) and value.get("object") not in OBJECTS:
        for key in WRAPPER_KEYS:
            inner = value.get(key)
            if isinstance(inner, dict) and inner.get("object") in OBJECTS:
                return inner
    return value


def _is_object(value: Any) -> bool:
    value = _unwrap(value)
    return isinstance(value, dict) and value.get("object") in OBJECTS


def claim(sample: Sample) -> Claim:
    """Records (or a `data` list) of `{object: "trace" | "trace.span", ...}`."""
    records = sample.records
    top = sample.top
    if isinstance(top, dict) and isinstance(top.get("data"), list):
        records = top["data"][:200]
    elif len(records) == 1 and isinstance(records[0], list):
        records = records[0][:200]
    elif sample.layout == "jsonl" and any(isinstance(r, dict) and "data" in r for r in records):
        records = [item for r in records if isinstance(r, dict) for item in r.get("data") or []]
    fit = share(records, _is_object)
    if not fit:
        return Claim.no('no `{object: "trace.span"}` or `{object: "trace"}` record')
    spans = sum(1 for r in records if isinstance(_unwrap(r), dict) and "span_data" in _unwrap(r))
    return Claim(
        0.95 * fit, f"{fit:.0%} of the records are Agents SDK traces/spans ({spans} spans)"
    )


class _Trace:
    def __init__(self, trace_id: str) -> None:
        self.run = Run(id=trace_id, format=name)


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per trace id, in order of first appearance."""
    skips = Skips()
    traces: dict[str, _Trace] = {}
    held = 0
    for where, value in _values(stream, source=source, limits=limits, skips=skips):
        value = _unwrap(value)
        if not isinstance(value, dict) or value.get("object") not in OBJECTS:
            kind = value.get("object") if isinstance(value, dict) else type(value).__name__
            skips.add(TraceError(f"not a trace or span object ({kind!r})", source=source, **where))
            continue
        trace_id = value.get("trace_id") if value["object"] == "trace.span" else value.get("id")
        if not isinstance(trace_id, str) or not trace_id:
            skips.add(TraceError("no trace id", source=source, field="trace_id", **where))
            continue
        trace = traces.get(trace_id) or traces.setdefault(trace_id, _Trace(trace_id))
        if value["object"] == "trace":
            _describe(trace.run, value)
            continue
        try:
            step = _step(value, trace.run, limits)
        except TraceError as exc:
            skips.add(TraceError(exc.reason, source=source, field=exc.field, **where))
            continue
        held += 1
        if held > limits.max_held_steps:
            raise too_many_held(limits.max_held_steps, source=source, line=where.get("line"))
        add_step(trace.run, step, limits=limits, source=source, line=where.get("line"))
    for trace in traces.values():
        if not trace.run.steps:
            skips.note(f"{source}: trace {trace.run.id!r} has no spans in this file; left out")
    if not any(trace.run.steps for trace in traces.values()):
        raise skips.first or TraceError("no spans in this file", source=source)
    for trace in (trace for trace in traces.values() if trace.run.steps):
        trace.run.steps.sort(key=lambda step: (step.started_at is None, step.started_at or 0))
        yield finish_run(skips.apply(trace.run))
        skips = Skips()


def _values(
    stream: IO[bytes], *, source: str, limits: Limits, skips: Skips
) -> Iterator[tuple[dict[str, Any], Any]]:
    """Every exported object with where it came from (line, or field of the document)."""
    if not first_byte(stream):
        raise TraceError("empty file", source=source)
    head = stream_head(stream)
    if looks_like_jsonl(head) or not _is_batch(sample_of(head).top):
        # JSONL, or values one after another whose first is longer than the head
        values = (
            JsonlReader(stream, source=source, limits=limits, skips=skips)
            if looks_like_jsonl(head)
            else enumerate(
                iter_document(stream, "", source=source, limits=limits, multiple_values=True), 1
            )
        )
        for line, value in values:
            items = value.get("data") if isinstance(value, dict) else None
            if isinstance(items, list) and not _is_object(value):
                for item in items:
                    yield {"line": line}, item
            elif isinstance(value, list):
                for item in value:
                    yield {"line": line}, item
            else:
                yield {"line": line}, value
        return
    prefix = "item" if first_byte(stream) == b"[" else "data.item"
    for index, item in enumerate(iter_document(stream, prefix, source=source, limits=limits)):
        field = f"[{index}]" if prefix == "item" else f"data[{index}]"
        yield {"field": field}, item


def _is_batch(top: Any) -> bool:
    """A document that is one array, or one `{"data": [...]}` body (read item by item)."""
    return isinstance(top, list) or (isinstance(top, dict) and isinstance(top.get("data"), list))


def _describe(run: Run, trace: dict) -> None:
    workflow = trace.get("workflow_name")
    if isinstance(workflow, str) and workflow:
        run.name = workflow[:200]
    for key in ("group_id", "metadata"):
        if trace.get(key) is not None:
            run.metadata[key] = trace[key]


def _step(span: dict, run: Run, limits: Limits) -> Step:
    data = span.get("span_data")
    if not isinstance(data, dict):
        raise TraceError("a span needs a `span_data` object", field="span_data")
    kind = data.get("type")
    fields = {
        "id": span.get("id") if isinstance(span.get("id"), str) else None,
        "parent_id": span.get("parent_id") if isinstance(span.get("parent_id"), str) else None,
        "started_at": parse_time(span.get("started_at")),
    }
    ended = parse_time(span.get("ended_at"))
    error = span.get("error")
    if kind == "function":
        step = tool_step(
            tool=str(data.get("name") or "(unknown)"),
            args=parse_json_text(data.get("input")),
            limits=limits,
            **fields,
        )
        output = data.get("output")
        result = output if output is not None or not error else _error_text(error)
        failed = bool(error) or text_errors.is_error(output)
        set_result(step, result, error=failed, limits=limits, ended_at=ended)
        return step
    if kind in ("generation", "response"):
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        model = data.get("model")
        if isinstance(model, str) and model:
            run.metadata.setdefault("model", model)
        text = content_text(_output_text(data.get("output")))
        return text_step(
            "assistant",
            text,
            limits=limits,
            tokens_in=number(usage.get("input_tokens", usage.get("prompt_tokens"))),
            tokens_out=number(usage.get("output_tokens", usage.get("completion_tokens"))),
            ended_at=ended,
            **fields,
        )
    text = _describe_span(kind, data)
    if error:
        message = _error_text(error)
        text += f" — error: {message}"
        run.warnings.append(f"span {fields['id']}: {message}"[:500])
    return text_step("system", text, limits=limits, ended_at=ended, **fields)


def _output_text(output: Any) -> Any:
    if isinstance(output, list):
        return [item.get("content") if isinstance(item, dict) else item for item in output]
    return output


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = str(error.get("message") or "error")
        detail = error.get("data")
        if isinstance(detail, dict) and detail.get("error"):
            message += f": {detail['error']}"
        return message
    return str(error)


def _describe_span(kind: Any, data: dict) -> str:
    if kind == "agent":
        return f"agent {data.get('name') or ''}".strip()
    if kind == "handoff":
        return f"handoff {data.get('from_agent') or '?'} → {data.get('to_agent') or '?'}"
    if kind == "guardrail":
        state = "triggered" if data.get("triggered") else "passed"
        return f"guardrail {data.get('name') or ''}: {state}"
    if kind == "custom":
        inner = data.get("data") if isinstance(data.get("data"), dict) else {}
        sdk = inner.get("sdk_span_type")
        if sdk == "turn":
            return f"turn {inner.get('turn', '')} {inner.get('agent_name') or ''}".strip()
        return f"{sdk or 'custom'} {data.get('name') or ''}".strip()
    if kind == "mcp_tools":
        return f"mcp tools {data.get('server') or ''}".strip()
    return str(kind or "span")
