"""Claude Code session importer, checked against the real samples in tests/data/traces.

Counts taken by hand from the files, independently of the importer:
- coverage-test-fix: `grep -o '"type":"tool_use"' | wc -l` -> 13 tool calls;
  `grep -o '"is_error":true' | wc -l` -> 1 error; 2 records with `"isMeta":true` (stop-hook
  feedback); 1 `queue-operation` record.
- python-to-rust-port: `grep -o '"type":"tool_use"'` -> 39 (one of them `Task`, a
  sub-agent whose records live in another file); `"is_error":true` -> 0;
  `jq -r 'select(.type=="assistant")|.message.id' | sort -u | wc -l` -> 39 API messages
  over 55 assistant records.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, iter_runs
from runs.importers.base import TraceError

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "claude-code"
COVERAGE = TRACES / "coverage-test-fix" / "transcript.jsonl"
PORT = TRACES / "python-to-rust-port" / "transcript.jsonl"


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
    assert run.metadata["skipped_records"] == {"queue-operation": 1}
    assert all(step.parent_id is None for step in run.steps)  # linear: no sidechain here


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
    assert by_id["toolu_B"].parent_id == "toolu_T"  # main line chains past the sub-agent
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
