"""The same tool arguments give the same call signature through every importer family.

Each format gets a minimal file with one call to tool "f" carrying the argument value: as
the value itself wherever the format holds a JSON value there (for a string, that string is
what a JSON-text field holds), and, where the format carries arguments as JSON text (OpenAI
`arguments`, OTLP attributes, tree `args`), also as the JSON text of an object or array.
JSON text of a bare scalar is left out on purpose: "42" in an `arguments` field is the text
"42" (see `runs.importers.content.parse_json_text`), the same as the string "42" anywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection.keys import call_signature
from runs.importers import TraceError, iter_runs

TRICKY_TEXT = st.sampled_from(
    ["42", "true", "null", '"x"', "1e400", '{"a": 1}', " [1, 2] ", '{"ts": 1, "q": "x"}',
     "{broken", "[NaN]", "[1]}", "ls -la", "./a//b/", "  spaced   out  ", ""]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | TRICKY_TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
#: A call without arguments is not an argument value: harness formats store it as {}.
ARGUMENTS = VALUES.filter(lambda value: value is not None)


def jsonl(*records: Any) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def document(value: Any) -> bytes:
    return json.dumps(value).encode()


def any_value(value: Any) -> dict[str, Any]:
    """Return the OTLP/JSON AnyValue of a JSON value."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(item) for item in value]}}
    return {
        "kvlistValue": {"values": [{"key": k, "value": any_value(v)} for k, v in value.items()]}
    }


def native(args: Any) -> bytes:
    return jsonl({"type": "tool_call", "tool": "f", "args": args})


def chat(args: Any) -> bytes:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}
    return document([{"role": "assistant", "content": None, "tool_calls": [call]}])


def responses(args: Any) -> bytes:
    return document([{"type": "function_call", "call_id": "c", "name": "f", "arguments": args}])


def anthropic(args: Any) -> bytes:
    block = {"type": "tool_use", "id": "c", "name": "f", "input": args}
    return document({"messages": [{"role": "assistant", "content": [block]}]})


def tree(args: Any) -> bytes:
    return document({"type": "tool", "name": "f", "args": args, "children": []})


def claude_code(args: Any) -> bytes:
    block = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": args}
    message = {"id": "msg_1", "role": "assistant", "content": [block]}
    return jsonl(
        {"type": "assistant", "uuid": "u1", "parentUuid": None, "sessionId": "s1",
         "timestamp": "2025-01-01T00:00:00Z", "message": message}
    )  # fmt: skip


