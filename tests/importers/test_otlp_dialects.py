"""OTLP dialects whose tool spans lack `gen_ai.operation.name` (§3.23), read by the dialect
table of `runs.importers.otlp.dialects`.

Pydantic AI's spans are produced by the real library (pydantic-ai-slim, its offline TestModel).
The other dialects' libraries are heavy or need a service (traceloop-sdk pulls ~40
instrumentation packages, google-adk and mlflow are large, Claude Code cannot run here): their
spans are written from the notes §3.10/§3.23 with the real opentelemetry-sdk exporting them,
so the bytes are real OTLP protobuf, the attribute names and values the notes'.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from runs.importers import detect_format, iter_runs
from runs.importers.otlp.dialects import classify


def export(tree: list[tuple], service: str = "agent") -> bytes:
    """Export spans with the real SDK: tree items are (name, attrs, children[, error])."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")

    def emit(node: tuple) -> None:
        name, attrs, children, *error = node
        with tracer.start_as_current_span(name, attributes=attrs) as span:
            for child in children:
                emit(child)
            if error:
                span.set_status(Status(StatusCode.ERROR, error[0]))

    for node in tree:
        emit(node)
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def one_run(data: bytes):
    assert detect_format(data[:65536]) == "otlp"
    (run,) = iter_runs(data, source="spans.pb")
    return run


def tools(run) -> list[tuple[Any, ...]]:
    return [(s.tool, s.args, s.result, s.status) for s in run.steps if s.kind == "tool_call"]


def test_vercel_ai_sdk_tool_calls_v4_and_v5_keys():
    step = {"ai.operationId": "ai.generateText.doGenerate", "gen_ai.system": "openai",
            "ai.response.toolCalls": json.dumps([{"toolCallId": "call-123", "toolName": "get_weather"}]),
            "ai.usage.promptTokens": 12, "ai.usage.completionTokens": 5, "ai.response.model": "gpt-4o"}  # fmt: skip
    tree = [("ai.generateText", {"ai.operationId": "ai.generateText",
             "operation.name": "ai.generateText weather", "ai.telemetry.functionId": "weather",
             "ai.telemetry.metadata.sessionId": "sess-v"}, [
        ("ai.generateText.doGenerate", step, [
            ("ai.toolCall", {"operation.name": "ai.toolCall", "ai.operationId": "ai.toolCall",
                             "ai.toolCall.name": "get_weather", "ai.toolCall.id": "call-123",
                             "ai.toolCall.args": '{"latitude":45.5}',
                             "ai.toolCall.result": '"Sunny, 25°C"'}, []),
            # v5+ exporters that write input/output, and a failed call without a result
            ("ai.toolCall", {"ai.toolCall.name": "get_time", "ai.toolCall.id": "call-2",
                             "ai.toolCall.input": '{"tz":"UTC"}', "ai.toolCall.output": '"12:00"'}, []),
            ("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "get_weather",
                             "ai.toolCall.args": '{"latitude":0}'}, [], "boom"),
        ]),
    ])]  # fmt: skip
    run = one_run(export(tree))
    assert run.id == "sess-v" and run.metadata["agent"] == "weather"
    assert run.metadata["dialects"] == ["vercel_ai"] and run.metadata["model"] == "gpt-4o"
    # three ai.toolCall spans, in the order they ran
    assert tools(run) == [
        ("get_weather", {"latitude": 45.5}, "Sunny, 25°C", "ok"),
        ("get_time", {"tz": "UTC"}, "12:00", "ok"),
        ("get_weather", {"latitude": 0}, "boom", "error"),
    ]
    llm = next(s for s in run.steps if s.kind == "assistant")
    assert (llm.tokens_in, llm.tokens_out) == (12, 5)
    assert {s.batch_id for s in run.steps if s.kind == "tool_call"} == {llm.id}


