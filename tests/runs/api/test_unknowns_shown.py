"""Issue 23 part 2, where a user sees it: a run recorded with tool names only (Google ADK's
default spans) says so, with the share of calls that had no arguments or results and how to
turn capture on, in `loopboard scan`, `GET /api/runs/{id}` and on the run page."""

from __future__ import annotations

import json

import pytest

from loopboard.cli import scan
from runs.models import Run

ADK_HINT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT"
TRACE = "5b8efff798038103d269b633813fc60c"


def _attr(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def _span(n: int, parent: str, name: str, **attrs: str) -> dict:
    start = 1_700_000_000_000_000_000 + n * 1_000_000
    return {
        "traceId": TRACE,
        "spanId": f"{n + 1:016x}",
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500_000),
        "attributes": [_attr(k, v) for k, v in attrs.items()],
    }


def adk_names_only(calls: int = 10) -> bytes:
    """An ADK agent's default spans: ten distinct healthy calls, names only."""
    root = _span(0, "", "invoke_agent helper", **{"gen_ai.operation.name": "invoke_agent",
                                                   "gcp.vertex.agent.session_id": "s1"})  # fmt: skip
    tools = [
        _span(
            n,
            root["spanId"],
            "execute_tool read_file",
            **{
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read_file",
                "gcp.vertex.agent.event_id": f"e{n}",
            },
        )  # fmt: skip
        for n in range(1, calls + 1)
    ]
    scope = {"scope": {"name": "gcp.vertex.agent"}, "spans": [root, *tools]}
    body = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "adk")]},
                               "scopeSpans": [scope]}]}  # fmt: skip
    return json.dumps(body).encode()


def test_scan_says_the_calls_carry_no_arguments_or_results(tmp_path, capsys):
    path = tmp_path / "adk.json"
    path.write_bytes(adk_names_only())
    assert scan.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "unknown values: 10 of 10 calls have no arguments, 10 no result" in out, out


@pytest.mark.django_db
def test_the_api_and_the_run_page_say_so_with_the_capture_switch(client_in, key, project, process):
    process(project, adk_names_only(), name="adk.json")
    run = Run.objects.get(project=project)
    assert run.verdict == "ok"

    data = client_in.get(f"/api/runs/{run.pk}", HTTP_AUTHORIZATION=f"Bearer {key}").json()
    unknowns = data["unknowns"]
    assert {k: unknowns[k] for k in ("calls", "args", "results", "names_only")} == {
        "calls": 10, "args": 10, "results": 10, "names_only": True}  # fmt: skip
    assert [hint for hint in unknowns["capture_hints"] if ADK_HINT in hint], unknowns
    assert not [f for f in data["findings"] if f["severity"] != "info"], data["findings"]

    page = client_in.get(f"/runs/{run.pk}/").content.decode()
    assert "100% of the calls have no arguments in the trace" in page
    assert ADK_HINT in page and "=true is not enough" in page
