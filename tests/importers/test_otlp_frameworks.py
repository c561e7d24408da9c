"""Arguments, results and answers as agent frameworks record them in OpenInference spans
(runs/importers/otlp/frameworks.py), read from spans the real frameworks exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import iter_runs
from runs.importers.otlp.frameworks import ToolMessage, call_arguments, tool_message

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def one_run(name: str):
    (run,) = iter_runs(DATA / name)
    return run


def spans_of(name: str) -> list[dict]:
    doc = json.loads((DATA / name).read_text())
    return [s for r in doc["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]]


def attribute(span: dict, key: str):
    return next(
        (a["value"].get("stringValue") for a in span["attributes"] if a["key"] == key), None
    )


def test_langgraph_arguments_keep_their_keys_and_tool_messages_become_their_content():
    run = one_run("otlp_langgraph_openinference.json")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.tool, s.args, s.status) for s in calls] == [
        ("read_file", {"path": "missing.txt"}, "error"),
        ("read_file", {"path": "missing.txt"}, "error"),
        ("search", {"query": "notes", "limit": 2}, "ok"),
    ]
    assert calls[0].result == "[Errno 2] No such file or directory"  # the exception event
    assert calls[2].result == "2 hits for notes"  # the ToolMessage's content, not its JSON
    models = {s.id for s in run.steps if s.kind == "assistant"}
    assert all(s.batch_id in models for s in calls)  # joined by call id to the model's request


def test_the_langgraph_export_writes_a_single_argument_bare():
    tools = [s for s in spans_of("otlp_langgraph_openinference.json") if s["name"] == "read_file"]
    assert [attribute(s, "input.value") for s in tools] == ["missing.txt", "missing.txt"]


def test_smolagents_arguments_are_unwrapped_and_final_answer_is_the_answer():
    run = one_run("otlp_smolagents_openinference.json")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.tool, s.args, s.status) for s in calls] == [
        ("read_file", {"path": "missing.txt"}, "error"),
        ("read_file", {"path": "missing.txt"}, "error"),
        ("search", {"query": "notes", "limit": 2}, "ok"),
    ]
    assert [s.text for s in run.steps if s.kind == "assistant"] == ["I could not read it."]


def test_decorator_wrappers_unwrap_to_the_arguments():
    kwargs = {"path": "a.txt"}
    assert call_arguments({"args": [], "kwargs": kwargs, "sanitize_inputs_outputs": True}) == kwargs
    assert call_arguments({"args": [kwargs], "kwargs": {}}) == kwargs
    assert call_arguments({"args": ["a.txt"], "kwargs": {"n": 1}}) == {"args": ["a.txt"], "n": 1}
    other = {"args": [], "kwargs": {}, "user": "x"}  # a tool's own arguments named so
    assert call_arguments(other) == other


def test_a_tool_message_gives_its_content_status_and_call_id():
    message = {"type": "tool", "data": {"content": "ok", "tool_call_id": "call_0"}}
    assert tool_message(json.dumps(message)) == ToolMessage("ok", False, "call_0")
    failed = {"type": "tool", "data": {"content": "nope", "status": "error"}}
    assert tool_message({"messages": [message, failed]}).error is True
    text = {"type": "tool", "data": {"content": "Error: FileNotFoundError(2, 'x')"}}
    assert tool_message(text).error is True
    assert tool_message({"type": "text", "data": {"content": "x"}}) is None
    assert tool_message("plain text") is None


def test_adk_default_telemetry_names_the_tool_and_leaves_arguments_and_result_unknown():
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "execute_tool get_weather",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "get_weather"}},
            {"key": "gcp.vertex.agent.invocation_id", "value": {"stringValue": "e-1"}},
        ],
    }
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    (run,) = iter_runs(json.dumps(doc).encode(), source="adk.json")
    (step,) = run.steps
    assert (step.tool, step.args, step.result, step.status) == ("get_weather", None, None, "ok")


def chat_spans_export(*, with_tool_span: bool, result: str) -> bytes:
    """Two chat spans with their messages on the span (GenAI content capture on spans): the
    first asks for a call, the second's input holds its result; exported by the real SDK."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("t")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    asked = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "call_7",
              "name": "read_file", "arguments": {"path": "missing.txt"}}]}]  # fmt: skip
    answered = [{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_7", "response": result}]}]  # fmt: skip
    with tracer.start_as_current_span(
        "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                **chat, "gen_ai.output.messages": json.dumps(asked)}):  # fmt: skip
            pass
        if with_tool_span:
            with tracer.start_as_current_span("execute_tool read_file", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                    "gen_ai.tool.call.id": "call_7"}):  # fmt: skip
                pass
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                **chat, "gen_ai.input.messages": json.dumps(answered)}):  # fmt: skip
            pass
    return encode_spans(spans.get_finished_spans()).SerializeToString()


@pytest.mark.parametrize("with_tool_span", [False, True])
def test_calls_rebuilt_from_chat_spans_are_one_step_each_with_their_result(with_tool_span):
    text = "Error: FileNotFoundError(2, 'No such file or directory')"
    data = chat_spans_export(with_tool_span=with_tool_span, result=text)
    (run,) = iter_runs(data, source="chat.pb")
    (step,) = (s for s in run.steps if s.kind == "tool_call")
    assert (step.tool, step.args, step.result, step.status) == (
        "read_file",
        {"path": "missing.txt"},
        text,
        "error",
    )
    first_chat = next(s for s in run.steps if s.kind == "assistant")
    assert step.batch_id == first_chat.id and step.parent_id == first_chat.parent_id
