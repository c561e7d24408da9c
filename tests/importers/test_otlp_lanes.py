"""OTLP spans into lanes: per-step spans are no lanes, a nested agent of another identity is.

Spans are made by the real OpenTelemetry SDK (tests/importers/test_otlp_dialects.export).
"""

from __future__ import annotations

import json

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