def test_traceloop_tool_spans_and_indexed_completion_tool_calls():
    llm = {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
           "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "let me look",
           "gen_ai.completion.0.tool_calls.0.id": "call_a",
           "gen_ai.completion.0.tool_calls.0.name": "get_weather",
           "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
           "gen_ai.usage.prompt_tokens": 9, "gen_ai.usage.completion_tokens": 4}  # fmt: skip
    tree = [("weather.workflow", {"traceloop.span.kind": "workflow", "traceloop.entity.name": "weather",
             "traceloop.association.properties.session_id": "sess-t"}, [
        ("openai.chat", llm, []),
        ("get_weather.tool", {"traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather",
                              "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Paris"}}',
                              "traceloop.entity.output": '"rain"'}, []),
        ("format.task", {"traceloop.span.kind": "task", "traceloop.entity.name": "format"}, []),
    ])]  # fmt: skip
    run = one_run(export(tree))
    assert run.id == "sess-t"
    # the output is a JSON string literal: the result is its text
    assert tools(run) == [("get_weather", {"city": "Paris"}, "rain", "ok")]
    chat = next(s for s in run.steps if s.kind == "assistant")
    assert (chat.text, chat.tokens_in, chat.tokens_out) == ("let me look", 9, 4)
    # the indexed gen_ai.completion.0.tool_calls.0.* keys, reassembled into one call
    from runs.importers.otlp.steps import requested_calls

    assert requested_calls(llm) == [
        {"id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert [s.kind for s in run.steps].count("system") == 2  # the workflow and the task


def test_google_adk_execute_tool_without_operation_name_and_failures_in_the_response():
    def tool(name: str, args: dict, response: dict) -> tuple:
        return (f"execute_tool {name}", {"gen_ai.system": "gcp.vertex.agent", "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": f"adk-{name}", "gcp.vertex.agent.tool_call_args": json.dumps(args),
                "gcp.vertex.agent.tool_response": json.dumps(response),
                "gcp.vertex.agent.event_id": "e1"}, [])  # fmt: skip

    llm = ("call_llm", {"gen_ai.system": "gcp.vertex.agent", "gen_ai.request.model": "gemini-2.0",
           "gcp.vertex.agent.session_id": "sess-adk", "gcp.vertex.agent.llm_response": json.dumps(
               {"content": {"role": "model", "parts": [{"text": "checking"},
                {"function_call": {"id": "adk-get_weather", "name": "get_weather", "args": {}}}]}}),
           "gen_ai.usage.input_tokens": 30}, [])  # fmt: skip
    tree = [("invocation", {"gcp.vertex.agent.session_id": "sess-adk"}, [
        ("agent_run [weather_agent]", {"gcp.vertex.agent.session_id": "sess-adk"}, [
            llm,
            tool("get_weather", {"city": "Xi'an"}, {"result": "sunny"}),
            tool("get_time", {"city": "Xi'an"}, {"error": "no such city"}),
            tool("book", {"id": 1}, {"status": "Failure"}),
        ]),
    ])]  # fmt: skip
    run = one_run(export(tree))
    assert run.id == "sess-adk"
    assert [(t, a, st) for t, a, _, st in tools(run)] == [
        ("get_weather", {"city": "Xi'an"}, "ok"),
        ("get_time", {"city": "Xi'an"}, "error"),  # {"error": ...} inside the response
        ("book", {"id": 1}, "error"),  # {"status": "Failure"}
    ]
    assert tools(run)[0][2] == "sunny"  # ADK's {"result": ...} around the return value
    chat = next(s for s in run.steps if s.kind == "assistant")
    assert chat.text == "checking" and chat.tokens_in == 30


def test_openlit_coding_agent_reads_both_argument_keys_and_skips_requests():
    tree = [("coding_agent.session", {"coding_agent.session.id": "sess-o"}, [
        ("coding_agent.llm.turn", {"gen_ai.usage.input_tokens": 3}, [
            ("coding_agent.tool.requested", {"gen_ai.tool.name": "Bash", "gen_ai.tool.call.id": "t1"}, []),
            ("coding_agent.tool.call", {"gen_ai.tool.name": "Bash", "gen_ai.tool.call.id": "t1",
                                        "gen_ai.tool.args": '{"command": "ls"}'}, []),
            ("coding_agent.tool.call", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "Read",
                                        "gen_ai.tool.call.arguments": '{"path": "a"}'}, []),
        ]),
    ])]  # fmt: skip
    run = one_run(export(tree))
    # two tool.call spans; the tool.requested span is the model's request, not a call
    assert run.id == "sess-o" and tools(run) == [
        ("Bash", {"command": "ls"}, None, "ok"),
        ("Read", {"path": "a"}, None, "ok"),
    ]


def test_langfuse_laminar_agentops_mlflow_span_types():
    tree = [
        ("root", {"langfuse.session.id": "sess-l", "langfuse.observation.type": "span"}, [
            ("search", {"langfuse.observation.type": "tool", "langfuse.observation.input": '{"q": "x"}',
                        "langfuse.observation.output": '"none"'}, []),
            ("search", {"langfuse.observation.type": "tool", "langfuse.observation.input": '{"q": "y"}',
                        "langfuse.observation.level": "ERROR",
                        "langfuse.observation.status_message": "quota"}, []),
            ("gen", {"langfuse.observation.type": "generation", "langfuse.observation.output": '{"role": "assistant", "content": "hi"}',
                     "langfuse.observation.usage_details": '{"input": 5, "output": 10}',
                     "langfuse.observation.model.name": "m1"}, []),
        ]),
    ]  # fmt: skip
    run = one_run(export(tree))
    assert run.id == "sess-l" and tools(run) == [
        ("search", {"q": "x"}, "none", "ok"),
        ("search", {"q": "y"}, "quota", "error"),  # level ERROR is the failure flag
    ]
    gen = next(s for s in run.steps if s.kind == "assistant")
    assert (gen.text, gen.tokens_in, gen.tokens_out) == ("hi", 5, 10)

    laminar = [("agent", {"lmnr.span.type": "DEFAULT",
                          "lmnr.association.properties.session_id": "sess-m"}, [
        ("add", {"lmnr.span.type": "TOOL", "lmnr.span.input": "[1, 2]", "lmnr.span.output": "3"}, []),
    ])]  # fmt: skip
    assert tools(one_run(export(laminar))) == [("add", [1, 2], "3", "ok")]

    agentops = [("session", {"agentops.span.kind": "session"}, [
        ("upper.tool", {"agentops.span.kind": "tool", "operation.name": "upper",
                        "agentops.tool.input": '{"args":[],"kwargs":{"s":"hello"}}',
                        "agentops.tool.output": '"HELLO"'}, []),
    ])]  # fmt: skip
    assert tools(one_run(export(agentops))) == [("upper", {"s": "hello"}, "HELLO", "ok")]

    mlflow = [("agent", {"mlflow.spanType": '"AGENT"', "mlflow.traceRequestId": '"tr-1"'}, [
        ("lookup", {"mlflow.spanType": '"TOOL"', "mlflow.spanInputs": '{"key": "a"}',
                    "mlflow.spanOutputs": '"found"'}, []),
        ("bare", {"mlflow.spanType": "TOOL", "mlflow.spanInputs": '{"key": "b"}'}, []),
    ])]  # fmt: skip
    assert tools(one_run(export(mlflow))) == [
        ("lookup", {"key": "a"}, "found", "ok"),
        ("bare", {"key": "b"}, None, "ok"),  # some exporters write the bare type
    ]


@pytest.mark.parametrize(
    ("name", "attrs", "role"),
    [
        ("claude_code.tool", {"tool_name": "Bash"}, "tool"),
        ("claude_code.llm_request", {"model": "claude"}, "llm"),
        ("claude_code.tool.execution", {"success": "true"}, "detail"),
        ("ai.toolCall", {"ai.toolCall.name": "x"}, "tool"),
        ("get.tool", {"traceloop.span.kind": "tool"}, "tool"),
        ("x", {"traceloop.span.kind": "task"}, "group"),
        ("running tool", {"gen_ai.tool.name": "x"}, "tool"),
        ("anything", {"gen_ai.tool.name": "x"}, "tool"),  # Pydantic AI: the tool name only
        ("execute_tool x", {"gcp.vertex.agent.tool_call_args": "{}"}, "tool"),
        ("coding_agent.tool.requested", {"gen_ai.tool.name": "x"}, "group"),
        ("x", {"mlflow.spanType": '"CHAT_MODEL"'}, "llm"),
        (
            "x",
            {"langfuse.observation.type": "span", "gen_ai.operation.name": "execute_tool"},
            "tool",
        ),
        ("llm", {"openinference.span.kind": "LLM"}, "llm"),  # not Laminar's "llm" by name
        ("plain", {}, "group"),
    ],
)
def test_the_table_gives_each_span_its_role(name, attrs, role):
    assert classify(name, attrs)[0] == role


def pydantic_ai_spans(version: int) -> list:
    """Spans of a real Pydantic AI run (TestModel: calls every tool once, then answers)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.test import TestModel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(TestModel())
    agent.instrument = InstrumentationSettings(tracer_provider=provider, version=version)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    # in a thread of its own: an event loop left running in this one (Playwright's sync API,
    # in the browser tests) would make run_sync refuse
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, agent.run("weather in Paris?")).result()
    return list(exporter.get_finished_spans())


@pytest.mark.filterwarnings("ignore:Instrumentation format versions")
@pytest.mark.parametrize("version", [2, 5])
def test_pydantic_ai_spans_from_the_library(version):
    spans = pydantic_ai_spans(version)
    run = one_run(encode_spans(spans).SerializeToString())
    # TestModel calls get_weather once with a generated argument, then answers: 1 tool call
    ((tool, args, result, status),) = tools(run)
    assert (tool, set(args), status) == ("get_weather", {"city"}, "ok")
    assert result == "sunny"
    assert run.id == spans[0].attributes["gen_ai.conversation.id"]


@pytest.mark.filterwarnings("ignore:Instrumentation format versions")
def test_pydantic_ai_tool_spans_with_only_the_tool_name():
    """Older Pydantic AI releases write no gen_ai.operation.name on `running tool` spans:
    the real spans with that attribute taken out."""
    from opentelemetry.sdk.trace import ReadableSpan

    stripped = []
    for span in pydantic_ai_spans(2):
        attrs = {k: v for k, v in span.attributes.items() if k != "gen_ai.operation.name"}
        stripped.append(ReadableSpan(name=span.name, context=span.context, parent=span.parent,
                                     resource=span.resource, attributes=attrs, events=span.events,
                                     start_time=span.start_time, end_time=span.end_time,
                                     status=span.status, kind=span.kind))  # fmt: skip
    run = one_run(encode_spans(stripped).SerializeToString())
    ((tool, args, result, status),) = tools(run)
    assert (tool, set(args), result, status) == ("get_weather", {"city"}, "sunny", "ok")
