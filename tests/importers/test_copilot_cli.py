"""GitHub Copilot CLI session events (fixture written from the notes §3.17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.importers import TraceError, detect_format, iter_runs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "importers" / "copilot_cli_events.jsonl"


def run():
    (only,) = iter_runs(FIXTURE)
    return only


def test_detected_and_named_by_the_session():
    assert detect_format(FIXTURE.read_bytes()) == "copilot-cli"
    got = run()
    assert got.id == "2f1c0a6e-copilot"
    assert got.metadata["model"] == "claude-sonnet-4.5" and got.metadata["cwd"] == "/home/u/app"
    assert "claude-sonnet-4.5" in got.metadata["model_metrics"]


def test_calls_are_the_executed_ones_with_their_results():
    calls = [s for s in run().steps if s.kind == "tool_call"]
    # the fixture: bash, view, task requested and executed; grep executed by the sub-agent
    assert [(c.tool, c.id, c.status) for c in calls] == [
        ("bash", "call_1", "error"),  # success: true, but "completed with exit code 1"
        ("view", "call_2", "error"),  # success: false
        ("task", "call_3", "ok"),
        ("grep", "call_4", "ok"),
    ]
    assert calls[0].args == {"command": "npm run build", "description": "build"}
    assert calls[1].result == "Permission denied by user"


def test_the_sub_agents_call_hangs_under_the_task_call():
    steps = run().steps
    grep = next(s for s in steps if s.tool == "grep")
    assert grep.parent_id == "call_3"
    assert all(s.parent_id is None for s in steps if s.tool != "grep")


def test_errors_and_aborts_are_visible():
    got = run()
    texts = [s.text for s in got.steps if s.kind == "system"]
    assert texts == [
        "error: 429 Too Many Requests (rate_limit)",
        "aborted by the user: user interrupt",
    ]
    assert got.warnings == texts
    assert [s.kind for s in got.steps[:3]] == ["user", "reasoning", "assistant"]


def test_bad_lines_are_skipped_with_their_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(FIXTURE.read_bytes() + b'{"type": "tool.execution_start", "data": 3}\n{oops\n')
    got = next(iter_runs(path, format="copilot-cli"))
    assert got.skipped == 2
    assert any(":21: field 'data'" in w for w in got.warnings)
    assert any(":22: invalid JSON" in w for w in got.warnings)
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"\n", format="copilot-cli"))
