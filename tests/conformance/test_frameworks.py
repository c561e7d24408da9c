"""Real agent frameworks, driven by their own scripted or fake models through their own tool
mechanisms, export one session each with their own OTLP/HTTP exporters to a live loopboard;
the run loopboard makes of it must have the calls the tools received and the right verdict.

Sessions (scripted in producers/common.py):
- failing: read_file(path="missing.txt") 7 times, FileNotFoundError each time;
- healthy: read_file(path="notes/{i}.txt") for i in 0..9, each with its own contents;
- noop: check_status(job="build") 7 times, "status: pending" each time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.conformance.conftest import Loopboard, run_producer, run_steps, wait_for_runs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@dataclass(frozen=True)
class Framework:
    """One producer configuration: the virtualenv it runs in, its script and variant, and
    whether the framework's default telemetry carries the calls' arguments and results."""

    name: str
    venv: str
    producer: str
    variant: str | None = None
    carries_content: bool = True
    server: str = "loopboard"  # the fixture of the server it exports to


# One row per framework (and variant); producers/<producer> plays every session.
FRAMEWORKS = [
    Framework("openai-v2-old", "agents", "openai_v2.py", "old"),
    Framework("openai-v2-latest", "agents", "openai_v2.py", "latest"),
    Framework("openai-v2-conversation", "agents", "openai_v2.py", "conversation"),
    Framework("openai-agents", "agents", "openai_agents.py"),
    Framework("langgraph", "agents", "langgraph_agent.py"),
    Framework("smolagents", "agents", "smolagents_agent.py"),
    Framework("pydantic-ai-otel", "agents", "pydantic_ai_agent.py", "otel"),
    Framework("pydantic-ai-logfire", "agents", "pydantic_ai_agent.py", "logfire"),
    Framework("traceloop", "traceloop", "traceloop_agent.py", "content"),
    Framework("traceloop-nocontent", "traceloop", "traceloop_agent.py", "nocontent", False),
    Framework("mlflow", "mlflow", "mlflow_tracing.py"),
    Framework("adk-default", "adk", "adk_agent.py", "default", carries_content=False),
    Framework("adk-content", "adk", "adk_agent.py", "content"),
    Framework("adk-legacy", "adk", "adk_agent.py", "legacy"),
    Framework("openlit", "traceloop", "openlit_agent.py"),
    # The OpenTelemetry JS exporter streams its bodies chunked: served by gunicorn.
    Framework("vercel-ai-proto", "node", "producer.mjs", "proto", server="gunicorn_loopboard"),
    Framework("vercel-ai-json", "node", "producer.mjs", "json", server="gunicorn_loopboard"),
]


@dataclass(frozen=True)
class Expected:
    """What the run of a session must hold: its tool calls in order (tool, arguments, result
    text or None where not checked, status) and whether it is a loop."""

    calls: list[tuple[str, dict[str, Any], str | None, str]]
    loop: bool


SESSIONS = {
    "failing": Expected([("read_file", {"path": "missing.txt"}, None, "error")] * 7, loop=True),
    "healthy": Expected(
        [
            ("read_file", {"path": f"notes/{i}.txt"}, f"contents of notes/{i}.txt", "ok")
            for i in range(10)
        ],
        loop=False,
    ),  # fmt: skip
    "noop": Expected([("check_status", {"job": "build"}, "status: pending", "ok")] * 7, loop=True),
}

CASES = [
    pytest.param(framework, session, id=f"{framework.name}-{session}")
    for framework in FRAMEWORKS
    for session in SESSIONS
]


def describe(steps: list[dict[str, Any]]) -> str:
    """The stored steps, one a line, for a failure message."""
    return "\n".join(
        f"  {s['seq']} {s['kind']} {s['tool']!r} args={s['args']!r} result={s['result']!r} "
        f"status={s['status']} parent={s['parent_id']!r}"
        for s in steps
    )


@pytest.mark.parametrize(("framework", "session"), CASES)
def test_a_framework_session_becomes_one_run_with_the_calls_and_the_verdict(
    request: pytest.FixtureRequest, framework: Framework, session: str
):
    loopboard: Loopboard = request.getfixturevalue(framework.server)
    run_producer(loopboard, framework.venv, framework.producer, session, framework.variant)
    runs = wait_for_runs(loopboard)
    assert len(runs) == 1, f"{len(runs)} runs for one session: {[r['name'] for r in runs]}"
    run = loopboard.get(f"/api/runs/{runs[0]['id']}")
    steps = run_steps(loopboard, run["id"])
    calls = [step for step in steps if step["kind"] == "tool_call"]
    expected = SESSIONS[session]
    shown = f"run {run['name']!r} ({run['format']}), verdict {run['verdict']}:\n{describe(steps)}"

    assert [c["tool"] for c in calls] == [tool for tool, *_ in expected.calls], shown
    if framework.carries_content:
        assert [c["args"] for c in calls] == [args for _, args, *_ in expected.calls], shown
    else:  # the run says the trace does not carry them (a failure may still say why)
        assert all(c["args"] is None for c in calls), shown
        assert all(c["result"] is None for c in calls if c["status"] == "ok"), shown
        unknowns = run.get("unknowns") or {}
        assert unknowns.get("args") == len(calls), f"the run does not say so: {unknowns}\n{shown}"
    assert [c["status"] for c in calls] == [status for *_, status in expected.calls], shown
    for call, (_, _, result, _) in zip(calls, expected.calls, strict=True):
        if result is not None and framework.carries_content:
            assert call["result"] == result, shown

    findings = [(f["detector"], f["severity"]) for f in run["findings"]]
    if expected.loop and framework.carries_content:
        assert run["verdict"] in ("warn", "stop"), f"loop not flagged ({findings})\n{shown}"
    elif not expected.loop:  # clean: no loop (a streak is shown as info, never a verdict)
        flagged = [finding for finding in findings if finding[1] != "info"]
        assert run["verdict"] == "ok" and not flagged, f"healthy run flagged {findings}\n{shown}"
