"""What agent frameworks put in OpenInference's generic `input.value` / `output.value`, read
back into a call's arguments, result and status (format notes §3.28, checked against the
spans of langgraph 1.2 with openinference-instrumentation-langchain 0.1.80 and smolagents
1.26 with openinference-instrumentation-smolagents 0.1.43).

- Decorator wrappers (smolagents, Traceloop, AgentOps): `{"args": [...], "kwargs": {...}}`,
  smolagents adding `"sanitize_inputs_outputs": true`, is read as the keyword arguments; a
  lone positional object is the arguments themselves (smolagents calls a tool with one dict
  that way); other positional values stay under "args", beside the keyword arguments.
- LangChain/LangGraph tool results are serialised ToolMessages, `{"type": "tool", "data":
  {"content", "name", "tool_call_id", "status"?}}`, alone or inside `{"messages": [...]}`: the
  result is the message's content, failed when its status is "error" or when the content
  reads as an error by the common text rules (`Error: FileNotFoundError(...)`).
- A LangGraph TOOL span's `input.value` is the bare argument when the tool has one parameter
  (`missing.txt`); the `tools` node span above it holds the call as
  `{"__type": "tool_call_with_context", "tool_call": {"name", "args", "id"}}`. `take_contexts`
  gives a tool step whose arguments are not an object those arguments (else the model's
  request with the same call id), and the call id, so the step joins the model span that
  asked for it.
- smolagents' `final_answer` tool is the agent's answer, not a call (`FINAL_ANSWER_TOOLS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import text_errors
from ..content import parse_json_text
from ..reading import clip_json

if TYPE_CHECKING:
    from .steps import Collector

DECORATOR_FLAGS = {"sanitize_inputs_outputs"}  # keys of a wrapper that are no argument
FINAL_ANSWER_TOOLS = {"final_answer"}
TOOL_CONTEXT = "tool_call_with_context"


def call_arguments(parsed: Any) -> Any:
    """Return the arguments inside a decorator's `{"args": [...], "kwargs": {...}}` wrapper
    (see the module rules); any other value unchanged."""
    if not isinstance(parsed, dict) or "kwargs" not in parsed or "args" not in parsed:
        return parsed
    if not set(parsed) <= {"args", "kwargs", *DECORATOR_FLAGS}:
        return parsed
    args, kwargs = parsed["args"], parsed["kwargs"]
    if not isinstance(kwargs, dict) or not isinstance(args, list):
        return parsed
    if not args:
        return kwargs
    if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
        return args[0]
    return {"args": args, **kwargs}


@dataclass(frozen=True, slots=True)
class ToolMessage:
    """A serialised LangChain ToolMessage: what the model read back from a call."""

    content: Any
    error: bool
    call_id: str | None


def _message_data(value: Any) -> dict | None:
    if (
        isinstance(value, dict)
        and value.get("type") == "tool"
        and isinstance(value.get("data"), dict)
    ):
        return value["data"]
    return None


def tool_message(value: Any) -> ToolMessage | None:
    """Return the ToolMessage a result holds (alone, or the last one inside `{"messages":
    [...]}`), or None when it holds none."""
    value = parse_json_text(value)
    data = _message_data(value)
    if data is None and isinstance(value, dict) and isinstance(value.get("messages"), list):
        found = [d for m in value["messages"] if (d := _message_data(m)) is not None]
        data = found[-1] if found else None
    if data is None:
        return None
    content = parse_json_text(data.get("content"))
    said = str(data.get("status") or "").lower() == "error"
    call_id = data.get("tool_call_id")
    return ToolMessage(
        content=content,
        error=said or text_errors.is_error(content),
        call_id=str(call_id) if call_id not in (None, "") else None,
    )


def tool_call_context(value: Any) -> dict | None:
    """Return the `tool_call` ({name, args, id}) of a LangGraph `tools` node's input, or None."""
    value = parse_json_text(value)
    if not isinstance(value, dict) or value.get("__type") != TOOL_CONTEXT:
        return None
    call = value.get("tool_call")
    return call if isinstance(call, dict) else None


def take_contexts(collector: Collector) -> None:
    """Give each tool step under a LangGraph `tools` node its call id, and its arguments when
    its own are not an object (the node's call, else the model's request by call id)."""
    if not collector.contexts:
        return
    for trace_id, steps in collector.traces.items():
        for step in steps:
            if step.kind != "tool_call":
                continue
            call = collector.contexts.get((trace_id, step.parent_id or ""))
            if call is None or call.get("name") not in (None, step.tool):
                continue
            call_id = collector.call_ids.get(id(step)) or call.get("id")
            if call_id and id(step) not in collector.call_ids:
                collector.call_ids[id(step)] = str(call_id)
            if isinstance(step.args, dict):
                continue
            args = call.get("args")
            if not isinstance(args, dict) and call_id:
                requested = collector.requested.get(str(call_id), {})
                args = parse_json_text(requested.get("arguments"))
            if isinstance(args, dict):
                step.args = clip_json(args, collector.limits)