def codex(args: Any) -> bytes:
    call = {"type": "function_call", "name": "f", "arguments": args, "call_id": "c"}
    return jsonl(
        {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s"}},
        {"timestamp": "2025-01-01T00:00:01Z", "type": "response_item", "payload": call},
    )


def gemini_stream(args: Any) -> bytes:
    return jsonl(
        {"type": "init", "session_id": "s", "timestamp": "2025-01-01T00:00:00Z"},
        {"type": "tool_use", "tool_name": "f", "tool_id": "t1", "parameters": args,
         "timestamp": "2025-01-01T00:00:01Z"},
    )  # fmt: skip


def mini_swe_agent(args: Any) -> bytes:
    call = {"id": "c", "function": {"name": "f", "arguments": args}}
    messages = [
        {"role": "system", "content": "you are an agent"},
        {"role": "user", "content": "the task"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    return document({"trajectory_format": "mini-swe-agent-1.1", "messages": messages})


def swe_agent(args: Any) -> bytes:
    call = {"id": "c", "function": {"name": "f", "arguments": args}}
    history = [
        {"role": "user", "content": "the task"},
        {"role": "assistant", "content": "", "action": "f", "tool_calls": [call]},
    ]
    step = {"action": "f", "observation": "done", "thought": ""}
    return document({"environment": "e", "trajectory": [step], "history": history, "info": {}})


def otlp(args: Any) -> bytes:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "f",
        "gen_ai.tool.call.arguments": args,
    }
    span = {
        "traceId": "1" * 32,
        "spanId": "2" * 16,
        "name": "execute_tool f",
        "attributes": [{"key": k, "value": any_value(v)} for k, v in attrs.items()],
    }
    return document({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


def tau2(args: Any) -> bytes:
    call = {"id": "c", "name": "f", "arguments": args, "requestor": "assistant"}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    sim = {"id": "s", "task_id": "t", "termination_reason": "user_stop", "messages": [message]}
    return document({"info": {}, "tasks": [], "simulations": [sim]})


def openai_agents(args: Any) -> bytes:
    data = {"type": "function", "name": "f", "input": args, "output": "ok"}
    span = {"object": "trace.span", "id": "span_1", "trace_id": "trace_1", "span_data": data}
    return jsonl(span)


def copilot_cli(args: Any) -> bytes:
    start = {"toolCallId": "c", "toolName": "f", "arguments": args}
    return jsonl({"type": "tool.execution_start", "data": start, "id": "1", "parentId": None})


def opencode(args: Any) -> bytes:
    state = {"status": "completed", "input": args, "output": "ok"}
    part = {"type": "tool", "callID": "c", "tool": "f", "state": state}
    message = {"info": {"id": "msg_1", "role": "assistant"}, "parts": [part]}
    return document({"info": {"id": "ses_1"}, "messages": [message]})


def claude_code_hooks(args: Any) -> bytes:
    event = {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "f"}
    return jsonl(event | {"tool_input": args, "tool_use_id": "t"})


def cursor(args: Any) -> bytes:
    return jsonl({"role": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "f", "input": args}]}})  # fmt: skip


def pi(args: Any) -> bytes:
    block = {"type": "toolCall", "id": "t1", "name": "f", "arguments": args}
    return jsonl(
        {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/"},
        {"type": "message", "id": "a1", "parentId": None, "message": {"role": "assistant",
         "content": [block]}},
    )  # fmt: skip


def atif(args: Any) -> bytes:
    call = {"tool_call_id": "c", "function_name": "f", "arguments": args}
    step = {"step_id": 1, "source": "agent", "message": "", "tool_calls": [call]}
    return document({"schema_version": "ATIF-v1.4", "agent": {"name": "a"}, "steps": [step]})


def managed_agents(args: Any) -> bytes:
    return jsonl({"id": "sevt_1", "type": "agent.tool_use", "name": "f", "input": args,
                  "processed_at": "2026-01-01T00:00:00Z"})  # fmt: skip


def inspect_ai(args: Any) -> bytes:
    event = {"event": "tool", "id": "c", "function": "f", "arguments": args, "result": ""}
    return document({"version": 2, "eval": {"task": "t", "model": "m"},
                     "samples": [{"id": 1, "epoch": 1, "events": [event]}]})  # fmt: skip


def langsmith(args: Any) -> bytes:
    return document([{"id": "r", "run_type": "tool", "name": "f", "trace_id": "r",
                      "start_time": "2025-01-01T00:00:00", "inputs": args}])  # fmt: skip


#: format name -> (file builder, whether the format carries arguments as JSON text).
#: Aider is left out: its calls are edit blocks and shell commands, with no argument value.
FORMATS = {
    "native": (native, False),
    "chat": (chat, True),
    "responses": (responses, True),
    "anthropic": (anthropic, False),
    "tree": (tree, True),
    "claude-code": (claude_code, False),
    "codex": (codex, True),
    "gemini-stream": (gemini_stream, False),
    "mini-swe-agent": (mini_swe_agent, True),
    "swe-agent": (swe_agent, True),
    "otlp": (otlp, True),
    "tau2": (tau2, False),
    "openai-agents": (openai_agents, True),
    "copilot-cli": (copilot_cli, True),
    "opencode": (opencode, False),
    "claude-code-hooks": (claude_code_hooks, True),
    "cursor": (cursor, False),
    "pi": (pi, False),
    "atif": (atif, False),
    "managed-agents": (managed_agents, False),
    "inspect-ai": (inspect_ai, False),
    "langsmith": (langsmith, False),
}


def signature(format: str, data: bytes) -> str:
    """Return the call signature of the one tool call in a one-call file of this format."""
    (run,) = iter_runs(data, source=f"t.{format}", format=format)
    (call,) = (step for step in run.steps if step.kind == "tool_call")
    return call_signature(call.tool, call.args)


def signatures(value: Any) -> dict[str, str]:
    """Return the signature of the value's call in every format, and as JSON text where a
    format carries JSON text and the value is an object or an array."""
    found = {}
    for format, (build, json_text) in FORMATS.items():
        found[format] = signature(format, build(value))
        if json_text and isinstance(value, dict | list):
            found[f"{format} (JSON text)"] = signature(format, build(json.dumps(value)))
    return found


@settings(max_examples=150, deadline=None)
@given(ARGUMENTS)
def test_one_argument_value_gives_one_signature_in_every_format(value):
    found = signatures(value)
    expected = call_signature("f", value)
    assert {name: sig for name, sig in found.items() if sig != expected} == {}


def test_bare_scalars_in_json_text_stay_text_everywhere():
    """ "42" is the text "42" in every family, never the number 42 in some of them."""
    for text in ("42", "true", "null", '"x"'):
        assert set(signatures(text).values()) == {call_signature("f", text)}
    assert call_signature("f", "42") != call_signature("f", 42)


# --- the edge cases, for the formats added after tests/importers/test_limits.py was written

LATER = ["tau2", "openai-agents", "copilot-cli", "opencode", "claude-code-hooks", "cursor"]


@pytest.mark.parametrize("format", LATER)
def test_empty_truncated_invalid_utf8_deep_and_huge_inputs(format):
    build, _ = FORMATS[format]
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"", source="t", format=format))
    whole = build({"q": "x"})
    with pytest.raises(TraceError):  # cut in the middle of the only record
        list(iter_runs(whole[: len(whole) // 2], source="t", format=format))
    with pytest.raises(TraceError, match="invalid UTF-8|invalid JSON"):
        list(iter_runs(build({"q": "x"}).replace(b'"x"', b'"\xff"'), source="t", format=format))
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    with pytest.raises(TraceError, match="nested deeper"):
        list(iter_runs(build({"q": deep}), source="t", format=format))
    (run,) = iter_runs(build({"q": "y" * 3_000_000}), source="t", format=format)
    (call,) = (step for step in run.steps if step.kind == "tool_call")
    assert len(call.args["q"]) < 1_100_000 and call.args["q"].endswith("chars]")
