"""OpenCode session export (fixture written from the notes §3.20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import TraceError, detect_format, iter_runs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "importers" / "opencode_export.json"


def run():
    (only,) = iter_runs(FIXTURE)
    return only


def test_detected_and_described():
    assert detect_format(FIXTURE.read_bytes()) == "opencode"
    got = run()
    assert got.id == "ses_4f2a9c1e7ffeA1b2C3d4E5f6" and got.name == "Fix checkout total"
    assert got.metadata["model"] == "claude-sonnet-4-5"


def test_tool_parts_are_calls_with_status_from_their_state():
    calls = [s for s in run().steps if s.kind == "tool_call"]
    # the fixture: read ok; pytest exit 1; e2e timed out; edit refused; bash left running
    assert [(c.tool, c.id, c.status) for c in calls] == [
        ("read", "toolu_01", "ok"),
        ("bash", "toolu_02", "error"),
        ("bash", "toolu_03", "error"),
        ("edit", "toolu_04", "error"),
        ("bash", "toolu_05", "error"),
    ]
    assert calls[1].args == {"command": "pytest -q", "description": "run tests"}
    assert calls[4].result == "[Tool execution was interrupted]"
    assert calls[3].result.startswith("The user rejected permission")


def test_usage_counts_cache_reads_and_reasoning_once_per_message():
    steps = run().steps
    first = steps[1]  # the first step of msg_02: its reasoning
    assert (first.tokens_in, first.tokens_out, first.cost) == (2100 + 9000, 180 + 40, 0.0123)
    assert sum(s.cost or 0 for s in steps) == pytest.approx(0.0143)


def test_message_errors_are_visible():
    got = run()
    assert got.warnings == ["MessageAbortedError: The operation was aborted."]
    assert got.steps[-1].kind == "system"


def test_bad_messages_are_skipped_with_their_field(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["messages"].insert(1, {"parts": []})
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    (got,) = iter_runs(path)
    assert got.skipped == 1 and any("field 'messages[1].info'" in w for w in got.warnings)
    assert got.tool_calls == 5
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"", format="opencode"))
    with pytest.raises(TraceError, match="truncated"):
        list(iter_runs(FIXTURE.read_bytes()[:900], format="opencode"))


def test_each_model_call_is_a_batch():
    # msg_02 has four model calls (step-start parts), one tool part each; msg_03 one more
    calls = [s for s in run().steps if s.kind == "tool_call"]
    assert [c.batch_id for c in calls] == [
        "msg_02#1",
        "msg_02#2",
        "msg_02#3",
        "msg_02#4",
        "msg_03#0",
    ]
