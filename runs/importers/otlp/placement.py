"""Where log records and detail spans go once every span of a file or buffer is read, and
the calls rebuilt from the messages on model spans (`rebuild_calls`).

Written from the format notes §3.23, not from a real export:

- Detail spans (Claude Code's `claude_code.tool.execution`, `claude_code.tool.blocked_on_user`)
  say how their parent tool call went: `success: false` / `error` fail it, a `reject`
  decision fails it with "rejected (<source>)"; they make no step of their own.
- Claude Code events (log records `tool_result`, `tool_decision`, `user_prompt`,
  `api_request`, `api_error`, the name in `event.name`, or "claude_code.<name>" in the body):
  a `tool_result` or `tool_decision` joins the `claude_code.tool` step with its `tool_use_id`
  (arguments from `tool_input` / `tool_parameters` when the span has none; `success: "false"`
  and `error` fail it; a rejection fails it). Without such a span (a logs-only export) a
  `tool_result` is the tool call itself: tool, arguments, status, error as its result; a
  rejected `tool_decision` is a failed call. `user_prompt` is a user step (the prompt only with
  OTEL_LOG_USER_PROMPTS), `api_request` an assistant step with tokens and cost (only when the
  run has no `claude_code.llm_request` spans, which say the same), `api_error` a failed one.
- GenAI events: `gen_ai.choice` (body `{index, finish_reason, message}`) and
  `gen_ai.client.inference.operation.details` (`gen_ai.output.messages`) are the model's
  output: they fill the text of their model span (by span id), or are assistant steps of their
  own; the tool calls in them become tool-call steps (id = the call id), which the kit's
  merge (kit.finish_run) joins to a tool span with that call id; the result goes to the
  span. Results come by call id from `gen_ai.tool.message` (body `{content, id}`) and from
  `tool_call_response` parts of `gen_ai.input.messages`; such a result carries no failure
  flag, so its text decides by the common text rules (`Error: FileNotFoundError…` fails).
  Per-message input events
  (`gen_ai.system.message`, `gen_ai.user.message`, `gen_ai.assistant.message`) repeat the
  history on every call: they only supply results, never steps.
- A record in a span whose trace is known goes to that trace's run, as a child of its span;
  otherwise to the run of its session (`session.id` …), else to its trace id's run, else to
  one run of loose records. Records are taken in order of (time, `event.sequence`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detection.model import Step

from .. import text_errors
from ..content import parse_json_text
from ..reading import clip_json, clip_strings
from .dialects import DIALECTS
from .logs import LogEvent
from .values import arguments, failure, message_parts, text_of

if TYPE_CHECKING:
    from .steps import Collector

LOOSE = "logs:"  # the trace key of records placed by session (or of loose records)
CLAUDE_CODE = next(d for d in DIALECTS if d.name == "claude_code")
CLAUDE_EVENTS = {"tool_result", "tool_decision", "user_prompt", "api_request", "api_error"}
GENAI_OUTPUTS = {"gen_ai.choice", "gen_ai.client.inference.operation.details"}


def _tool_steps(collector: Collector) -> dict[tuple[str, str], Step]:
    """Return the tool steps by (run key, call id)."""
    found: dict[tuple[str, str], Step] = {}
    for trace_id, steps in collector.traces.items():
        for step in steps:
            call_id = collector.call_ids.get(id(step))
            if step.kind == "tool_call" and call_id:
                found.setdefault((collector.run_key(trace_id), call_id), step)
    return found


def _by_span(collector: Collector) -> dict[tuple[str, str], Step]:
    return {
        (trace_id, step.id): step
        for trace_id, steps in collector.traces.items()
        for step in steps
        if step.id
    }


def _fail(step: Step, reason: str, collector: Collector) -> None:
    step.status = "error"
    if step.result in (None, ""):
        step.result = clip_strings(reason, collector.limits.max_value_chars)


def _outcome(step: Step, attrs: dict[str, Any], collector: Collector) -> None:
    """Apply what a detail span or Claude Code event says about a tool call."""
    if str(attrs.get("decision", "")).lower() == "reject":
        _fail(step, f"rejected ({attrs.get('source') or 'user'})", collector)
        return
    reason = failure(attrs, CLAUDE_CODE)
    if reason is not None:
        _fail(step, reason, collector)
    if step.args is None:
        args = arguments(attrs.get("tool_input") or attrs.get("tool_parameters"))
        step.args = clip_json(args, collector.limits) if args not in (None, "") else None
    if step.result is None:
        output = attrs.get("tool_output") or attrs.get("tool_result") or attrs.get("output")
        if output is not None:
            step.result = clip_json(output, collector.limits)


def fold_details(collector: Collector) -> None:
    """Fold each detail span into its parent tool step (no step of its own)."""
    spans = _by_span(collector)
    for span in collector.details:
        parent = spans.get((span.trace_id, span.parent_id or ""))
        if parent is not None and parent.kind == "tool_call":
            _outcome(parent, span.attrs, collector)
            if span.error and parent.status != "error":
                _fail(parent, span.message or "failed", collector)
    collector.details.clear()


class _Placer:
    """Places the log records of one collector, in order."""

    def __init__(self, collector: Collector) -> None:
        self.c = collector
        self.spans = _by_span(collector)
        self.tools = _tool_steps(collector)
        self.results: dict[tuple[str, str], Any] = {}  # (run key, call id) -> result
        self.llm_spans = {
            collector.run_key(t)
            for t, steps in collector.traces.items()
            for s in steps
            if s.kind == "assistant" and "claude_code" in collector.dialects.get(t, ())
        }
        self.tool_spans = {
            collector.run_key(t) for t, steps in collector.traces.items()
            for s in steps if s.kind == "tool_call"
        }  # fmt: skip

    def home(self, event: LogEvent) -> tuple[str, str | None]:
        """Return (trace key, parent span id) of the steps an event makes."""
        c = self.c
        if event.trace_id and event.trace_id in c.traces:
            parent = event.span_id if (event.trace_id, event.span_id) in self.spans else None
            return event.trace_id, parent
        if event.session:
            key = LOOSE + event.session
            c.trace_session.setdefault(key, event.session)
            if event.trace_id:  # a trace not seen as spans: its run is the session's
                c.trace_session.setdefault(event.trace_id, event.session)
            return key, None
        if event.trace_id:
            return event.trace_id, None
        return LOOSE, None

    def new_step(self, event: LogEvent, kind: str) -> tuple[Step, str]:
        key, parent = self.home(event)
        steps = self.c.traces.setdefault(key, [])
        step = Step(seq=len(steps), kind=kind, parent_id=parent, started_at=event.time)
        steps.append(step)
        return step, self.c.run_key(key)

    def run_of(self, event: LogEvent) -> str:
        key, _ = self.home(event)
        return self.c.run_key(key)

    # --- Claude Code events

    def claude(self, event: LogEvent) -> None:
        attrs, name = event.attrs, event.name
        if name in ("tool_result", "tool_decision"):
            self.claude_tool(event)
        elif name == "user_prompt":
            step, _ = self.new_step(event, "user")
            prompt = attrs.get("prompt")
            step.text = clip_strings(
                str(prompt) if prompt else f"(a prompt of {attrs.get('prompt_length', '?')} "
                "characters, not logged)", self.c.limits.max_value_chars
            )  # fmt: skip
        elif name == "api_request":
            if self.run_of(event) in self.llm_spans:
                return  # the llm_request spans say the same
            step, _ = self.new_step(event, "assistant")
            step.tokens_in = _int(attrs.get("input_tokens"))
            step.tokens_out = _int(attrs.get("output_tokens"))
            step.cost = _float(attrs.get("cost_usd"))
            if attrs.get("model"):
                self.c.meta.setdefault(self.home(event)[0], {}).setdefault(
                    "model", str(attrs["model"])
                )
        elif name == "api_error":
            step, _ = self.new_step(event, "assistant")
            step.status = "error"
            code = attrs.get("status_code")
            step.text = clip_strings(
                f"API error{f' {code}' if code else ''}: {attrs.get('error', '')}",
                self.c.limits.max_value_chars,
            )

    def claude_tool(self, event: LogEvent) -> None:
        attrs = event.attrs
        call_id = str(attrs.get("tool_use_id") or "")
        run = self.run_of(event)
        step = self.tools.get((run, call_id)) if call_id else None
        if step is None and event.trace_id and event.span_id:
            spanned = self.spans.get((event.trace_id, event.span_id))
            step = spanned if spanned is not None and spanned.kind == "tool_call" else None
        if step is None:
            rejected = str(attrs.get("decision", "")).lower() == "reject"
            if event.name == "tool_decision" and not rejected:
                return  # an accepted call: its tool_result (or span) is the call
            step, run = self.new_step(event, "tool_call")
            step.tool = str(attrs.get("tool_name") or "(unknown)")[:200]
            step.status = "ok"
            if call_id:
                step.id = call_id
                self.tools[(run, call_id)] = step
        _outcome(step, attrs, self.c)

    # --- GenAI events

    def genai_output(self, event: LogEvent) -> None:
        body = event.body if isinstance(event.body, dict) else {}
        if event.name == "gen_ai.choice":
            message = body.get("message") if isinstance(body.get("message"), dict) else body
            text = text_of(message.get("content"))
            calls = [_openai_call(call) for call in _list(message.get("tool_calls"))]
        else:
            output = event.attrs.get("gen_ai.output.messages", body.get("gen_ai.output.messages"))
            text = (
                "\n".join(str(p.get("content", "")) for p in message_parts(output, "text")) or None
            )
            calls = [
                {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
                for p in message_parts(output, "tool_call")
            ]
            self.genai_inputs(event)
        spanned = self.spans.get((event.trace_id or "", event.span_id or ""))
        if spanned is not None and spanned.kind == "assistant":
            if spanned.text is None and text:
                spanned.text = clip_strings(text, self.c.limits.max_value_chars)
            parent, run = spanned.id, self.c.run_key(event.trace_id or "")
        else:
            step, run = self.new_step(event, "assistant")
            step.text = clip_strings(text, self.c.limits.max_value_chars)
            parent = step.parent_id
        for call in calls:
            call_id = str(call.get("id") or "")
            if not call_id and run in self.tool_spans:
                continue  # no id to join it by: the run's tool spans are its calls
            step, run = self.new_step(event, "tool_call")
            step.parent_id = parent
            step.tool = str(call.get("name") or "(unknown)")[:200]
            step.args = clip_json(arguments(call.get("arguments")), self.c.limits)
            step.status = "ok"
            if call_id:  # a tool span with this id, if any, is joined by the kit's merge
                step.id = call_id
                first = self.tools.setdefault((run, call_id), step) is step
                if first and (result := self.results.get((run, call_id))) is not None:
                    _rebuilt_result(step, result, self.c)

    def genai_inputs(self, event: LogEvent) -> None:
        body = event.body if isinstance(event.body, dict) else {}
        run = self.run_of(event)
        if event.name == "gen_ai.tool.message":
            self.result(
                run, body.get("id") or event.attrs.get("gen_ai.tool.call.id"), body.get("content")
            )
            return
        if event.name == "gen_ai.assistant.message":
            return  # history: the call was the output of an earlier model call
        messages = event.attrs.get("gen_ai.input.messages", body.get("gen_ai.input.messages"))
        for part in message_parts(messages, "tool_call_response"):
            self.result(run, part.get("id"), part.get("response", part.get("result")))

    def result(self, run: str, call_id: Any, content: Any) -> None:
        if not call_id or content is None:
            return
        key = (run, str(call_id))
        self.results.setdefault(key, content)
        step = self.tools.get(key)
        if step is not None and step.result is None:
            _rebuilt_result(step, content, self.c)


def _rebuilt_result(step: Step, content: Any, collector: Collector) -> None:
    """Give a call the result rebuilt from chat messages (which carry no failure flag): it
    failed when its text reads as an error by the common text rules."""
    value = parse_json_text(content) if isinstance(content, str) else content
    step.result = clip_json(value, collector.limits)
    if text_errors.is_error(value if isinstance(value, str) else text_of(value)):
        step.status = "error"


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _list(value: Any) -> list[Any]:
    value = parse_json_text(value)
    return value if isinstance(value, list) else []


def _openai_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        return {}
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    return {
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments"),
    }


def _is_claude(event: LogEvent) -> bool:
    return event.name in CLAUDE_EVENTS and (
        str(event.resource.get("service.name", "")).startswith("claude")
        or isinstance(event.body, str)
        and event.body.startswith("claude_code.")
        or "tool_name" in event.attrs
        or "prompt.id" in event.attrs
        or event.name in ("user_prompt", "api_request", "api_error")
    )


def rebuild_calls(collector: Collector) -> None:
    """Rebuild calls from the messages on model spans (the GenAI instrumentations with content
    on spans, no tool span of their own): each `tool_call` part of a span's
    `gen_ai.output.messages` is a tool step beside that span, where a tool span would be (its
    batch is the span; id = the call id; the kit's merge
    joins it to a tool span with that id), and each `tool_call_response` part of a later span's
    `gen_ai.input.messages` is the result of the call with its id. A call without an id is
    left to the tool spans when its run has any (nothing to join it by). A call with an id
    whose run has tool spans without one (OpenLLMetry's `@tool` spans) is one of those spans,
    taken in order among the spans of its tool whose arguments agree: the span gets the id,
    and no second step is made."""
    if not collector.chats:
        return
    tools = _tool_steps(collector)
    with_spans = {
        collector.run_key(t) for t, steps in collector.traces.items()
        for s in steps if s.kind == "tool_call"
    }  # fmt: skip
    idless: dict[tuple[str, str], list[Step]] = {}  # (run, tool) -> tool spans with no call id
    for trace_id, steps in collector.traces.items():
        for step in steps:
            if step.kind == "tool_call" and id(step) not in collector.call_ids:
                idless.setdefault((collector.run_key(trace_id), step.tool or ""), []).append(step)
    results: dict[tuple[str, str], Any] = {}
    for trace_id, model, attrs in collector.chats:
        run = collector.run_key(trace_id)
        for part in message_parts(attrs.get("gen_ai.input.messages"), "tool_call_response"):
            if part.get("id"):
                content = part.get("response", part.get("result"))
                if content is not None:
                    results.setdefault((run, str(part["id"])), content)
        for part in message_parts(attrs.get("gen_ai.output.messages"), "tool_call"):
            call_id = str(part.get("id") or "")
            if not call_id and run in with_spans:
                continue
            name = str(part.get("name") or "(unknown)")[:200]
            span = _take_span(idless.get((run, name)), arguments(part.get("arguments")))
            if span is not None and call_id:
                collector.call_ids[id(span)] = call_id
                tools.setdefault((run, call_id), span)
                continue
            steps = collector.traces[trace_id]
            step = Step(seq=len(steps), kind="tool_call", id=call_id or None,
                        parent_id=model.parent_id, started_at=model.ended_at or model.started_at)  # fmt: skip
            step.tool = str(part.get("name") or "(unknown)")[:200]
            step.args = clip_json(arguments(part.get("arguments")), collector.limits)
            steps.append(step)
            if call_id:
                collector.call_ids[id(step)] = call_id
                tools.setdefault((run, call_id), step)
    for key, content in results.items():
        step = tools.get(key)
        if step is not None and step.result is None:
            _rebuilt_result(step, content, collector)


def _take_span(spans: list[Step] | None, args: Any) -> Step | None:
    """Take the first tool span of the list whose arguments agree with `args` (equal, or one
    of them unknown); None when none does."""
    for index, span in enumerate(spans or ()):
        if span.args is None or args is None or span.args == args:
            return spans.pop(index) if spans is not None else None
    return None


def place_logs(collector: Collector) -> None:
    """Turn the collector's log records into steps or join them to their spans (see above)."""
    if not collector.logs:
        return
    placer = _Placer(collector)
    events = sorted(
        collector.logs,
        key=lambda e: (
            e.time if e.time is not None else float("inf"),
            e.seq if e.seq is not None else 0,
        ),
    )
    # results first, so calls made from outputs find them whatever the order
    for event in events:
        if event.name.startswith("gen_ai.") and event.name not in GENAI_OUTPUTS:
            placer.genai_inputs(event)
    for event in events:
        if _is_claude(event):
            placer.claude(event)
        elif event.name in GENAI_OUTPUTS:
            placer.genai_output(event)
    collector.logs.clear()
