"""OTLP spans into lanes: per-step spans are no lanes; a nested agent of another identity is
one, and so is an agent that overlaps in time another agent under a workflow span.

Spans are made by the real OpenTelemetry SDK (tests/importers/test_otlp_dialects.export).
"""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from detection import analyze
from tests.importers.test_otlp_dialects import export, one_run


def _agent(name: str, *children: tuple) -> tuple:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
             "session.id": "sess-lanes"}  # fmt: skip
    return (f"invoke_agent {name}", attrs, list(children))


def _tool(name: str, args: dict, result: str, failed: bool = False) -> tuple:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
             "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": result}  # fmt: skip
    return (
        (f"execute_tool {name}", attrs, [], "failed")
        if failed
        else (f"execute_tool {name}", attrs, [])
    )


def _turn(index: int, *children: tuple) -> tuple:
    return (f"turn {index}", {"openinference.span.kind": "CHAIN"}, list(children))


def test_seven_failing_calls_each_under_its_own_turn_span_are_one_agent_s_loop():
    missing = _tool("read_file", {"path": "missing.txt"}, "FileNotFoundError", failed=True)
    run = one_run(export([_agent("main", *(_turn(i, missing) for i in range(7)))]))
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert len(calls) == 7 and {step.lane for step in run.steps} == {None}
    assert analyze(run).verdict == "stop"


def test_an_agent_span_per_turn_of_the_same_agent_opens_no_lane():
    missing = _tool("read_file", {"path": "missing.txt"}, "FileNotFoundError", failed=True)
    run = one_run(export([_agent("main", *(_agent("main", missing) for _ in range(7)))]))
    assert {step.lane for step in run.steps} == {None}
    assert analyze(run).verdict == "stop"


def test_two_sub_agents_that_call_the_same_tool_once_each_stay_clean():
    search = _tool("search", {"q": "x"}, "found x")
    run = one_run(
        export(
            [_agent("main", search, _agent("researcher-a", search), _agent("researcher-b", search))]
        )
    )
    lanes = [step.lane for step in run.steps if step.kind == "tool_call"]
    assert lanes[0] is None and len(set(lanes)) == 3
    result = analyze(run)
    assert result.verdict == "ok" and result.findings == ()


def test_a_call_rebuilt_from_chat_messages_is_the_tool_span_that_has_no_call_id():
    """OpenLLMetry with content: the model span's output names each call (with an id) and the
    `@tool` span (no id) is the call itself: one call, one step, with the span's result."""

    def chat(index: int) -> tuple:
        output = [{"role": "assistant", "parts": [{"type": "tool_call", "id": f"call_{index}",
                   "name": "read_file", "arguments": {"path": "missing.txt"}}]}]  # fmt: skip
        attrs = {"llm.request.type": "chat", "gen_ai.operation.name": "chat",
                 "gen_ai.output.messages": json.dumps(output)}  # fmt: skip
        return ("openai.chat", attrs, [])

    def tool() -> tuple:
        attrs = {"traceloop.span.kind": "tool", "traceloop.entity.name": "read_file",
                 "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"path": "missing.txt"}}),
                 "traceloop.entity.output": '"[Errno 2] No such file"'}  # fmt: skip
        return ("read_file.tool", attrs, [], "FileNotFoundError")

    workflow = ("agent.workflow", {"traceloop.span.kind": "workflow",
                "traceloop.association.properties.session_id": "sess-tl"},
                [step for i in range(3) for step in (chat(i), tool())])  # fmt: skip
    run = one_run(export([workflow]))
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.tool, c.args, c.status) for c in calls] == [
        ("read_file", {"path": "missing.txt"}, "error")
    ] * 3
    assert all(c.result == "[Errno 2] No such file" for c in calls)


def _export_timed(tree: list[tuple]) -> bytes:
    """Export spans with the real SDK at given times: items are (name, attrs, start s, end s,
    children)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "crew"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    base = 1_780_000_000 * 10**9

    def emit(node: tuple, context) -> None:
        name, attrs, start, end, children = node
        span = tracer.start_span(
            name, context=context, attributes=attrs, start_time=base + int(start * 1e9)
        )
        for child in children:
            emit(child, trace.set_span_in_context(span))
        span.end(end_time=base + int(end * 1e9))

    for node in tree:
        emit(node, None)
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def _timed_agent(name: str, start: float, calls: int) -> tuple:
    """An agent span from `start` that makes the same search call `calls` times, 1 s apart."""
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    search = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
              "gen_ai.tool.call.arguments": '{"q": "fares"}',
              "gen_ai.tool.call.result": "3 fares"}  # fmt: skip
    children = [
        ("execute_tool search", search, start + i + 0.1, start + i + 0.5, []) for i in range(calls)
    ]
    return (f"invoke_agent {name}", attrs, start, start + calls, children)


def _workflow(*agents: tuple) -> list[tuple]:
    attrs = {"openinference.span.kind": "CHAIN", "session.id": "sess-crew"}
    return [("workflow", attrs, 0, 100, list(agents))]


def test_agents_that_overlap_in_time_under_a_workflow_are_lanes_of_their_own():
    """Two agents of different identities run side by side (no agent above either): each
    searching the same fares twice is each one's own business, not one agent's four."""
    both = _workflow(_timed_agent("flights", 1, 2), _timed_agent("hotels", 1.2, 2))
    run = one_run(_export_timed(both))
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert len(calls) == 4 and len({step.lane for step in calls}) == 2
    assert None not in {step.lane for step in calls}  # neither is the main agent
    assert analyze(run).verdict == "ok"
    for step in run.steps:  # the same steps as one sequence are a repeat
        step.lane = None
    assert analyze(run).verdict != "ok"


def test_agents_one_after_another_stay_one_lane():
    """A handoff: the second agent starts when the first has ended. No overlap, no evidence
    of concurrency, so the six calls are one sequence and the repeat is caught."""
    run = one_run(
        _export_timed(_workflow(_timed_agent("triage", 1, 3), _timed_agent("billing", 4, 3)))
    )
    assert {step.lane for step in run.steps} == {None}
    assert analyze(run).verdict == "stop"
