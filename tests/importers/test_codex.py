"""Codex CLI rollout importer, on a hand-written fixture (no real sample ships).

tests/data/importers/codex_rollout.jsonl follows the Codex rollout mapping in runs/importers/codex.py line by line. Counted by hand
with `grep -c '"type": "<t>"'` on the file: 5 function_call + 1 custom_tool_call +
1 local_shell_call + 1 web_search_call = 8 calls; 6 function_call_output + 1
custom_tool_call_output = 7 outputs, 6 answering calls (call_B1 is never answered) and 1
(call_ZZ) without a call -> 9 tool_call steps. Errors (`grep -o 'Exit code: [0-9]*'` and
the JSON `exit_code`s): 2x `Exit code: 1`, 1x exit_code 128, plus call_B1 left open by
`turn_aborted` = 4.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import codex, detect_format, iter_runs
from runs.importers.errors import TraceError

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "importers" / "codex_rollout.jsonl"
REASONING = FIXTURE.with_name("codex_reasoning_parts.jsonl")


def runs_of(data: bytes, **kwargs):
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def the_run():
    (run,) = runs_of(FIXTURE.read_bytes())
    return run


def test_fixture_counts():
    run = the_run()
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert run.format == "codex" and run.id == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert len(calls) == 9
    assert sum(1 for s in calls if s.status == "error") == 4
    assert run.metadata["model"] == "gpt-5-codex"
    assert run.metadata["skipped_records"] == {"output_without_call": 1}
    assert run.metadata["context_records"] == {"ghost_snapshot": 1}  # an undo checkpoint


def test_user_text_is_not_duplicated_and_context_is_system():
    run = the_run()
    users = [s.text for s in run.steps if s.kind == "user"]
    assert users == ["Fix the failing test in tests/test_app.py", "Now run the whole suite"]
    assert run.steps[0].kind == "system" and "environment_context" in run.steps[0].text
    assert [s.kind for s in run.steps].count("assistant") == 1
    assert [s.kind for s in run.steps].count("reasoning") == 1


def test_repeated_failing_command_has_identical_args_and_results():
    first, second = [s for s in the_run().steps if s.tool == "shell_command"][:2]
    assert (
        first.args
        == second.args
        == {
            "command": "pytest -q tests/test_app.py",
            "workdir": "/home/dev/app",
            "timeout_ms": 120000,
        }
    )
    assert first.result == second.result  # the wall-time line is dropped
    assert "Wall time" not in first.result
    assert (first.status, second.status) == ("error", "error")
    assert first.id == "call_A1" and first.batch_id != second.batch_id


def test_calls_of_one_response_share_a_batch_and_outputs_link_by_call_id():
    run = the_run()
    patch = next(s for s in run.steps if s.tool == "apply_patch")
    plan = next(s for s in run.steps if s.tool == "update_plan")
    assert patch.batch_id == plan.batch_id
    assert patch.args["input"].startswith("*** Begin Patch")
    assert patch.result.startswith("Success.") and patch.status == "ok"
    assert plan.result == "Plan updated"
    shell = next(s for s in run.steps if s.tool == "shell")
    assert shell.args == {"command": ["bash", "-lc", "git diff --stat"]}
    assert shell.result == "fatal: not a git repository\n" and shell.status == "error"


def test_tokens_aborted_turn_and_orphan_output():
    run = the_run()
    reasoning = next(s for s in run.steps if s.kind == "reasoning")
    assert (reasoning.tokens_in, reasoning.tokens_out) == (5000, 120)
    aborted = next(
        s for s in run.steps if s.args == {"command": "pytest -q", "workdir": "/home/dev/app"}
    )
    assert aborted.status == "error" and aborted.result == "turn aborted: interrupted"
    assert run.steps[-1].tool == "(unknown)"
    web = next(s for s in run.steps if s.tool == "web_search")
    assert web.result is None and web.status == "ok"


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Exit code: 0\nWall time: 1 seconds\nOutput:\nok", ("Exit code: 0\nOutput:\nok", False)),
        (
            '{"output": "boom", "metadata": {"exit_code": 2, "duration_seconds": 0.3}}',
            ("boom", True),
        ),
        ("apply_patch verification failed: no such hunk", None),
        ("plain text", ("plain text", False)),
    ],
)
def test_a_call_output_reads_as_a_result_and_whether_it_failed(output, expected):
    read = codex.read(output)
    result, error = read.result, read.error
    if expected is None:
        assert error is True
    else:
        assert (result, error) == expected


def test_detected_by_content_through_gzip_and_invalid_line_counted():
    data = FIXTURE.read_bytes()
    assert detect_format(data[:65536]) == "codex"
    lines = data.splitlines(keepends=True)
    broken = b"".join(lines[:3]) + b'{"timestamp": "x", "type": "resp\n' + b"".join(lines[3:])
    (run,) = runs_of(gzip.compress(broken))
    assert run.skipped == 1 and "x.txt:4" in run.warnings[0]
    assert run.tool_calls == 9


def test_native_jsonl_is_not_taken_for_codex():
    native = json.dumps({"type": "tool_call", "tool": "a", "args": {}}).encode()
    assert not codex.sniff(native + b"\n")


@pytest.mark.parametrize("data", [b"", b'{"timestamp": "2025", "type": "session_meta", "pay'])
def test_empty_or_truncated_file_fails(data):
    with pytest.raises(TraceError):
        runs_of(data, format="codex")


def test_multi_part_reasoning_is_not_duplicated_by_its_events():
    """codex_reasoning_parts.jsonl (hand-written from that mapping): 4 `reasoning` items (2, 3,
    2 and 1 summary parts) and 7 `agent_reasoning` events: one per part after the first item,
    one per part before the second, one holding both parts of the third, one for the fourth
    (a new turn repeating an earlier part) -> 4 reasoning steps."""
    (run,) = runs_of(REASONING.read_bytes())
    reasoning = [s for s in run.steps if s.kind == "reasoning"]
    assert [s.text for s in reasoning] == [
        "**Looking at the build**\n\nStart with the build script.\n**Timing each stage**",
        "**Reading the Makefile**\n**Spotting the clean step**\n**Checking the cache**",
        "**Wrapping up**\nThe clean step rebuilds everything.",
        "**Timing each stage**",
    ]
    assert [s.batch_id for s in reasoning] == ["resp-1", "resp-2", "resp-3", "resp-4"]
    assert (reasoning[1].tokens_in, reasoning[1].tokens_out) == (4500, 300)
    assert [s.kind for s in run.steps].count("assistant") == 1
    assert [s.kind for s in run.steps].count("user") == 2
    assert run.tool_calls == 3


def test_reasoning_events_without_items_stay_one_step_per_response():
    lines = [
        {"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}},
        {
            "timestamp": "t",
            "type": "event_msg",
            "payload": {"type": "agent_reasoning", "text": "a"},
        },
        {
            "timestamp": "t",
            "type": "event_msg",
            "payload": {"type": "agent_reasoning", "text": "b"},
        },
        {
            "timestamp": "t",
            "type": "response_item",
            "payload": {"type": "function_call", "name": "x", "arguments": "{}", "call_id": "c"},
        },
        {
            "timestamp": "t",
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c", "output": "ok"},
        },
        {
            "timestamp": "t",
            "type": "event_msg",
            "payload": {"type": "agent_reasoning", "text": "a"},
        },
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (run,) = runs_of(data, format="codex")
    assert [(s.kind, s.text) for s in run.steps if s.kind == "reasoning"] == [
        ("reasoning", "a\nb"),
        ("reasoning", "a"),
    ]
