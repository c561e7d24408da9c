"""Claude Code session importer, checked against the real samples in tests/data/traces.

Counts taken by hand from the files, independently of the importer:
- coverage-test-fix: `grep -o '"type":"tool_use"' | wc -l` -> 13 tool calls;
  `grep -o '"is_error":true' | wc -l` -> 1 error; 2 records with `"isMeta":true` (stop-hook
  feedback); 1 `queue-operation` record.
- python-to-rust-port: `grep -o '"type":"tool_use"'` -> 39 (one of them `Task`, a
  sub-agent whose records live in another file); `"is_error":true` -> 0;
  `jq -r 'select(.type=="assistant")|.message.id' | sort -u | wc -l` -> 39 API messages
  over 55 assistant records.

Hand-written fixtures (the mapping in runs/importers/claude_code.py, field by field; tests/data/importers):
- claude_code_branches.jsonl: 27 lines, 26 with a `uuid`, one queue-operation. A response
  retried (toolu_02, toolu_03 and their results hang under the same parent as the live
  retry toolu_04) and a user message edited ("yes, and run the linter too" + toolu_07 +
  result, beside the live "yes, fix it"): 7 abandoned user/assistant records. 9 tool_use
  blocks, 3 abandoned -> 6 calls, 2 of them `is_error`. `pytest -q -x tests/test_calc.py`
  appears 5 times (`grep -c`), each failing identically except the last live one.
  toolu_05/toolu_06 are parallel calls whose results chain to their own tool_use record.
- claude_code_agent-a4f2c91.jsonl: a sub-agent file, every record `isSidechain: true`,
  `agentId: "a4f2c91"`, first `parentUuid` null; 3 tool_use blocks (two parallel), 3 results.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from detection import analyze
from runs.importers import detect_format, iter_runs
from runs.importers.errors import TraceError

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "claude-code"
COVERAGE = TRACES / "coverage-test-fix" / "transcript.jsonl"
PORT = TRACES / "python-to-rust-port" / "transcript.jsonl"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "importers"
BRANCHES = FIXTURES / "claude_code_branches.jsonl"
AGENT = FIXTURES / "claude_code_agent-a4f2c91.jsonl"


def runs_of(data: bytes, **kwargs):
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def errors(run) -> int:
    return sum(1 for step in run.steps if step.status == "error")


def jsonl(*records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def rec(kind, uuid, content, parent=None, **extra):
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "s1",
        "timestamp": "2026-01-21T06:19:38.000Z",
        "isSidechain": False,
        "message": {"role": kind, "content": content},
        **extra,
    }


def use(uuid, parent, msg_id, call_id, name, args, **extra):
    record = rec(
        "assistant",
        uuid,
        [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
        parent,
        **extra,
    )
    record["message"].update(id=msg_id, model="claude-x")
    return record


@pytest.mark.parametrize(("path", "calls", "failed"), [(COVERAGE, 13, 1), (PORT, 39, 0)])
def test_samples_hand_counted(path, calls, failed):
    (run,) = runs_of(path.read_bytes())
    assert run.format == "claude-code"
    assert (run.tool_calls, errors(run)) == (calls, failed)
    assert run.metadata["model"] == "claude-opus-4-5-20251101"
    assert run.metadata["metadata_records"] == {"queue-operation": 1}
    assert "skipped_records" not in run.metadata  # a metadata record is read, not skipped
    assert all(step.parent_id is None for step in run.steps)  # linear: no sidechain here
    # parallel results chain to their own tool_use record: forks, but no edit/retry branch
    assert "abandoned_records" not in run.metadata


def test_meta_records_are_system_steps_not_user_turns():
    (run,) = runs_of(COVERAGE.read_bytes())
    kinds = [step.kind for step in run.steps]
    assert kinds.count("user") == 1  # only the typed request
    system = [step for step in run.steps if step.kind == "system"]
    assert len(system) == 2 and all(s.text.startswith("Stop hook feedback") for s in system)


def test_the_failing_call_and_timing():
    (run,) = runs_of(COVERAGE.read_bytes())
    (failed,) = [step for step in run.steps if step.status == "error"]
    assert failed.tool == "Bash" and failed.result.startswith("Exit code 1")
    assert failed.started_at <= failed.ended_at


def test_assistant_records_are_merged_by_message_id():
    (run,) = runs_of(PORT.read_bytes())
    model_steps = [s for s in run.steps if s.kind in ("assistant", "tool_call")]
    assert len({s.batch_id for s in model_steps}) == 39
    task = next(s for s in run.steps if s.tool == "Task")
    assert task.args["subagent_type"] and task.result
    # one usage per API message, on its first step
    assert sum(1 for s in run.steps if s.tokens_out is not None) == 39


@pytest.mark.parametrize("path", [COVERAGE, PORT])
def test_samples_are_detected_by_content_and_through_gzip(path):
    data = path.read_bytes()
    assert detect_format(data[:65536]) == "claude-code"
    (run,) = runs_of(gzip.compress(data))
    assert run.format == "claude-code"


def test_sidechain_records_hang_under_their_task_call():
    data = jsonl(
        rec("user", "u1", "port it"),
        use("a1", "u1", "m1", "toolu_T", "Task", {"prompt": "explore"}),
        rec("user", "s1", "explore", "a1", isSidechain=True),
        use("s2", "s1", "m2", "toolu_S", "Glob", {"pattern": "*"}, isSidechain=True),
        rec(
            "user",
            "s3",
            [{"type": "tool_result", "tool_use_id": "toolu_S", "content": "a.py"}],
            "s2",
            isSidechain=True,
        ),
        rec(
            "user",
            "u2",
            [{"type": "tool_result", "tool_use_id": "toolu_T", "content": "done"}],
            "a1",
        ),
        use("a2", "u2", "m3", "toolu_B", "Bash", {"command": "ls"}),
    )
    (run,) = runs_of(data)
    by_id = {step.id: step for step in run.steps}
    assert by_id["toolu_S"].parent_id == "s1" and by_id["s1"].parent_id == "toolu_T"
    assert by_id["toolu_S"].lane == by_id["s1"].lane == "agent:toolu_T"  # the sub-agent's lane
    assert by_id["toolu_B"].lane is None  # the main line goes on in the main lane
    assert by_id["toolu_T"].result == "done"


def test_result_without_call_call_without_result_and_duplicate_ids():
    data = jsonl(
        rec("user", "u1", "go"),
        use("a1", "u1", "m1", "toolu_1", "Read", {"file_path": "a"}),
        use("a1", "u1", "m1", "toolu_1", "Read", {"file_path": "a"}),
        rec("user", "u2", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]),
        use("a2", "u2", "m2", "toolu_1", "Read", {"file_path": "b"}),
        rec(
            "user",
            "u3",
            [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "?", "is_error": True}],
        ),
    )
    (run,) = runs_of(data)
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.id, c.tool, c.result, c.status) for c in calls] == [
        ("toolu_1", "Read", "x", "ok"),
        ("toolu_1#2", "Read", None, "ok"),
        ("toolu_9/result", "(unknown)", "?", "error"),
    ]
    assert run.metadata["skipped_records"] == {"duplicate": 1, "result_without_call": 1}


def test_invalid_line_is_skipped_and_counted():
    good = COVERAGE.read_bytes().splitlines(keepends=True)
    data = b"".join(good[:5]) + b'{"type": "user", "uuid": \n' + b"".join(good[5:])
    (run,) = runs_of(data)
    assert run.skipped == 1 and run.warnings[0].startswith("x.txt:6: invalid JSON")
    assert run.tool_calls == 13


@pytest.mark.parametrize("data", [b"", b"\n\n", b'{"type": "user", "uuid": "u1", "sess'])
def test_empty_or_truncated_files_fail(data):
    with pytest.raises(TraceError):
        runs_of(data, format="claude-code")


def repeat_warnings(run):
    return [f for f in analyze(run).findings if f.detector == "repeat" and f.severity != "info"]


def test_abandoned_edit_and_retry_branches_are_dropped_and_counted():
    data = BRANCHES.read_bytes()
    assert data.count(b'"command":"pytest -q -x tests/test_calc.py"') == 5
    (run,) = runs_of(data)
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [c.id for c in calls] == [
        "toolu_01", "toolu_04", "toolu_05", "toolu_06", "toolu_08", "toolu_09"
    ]  # fmt: skip
    assert [c.status for c in calls].count("error") == 2
    assert all(c.result is not None for c in calls)  # parallel results kept with their calls
    assert run.metadata["abandoned_records"] == 7
    assert run.metadata["metadata_records"] == {"queue-operation": 1}
    users = [s.text for s in run.steps if s.kind == "user"]
    assert users == ["The tests in tests/test_calc.py fail; fix them.", "yes, fix it"]
    assert run.steps[-1].kind == "system"  # written after the newest message: kept
    assert all(s.parent_id is None for s in run.steps)
    assert repeat_warnings(run) == []


def test_the_same_records_as_one_chain_would_be_a_loop():
    """Control: relinked into one linear chain, the repeated failing call does warn."""
    records = [json.loads(line) for line in BRANCHES.read_bytes().splitlines()]
    previous = None
    for record in records:
        if "uuid" in record:
            record["parentUuid"], previous = previous, record["uuid"]
    (run,) = runs_of(jsonl(*records))
    assert run.tool_calls == 9 and "abandoned_records" not in run.metadata
    (finding,) = repeat_warnings(run)
    assert finding.tool == "Bash" and finding.count >= 3


def test_compaction_boundary_keeps_the_history_before_it():
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": "c1",
        "parentUuid": None,
        "logicalParentUuid": "r1",
        "sessionId": "s1",
        "content": "Conversation compacted",
        "isSidechain": False,
    }
    data = jsonl(
        rec("user", "u1", "go"),
        use("a1", "u1", "m1", "toolu_1", "Bash", {"command": "ls"}),
        rec(
            "user", "r1", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}], "a1"
        ),
        boundary,
        rec("user", "u2", "This session continues from a summary", "c1", isCompactSummary=True),
        rec("user", "u3", "and again", "u2"),
        use("a2", "u3", "m2", "toolu_2", "Bash", {"command": "ls"}),
    )
    (run,) = runs_of(data)
    assert [s.id for s in run.steps if s.kind == "tool_call"] == ["toolu_1", "toolu_2"]
    assert "abandoned_records" not in run.metadata


def test_sub_agent_file_imports_alone():
    data = AGENT.read_bytes()
    assert detect_format(data[:65536]) == "claude-code"
    (run,) = runs_of(data, source=str(AGENT))
    assert run.format == "claude-code"
    assert run.id == "7d3e9b2a-5c41-4f8e-9a06-1b2c3d4e5f60/agent-a4f2c91"
    assert run.name == "agent-a4f2c91" and run.metadata["agent_id"] == "a4f2c91"
    assert [s.kind for s in run.steps] == [
        "user", "assistant", "tool_call", "tool_call", "tool_call", "assistant"
    ]  # fmt: skip
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(c.tool, c.status) for c in calls] == [("Grep", "ok"), ("Glob", "ok"), ("Read", "ok")]
    assert calls[0].result == "calc.py:1:def add(a, b):" and all(c.result for c in calls)
    assert all(s.parent_id is None for s in run.steps)
    assert "abandoned_records" not in run.metadata and "skipped_records" not in run.metadata


def test_sub_agent_file_starting_outside_without_agent_id_is_named_after_the_file():
    records = [json.loads(line) for line in AGENT.read_bytes().splitlines()]
    records[0]["parentUuid"] = "9f0e1d2c-0000-4000-8000-00000000beef"  # a main-file record
    for record in records:
        record.pop("agentId")
    (run,) = runs_of(jsonl(*records), source="/p/subagents/agent-b77.jsonl")
    assert run.name == "agent-b77" and run.id.endswith("/agent-b77")
    assert run.tool_calls == 3 and all(s.result for s in run.steps if s.kind == "tool_call")
    assert "abandoned_records" not in run.metadata


def test_retried_branch_inside_a_sub_agent_file_is_dropped():
    records = [json.loads(line) for line in AGENT.read_bytes().splitlines()]
    first_try = dict(records[6], uuid="retry-1")  # the Read call, first attempt
    first_try["message"] = dict(records[6]["message"], id="msg_S2old")
    (run,) = runs_of(jsonl(*records[:6], first_try, *records[6:]), source=str(AGENT))
    assert run.tool_calls == 3 and run.metadata["abandoned_records"] == 1
