"""OpenAI Agents SDK trace export (fixture written from the notes §3.14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import TraceError, detect_format, iter_runs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "importers" / "openai_agents_trace.jsonl"
A = "span_" + "1".rjust(24, "0")


def test_detected_in_every_container():
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert detect_format(FIXTURE.read_bytes()) == "openai-agents"
    assert detect_format(json.dumps({"data": lines}).encode()) == "openai-agents"
    assert detect_format(json.dumps(lines, indent=1).encode()) == "openai-agents"


def test_one_run_per_trace_named_by_the_workflow():
    first, second = iter_runs(FIXTURE)
    assert first.id == "trace_" + "a" * 32 and first.name == "Weather workflow"
    assert first.metadata["group_id"] == "conv_42" and first.metadata["model"] == "gpt-4o-mini"
    assert second.name == "Second turn"
    assert any("Max turns exceeded" in w for w in second.warnings)
    assert "error: Max turns exceeded" in second.steps[0].text


def test_spans_ordered_by_start_with_the_agent_as_parent():
    run = next(iter_runs(FIXTURE))
    # by started_at: agent and guardrail at :00 (file order: guardrail first), generation
    # :01, get_weather :03, get_forecast :05 and :07, handoff :09
    texts = [s.tool or s.text for s in run.steps]
    assert texts == [
        "guardrail no_pii: passed",
        "agent Weather agent",
        "",
        "get_weather",
        "get_forecast",
        "get_forecast",
        "handoff Weather agent → Travel agent",
    ]
    assert all(s.parent_id == A for s in run.steps if s.id != A)
    assert run.steps[2].kind == "assistant" and run.steps[2].tokens_in == 120


def test_function_spans_are_calls_with_parsed_input_and_errors():
    run = next(iter_runs(FIXTURE))
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(c.args, c.status) for c in calls] == [
        ({"city": "Paris"}, "ok"),
        ({"city": "Paris", "days": 3}, "error"),  # the tool raised: span error
        ({"city": "Paris", "days": 2}, "error"),  # returned an error string: the text says so
    ]
    assert calls[0].result == "Sunny, 24C"
    assert calls[1].result == "Error running tool: TimeoutError: upstream took 30s"


def test_bad_records_are_skipped_with_where(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        FIXTURE.read_text()
        + '{"object": "trace.span", "id": "span_x", "span_data": {"type": "function"}}\n'
        + '{"object": "trace.span", "trace_id": "trace_c", "id": "s"}\n'
    )
    runs = list(iter_runs(path))
    warnings = [w for run in runs for w in run.warnings]
    assert any(":11: field 'trace_id': no trace id" in w for w in warnings)
    assert any(":12: field 'span_data'" in w for w in warnings)
    assert [run.id for run in runs][2:] == []  # trace_c had no valid span: left out, and said
    assert any("'trace_c' has no spans" in w for w in warnings)
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"", format="openai-agents"))
