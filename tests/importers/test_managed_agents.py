"""Claude Managed Agents: the two recorded sessions and an API event list from the notes."""

from __future__ import annotations

import json
from pathlib import Path

from runs.importers import detect_format, explain_format, iter_runs

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = DATA / "traces" / "claude-managed-agents"
EVENTS = DATA / "importers" / "managed_agents_events.json"  # written from the notes §3.16


def only_run(path):
    (run,) = iter_runs(path)
    return run


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_custom_tool_round_trip():
    run = only_run(SAMPLES / "anthropic_managed_custom_tools.jsonl")
    (call,) = calls(run)  # the shared README: agent.custom_tool_use -> user.custom_tool_result
    assert call.tool == "get_weather" and call.args == {"location": "Prague"}
    assert call.result == "It's 23°C and sunny in Prague." and call.status == "ok"
    assert call.id == "sevt_018iPB2RYrthWNKugV6ehDxH"
    # the sent user.message and its echo in the stream are one step
    assert [s.kind for s in run.steps] == ["user", "tool_call", "assistant"]
    assert run.steps[0].started_at is not None  # the echo's processed_at
    # model_request_end: input 2 + cache creation 0 + cache read 7201, output 50
    assert (call.tokens_in, call.tokens_out) == (7203, 50)
    assert run.id == "sesn_014fc5Q6rWwrXD3vWBfPRUes" and run.metadata["model"] == "claude-sonnet-5"


def test_denied_mcp_tool_then_web_fetch():
    run = only_run(SAMPLES / "anthropic_managed_mcp_tools_reject.jsonl")
    found = calls(run)
    # the shared README: an MCP tool use denied (is_error: true), then the built-in web_fetch
    assert [(s.tool, s.status) for s in found] == [("web_search_exa", "error"), ("web_fetch", "ok")]
    assert found[0].result.startswith(
        "Permission to use mcp__exa__web_search_exa has been rejected"
    )
    assert "langsmith-sdk" in found[1].result  # the document block's text, not "[document]"
    assert run.skipped == 0 and run.warnings == []


def test_api_event_list():
    run = only_run(EVENTS)
    found = calls(run)
    assert [(s.tool, s.status) for s in found] == [
        ("bash", "error"),  # no is_error: "Exit code 1" in the text
        ("write", "error"),  # denied, never answered
        ("grep", "ok"),  # the sub-agent thread
        ("(unknown)", "error"),  # a result for a use that is not in the file
    ]
    assert found[1].result == "denied: not outside the repo"
    opener = next(s for s in run.steps if s.text == "thread started: reviewer")
    assert found[2].parent_id == opener.id
    texts = [s.text for s in run.steps if s.kind == "system"]
    assert "session error: model_overloaded_error: Overloaded" in texts
    assert "session idle: retries_exhausted" in texts
    # the same tool_result twice is read once
    assert sum(1 for s in found if s.tool == "bash") == 1
    assert run.metadata["usage"] == {"input_tokens": 15, "output_tokens": 60}


def test_jsonl_events_and_open_hai_lines(tmp_path):
    use = {
        "id": "sevt_1",
        "type": "agent.tool_use",
        "name": "bash",
        "input": {"command": "ls"},
        "processed_at": "2026-01-01T00:00:00Z",
    }
    result = {"id": "sevt_2", "type": "agent.tool_result", "tool_use_id": "sevt_1",
              "content": [{"type": "text", "text": "a"}], "is_error": False,
              "processed_at": "2026-01-01T00:00:01Z"}  # fmt: skip
    plain = tmp_path / "events.jsonl"
    plain.write_text(json.dumps(use) + "\n" + json.dumps(result) + "\n")
    wrapped = tmp_path / "export.jsonl"
    wrapped.write_text(
        "".join(json.dumps({"role": "agent", "kind": e["type"], "time": "t", "raw": e}) + "\n"
                for e in (use, result))
    )  # fmt: skip
    for path in (plain, wrapped):
        assert detect_format(path.read_bytes()) == "managed-agents"
        (call,) = calls(only_run(path))
        assert call.result == "a" and call.status == "ok"


def test_detection_reasons():
    head = (SAMPLES / "anthropic_managed_custom_tools.jsonl").read_bytes()
    best, claim = explain_format(head).claims[0]
    assert best == "managed-agents" and "client.beta.sessions" in claim.reason
    claim = dict(explain_format(b'{"type": "message"}\n').claims)["managed-agents"]
    assert claim.score == 0 and "sevt_" in claim.reason
