"""Codex CLI 0.100+ rollouts: unified exec (exec_command / write_stdin), explicit end events,
output shapes, forked rollouts with item_completed copies, detection, and what the engine
makes of polling.

The fixtures `tests/data/importers/codex_0_1xx_*.jsonl` are written from the notes §3.7 and
§3.25 of the shared traces README, not real files (no licensed 0.100+ rollout exists); each
starts with a `fixture_note` record that says so, which also checks that unknown record types
are tolerated. Counts below come from reading the fixtures line by line (`grep -c` as said).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detection import analyze
from runs.importers import codex, detect_format, iter_runs, text_errors
from runs.importers.detect import sample_of
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
UNIFIED = DATA / "codex_0_1xx_unified_exec.jsonl"
FORKED = DATA / "codex_0_1xx_forked.jsonl"
POLLING = DATA / "codex_0_1xx_polling.jsonl"
STUCK = DATA / "codex_0_1xx_stuck_poll.jsonl"


def run_of(data: bytes, **kwargs: Any):
    (run,) = iter_runs(data, source=kwargs.pop("source", "rollout.jsonl"), **kwargs)
    return run


def lines(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def rec(type: str, payload: Any, **extra: Any) -> dict[str, Any]:
    return {"timestamp": "2026-01-01T00:00:00.000Z", "type": type, "payload": payload, **extra}


def call(name: str, args: Any, call_id: str) -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    payload = {"type": "function_call", "name": name, "arguments": raw, "call_id": call_id}
    return rec("response_item", payload)


def output(call_id: str, value: Any) -> dict[str, Any]:
    return rec(
        "response_item", {"type": "function_call_output", "call_id": call_id, "output": value}
    )


META = rec("session_meta", {"id": "s-1", "cli_version": "0.120.0", "originator": "codex_cli_rs"})


def by_id(run) -> dict[str, Any]:
    return {step.id: step for step in run.steps if step.kind == "tool_call"}


# --- the unified-exec fixture


def test_unified_exec_fixture_counts():
    run = run_of(UNIFIED.read_bytes())
    calls = [s for s in run.steps if s.kind == "tool_call"]
    # 12 function_call + 2 custom_tool_call lines (grep -c '"function_call"' / 'custom_tool_call"')
    # + 1 mcp_tool_call_end whose call is not in the file = 15 tool calls
    assert len(calls) == 15
    # errors: E2 (its session exits 2), W3 (exit 2), P1 (verification failed), E3 (sandbox),
    # E4 (exec_command_end exit 1), M1 (mcp isError), M2 (mcp Err), W5 (aborted by user)
    errors = {s.id for s in calls if s.status == "error"}
    assert errors == {
        "call_E2", "call_W3", "call_P1", "call_E3", "call_E4", "call_M1", "call_M2", "call_W5",
    }  # fmt: skip
    assert run.id == "019b8a6e-5c1f-7d20-9a3b-4c5d6e7f8091"
    assert run.metadata["cli_version"] == "0.120.0" and run.metadata["model"] == "gpt-5.2-codex"
    assert run.metadata["git"]["branch"] == "main"
    assert run.metadata["skipped_records"] == {"fixture_note": 1, "event:future_event_kind": 1}
    assert run.metadata["context_records"] == {"event:task_started": 1, "event:task_complete": 1}
    kinds = [s.kind for s in run.steps]
    # 2 users (the environment_context one is a system step), 1 assistant, 2 reasoning;
    # system: developer message, environment_context, turn aborted, error event = 4
    assert (kinds.count("user"), kinds.count("assistant"), kinds.count("reasoning")) == (2, 1, 2)
    assert kinds.count("system") == 4
    assert run.steps[-1].text == "error: stream disconnected before completion"
    assert run.skipped == 0


def test_framing_drops_chunk_id_and_wall_time_only():
    steps = by_id(run_of(UNIFIED.read_bytes()))
    assert steps["call_E1"].result == (
        "Process exited with code 0\nOriginal token count: 6\nOutput:\nMakefile\nsrc\ntests\n"
    )
    assert steps["call_E1"].args == {"cmd": "ls", "workdir": "/home/dev/shop"}
    assert steps["call_W1"].args == {"session_id": 12, "chars": "", "yield_time_ms": 30000}
    assert steps["call_W1"].result.startswith("Process running with session ID 12\n")
    assert all("Chunk ID" not in str(s.result) and "Wall time" not in str(s.result)
               for s in steps.values())  # fmt: skip


def test_a_long_command_gets_its_exit_status_from_the_later_poll():
    steps = by_id(run_of(UNIFIED.read_bytes()))
    exec_step, polls = steps["call_E2"], [steps[f"call_W{n}"] for n in (1, 2, 3)]
    assert [p.status for p in polls] == ["ok", "ok", "error"]  # running, running, exited 2
    assert exec_step.status == "error"
    assert exec_step.ended_at == polls[-1].ended_at  # the exit came with the third poll
    # the polls stay their own steps, after the exec_command
    assert [p.seq for p in polls] == [exec_step.seq + 1, exec_step.seq + 2, exec_step.seq + 3]
    # make bench (session 15) never exited in the file: still ok, polls on their own
    assert steps["call_E6"].status == "ok" and steps["call_W4"].status == "ok"


def test_session_join_without_an_exec_command_end_event():
    data = lines(
        META,
        call("exec_command", {"cmd": "make test"}, "e1"),
        output("e1", "Chunk ID: a\nWall time: 10.0 seconds\nProcess running with session ID 3\n"
                     "Original token count: 1\nOutput:\nbuilding\n"),
        call("write_stdin", {"session_id": 3, "chars": ""}, "w1"),
        output("w1", "Chunk ID: b\nWall time: 2.0 seconds\nProcess exited with code 1\n"
                     "Original token count: 1\nOutput:\nFAILED\n"),
        call("exec_command", {"cmd": "make lint"}, "e2"),
        output("e2", "Process running with session ID 4"),  # header only, as some versions write
        call("write_stdin", {"session_id": 4, "chars": ""}, "w2"),
        output("w2", "Process exited with code 0"),
    )  # fmt: skip
    steps = by_id(run_of(data))
    assert [steps[k].status for k in ("e1", "w1", "e2", "w2")] == ["error", "error", "ok", "ok"]
    assert steps["e2"].result == "Process running with session ID 4"


def test_explicit_end_events_win_before_or_after_the_output():
    steps = by_id(run_of(UNIFIED.read_bytes()))
    # exec_command_end exit_code 1 before an output list with no framing and no error words
    assert steps["call_E4"].status == "error"
    assert steps["call_E4"].result.startswith("src/tax.c:3:10: code should be clang-formatted")
    # mcp_tool_call_end isError after a plain-text output
    assert steps["call_M1"].status == "error"
    assert steps["call_M1"].result == "no index for this repository"
    # mcp_tool_call_end whose call is not in the file: a step of its own
    fetch = steps["call_M2"]
    assert fetch.tool == "docs__fetch" and fetch.args == {"url": "https://example.com/tax"}
    assert fetch.result == "tool call failed: timed out after 60s" and fetch.status == "error"
    # apply_patch: plain-text failure (and patch_apply_end success false), then JSON success
    assert steps["call_P1"].status == "error"
    assert steps["call_P2"].result == "Success. Updated the following files:\nM src/tax.c\n"
    assert steps["call_P2"].status == "ok"


def test_an_end_event_overrides_the_text():
    data = lines(
        META,
        call("exec_command", {"cmd": "grep -q x f"}, "e1"),
        output("e1", "Permission denied"),  # the text alone would say error
        rec("event_msg", {"type": "exec_command_end", "call_id": "e1", "exit_code": 0}),
        call("exec_command", {"cmd": "rm -rf /"}, "e2"),
        rec("event_msg", {"type": "exec_command_end", "call_id": "e2", "exit_code": -1,
                          "status": "declined"}),
        output("e2", "Process exited with code 0\nOutput:\n"),
        call("apply_patch", {"input": "*** Begin Patch"}, "p1"),
        output("p1", "Done!"),
        rec("event_msg", {"type": "patch_apply_end", "call_id": "p1", "success": False}),
    )  # fmt: skip
    steps = by_id(run_of(data))
    assert [steps[k].status for k in ("e1", "e2", "p1")] == ["ok", "error", "error"]


def test_sandbox_denials_and_aborts_are_errors_by_their_text():
    steps = by_id(run_of(UNIFIED.read_bytes()))
    assert steps["call_E3"].result.startswith("exec_command failed for `/bin/bash -lc 'curl")
    assert steps["call_W5"].result == "aborted by user after 12.0s"
    assert text_errors.error_rule(steps["call_E3"].result, text_errors.CODEX) == "tool failed"
    for text, rule in [
        ('SandboxDenied { message: "touch: /etc/x: Operation not permitted" }',
         "permission or sandbox denial"),
        ("write_stdin failed: Unknown process id 5", "tool failed"),
        ("write_stdin failed: stdin is closed for this session; rerun exec_command with tty=true",
         "tool failed"),
        ("aborted by user after 12.0s", "aborted"),
        ("Exit code: 2\nWall time: 0.1 seconds\nOutput:\n", "exit code"),
        ("unsupported call: browser_open", "unsupported call"),
    ]:  # fmt: skip
        assert text_errors.error_rule(text, text_errors.CODEX) == rule, text
    # exit 0 framing with error words in the output is ok: the exit code is explicit
    assert codex.read("Process exited with code 0\nOutput:\nPermission denied\n").error is False


@pytest.mark.parametrize(
    ("value", "result", "error"),
    [
        ("plain text", "plain text", False),
        ({"type": "input_text", "text": "Process exited with code 3\nOutput:\nx"},
         "Process exited with code 3\nOutput:\nx", True),
        ([{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}], "a\nb", False),
        ([{"type": "input_text", "text": "apply_patch verification failed: no hunk"}],
         "apply_patch verification failed: no hunk", True),
        ({"content": "done", "success": False}, "done", True),
        ({"content": [{"type": "text", "text": "hits: 0"}], "isError": False}, "hits: 0", False),
        ('{"output": "Success.", "metadata": {"exit_code": 0, "duration_seconds": 0.0}}',
         "Success.", False),
        ('{"output": "boom", "metadata": {"exit_code": 1}}', "boom", True),
        ("Exit code: 1\nWall time: 3 seconds\nOutput:\nF", "Exit code: 1\nOutput:\nF", True),
        ("Chunk ID: 1\nWall time: 1 seconds\nProcess exited with code 0\nOutput:\nok\n",
         "Process exited with code 0\nOutput:\nok\n", False),
    ],
)  # fmt: skip
def test_output_shapes(value, result, error):
    read = codex.read(value)
    assert (read.result, read.error) == (result, error)


def test_invalid_actions():
    data = lines(
        META,
        call("exec_command", '{"cmd": "ls"', "c1"),  # arguments that are not JSON
        output("c1", "failed to parse function arguments: EOF while parsing an object"),
        call("browser_open", {"url": "x"}, "c2"),
        output("c2", "unsupported call: browser_open"),
        call("exec_command", {"cmd": "ls"}, "c3"),
        output("c3", "Process exited with code 0\nOutput:\n"),
    )
    steps = by_id(run_of(data))
    assert [steps[k].status for k in ("c1", "c2", "c3")] == ["invalid", "invalid", "ok"]
    assert steps["c1"].args == '{"cmd": "ls"'  # kept as written


def test_tokens_are_not_added_up():
    run = run_of(UNIFIED.read_bytes())
    first = run.steps[3]  # the reasoning that opened the first response
    # last_token_usage: input 8000 (6000 of them cached), output 300 (200 of them reasoning)
    assert (first.kind, first.tokens_in, first.tokens_out) == ("reasoning", 8000, 300)
    total = run.metadata["total_token_usage"]
    assert total["output_tokens"] == 700 and total["input_tokens"] == 17000


# --- forked rollout, 0.149


def test_forked_rollout_is_one_run_named_after_its_first_session_meta():
    run = run_of(FORKED.read_bytes())
    child, parent = "019c2b10-0a1b-7c2d-8e3f-405162738495", "019c2a77-9f8e-7d6c-5b4a-392817160504"
    assert run.id == child
    assert run.metadata["session_ids"] == [child, parent]
    assert run.metadata["forked_from_id"] == parent
    assert run.metadata["cli_version"] == "0.149.0"  # the first session_meta's fields win
    assert run.metadata["models"] == ["gpt-5.1-codex", "gpt-5.2-codex"]


def test_item_completed_copies_are_not_counted_twice():
    run = run_of(FORKED.read_bytes())
    kinds = [s.kind for s in run.steps]
    # each user text is written 3 times (item, user_message, item_completed UserMessage), the
    # answer 3 times, each command once as a call and once as an item_completed
    assert [s.text for s in run.steps if s.kind == "user"] == [
        "Add a --dry-run flag",
        "Now also add --verbose",
    ]
    assert kinds.count("assistant") == 1 and run.tool_calls == 2
    assert [s.status for s in run.steps if s.kind == "tool_call"] == ["error", "ok"]
    assert run.metadata["context_records"] == {
        "event:item_completed": 2,
        "compacted": 1,
        "event:context_compacted": 1,
        "world_state": 1,
    }


def test_a_repeated_message_is_still_two_steps():
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    event = {"type": "user_message", "message": "go"}
    done = {"type": "item_completed", "item": {"type": "UserMessage", "content": [
        {"type": "text", "text": "go"}]}}  # fmt: skip
    data = lines(
        META,
        *[rec("response_item", user), rec("event_msg", event), rec("event_msg", done)] * 2,
    )
    assert [s.text for s in run_of(data).steps] == ["go", "go"]


def test_item_completed_lends_its_exit_code_but_makes_no_step():
    data = lines(
        META,
        call("exec_command", {"cmd": "ls"}, "c1"),
        output("c1", [{"type": "input_text", "text": "no framing here"}]),
        rec("event_msg", {"type": "item_completed", "item": {
            "type": "commandExecution", "id": "c1", "exit_code": 2, "status": "failed"}}),
        rec("event_msg", {"type": "item_completed", "item": {
            "type": "commandExecution", "id": "elsewhere", "exit_code": 0}}),
    )  # fmt: skip
    run = run_of(data)
    assert run.tool_calls == 1 and run.steps[0].status == "error"


def test_sub_agent_rollout_and_spawns_are_recorded():
    source = {"subagent": {"thread_spawn": {"parent_thread_id": "th-parent", "depth": 1}}}
    data = lines(
        rec("session_meta", {"id": "th-child", "source": source, "agent_nickname": "Ada",
                             "agent_role": "explorer", "cli_version": "0.140.0"}),
        rec("event_msg", {"type": "collab_agent_spawn_end", "new_thread_id": "th-grandchild",
                          "new_agent_role": "worker", "prompt": "look", "model": "gpt-5.2"}),
        call("exec_command", {"cmd": "ls"}, "c1"),
    )  # fmt: skip
    meta = run_of(data).metadata
    assert meta["source"] == "subagent" and meta["subagent"] == source["subagent"]
    assert meta["parent_thread_id"] == "th-parent"
    assert (meta["agent_nickname"], meta["agent_role"]) == ("Ada", "explorer")
    assert meta["spawned_agents"] == [
        {"thread_id": "th-grandchild", "role": "worker", "model": "gpt-5.2"}
    ]


# --- what the engine makes of polling


def loops(run) -> list[tuple[str, str, str | None]]:
    findings = analyze(run).findings
    return [(f.detector, f.severity, f.tool) for f in findings if f.severity in ("warn", "stop")]


def test_polls_with_new_output_are_progress_not_a_loop():
    run = run_of(POLLING.read_bytes())
    polls = [s for s in run.steps if s.tool == "write_stdin"]
    assert len(polls) == 6  # grep -c write_stdin: 6 polls, identical arguments
    assert len({json.dumps(p.args, sort_keys=True) for p in polls}) == 1
    assert len({p.result for p in polls}) == 6  # each brought new output
    assert loops(run) == []
    assert analyze(run).verdict == "ok"


def test_identical_polls_getting_nothing_new_are_a_loop():
    run = run_of(STUCK.read_bytes())
    polls = [s for s in run.steps if s.tool == "write_stdin"]
    # 6 polls of session 9; their outputs differ only in Chunk ID and Wall time
    assert len(polls) == 6 and len({p.result for p in polls}) == 1
    found = loops(run)
    assert ("repeat", "stop", "write_stdin") in found
    assert analyze(run).verdict == "stop"


# --- detection


def test_detected_by_evidence_even_when_the_first_records_are_not_codex_types():
    """The case that drove the change: the old sniffer wanted each of the first 5 lines to be
    a known Codex type, so a 0.149 rollout opening with `world_state` (or any newer type)
    was not recognised."""
    data = lines(
        rec("world_state", {"cwd": "/x"}, ordinal=1),
        rec("thread_rolled_back", {"turns": 1}, ordinal=2),
        rec("session_meta", {"id": "s", "cli_version": "0.149.0"}, ordinal=3),
        call("exec_command", {"cmd": "ls"}, "c1"),
    )
    claim = codex.claim(sample_of(data))
    assert claim.score >= 0.8 and "75%" in claim.reason  # 3 of 4 records have Codex types
    assert detect_format(data) == "codex"
    assert run_of(data).metadata["skipped_records"] == {"thread_rolled_back": 1}


def test_fixtures_are_claimed_with_a_reason():
    for path in (UNIFIED, FORKED, POLLING, STUCK):
        head = path.read_bytes()[:65536]
        assert detect_format(head) == "codex", path.name
        assert codex.claim(sample_of(head)).score >= 0.9


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "1"}\n',
         "no record is {timestamp, type, payload}"),
        (b'{"type": "tool_call", "tool": "a", "args": {}}\n', "no record is"),
        (lines({"type": "agent.message", "payload": {"x": 1}}), "none has a Codex type"),
        (b'{"type": "user", "uuid": "u", "message": {"role": "user", "content": "hi"}}\n',
         "no record is"),
        (b"not json at all", "not JSONL"),
    ],
)  # fmt: skip
def test_other_files_are_not_claimed(data, reason):
    claim = codex.claim(sample_of(data))
    assert claim.score == 0 and reason in claim.reason
    assert not codex.sniff(data)


def test_a_first_record_longer_than_the_head_is_still_claimed():
    meta = rec("session_meta", {"id": "s", "base_instructions": {"text": "x" * 70_000}})
    data = lines(meta, call("exec_command", {"cmd": "ls"}, "c1"))
    claim = codex.claim(sample_of(data[:65536], complete=False))
    assert claim.score >= 0.5 and "session_meta" in claim.reason


# --- bad input


@pytest.mark.parametrize("data", [b"", b"\n\n", b'{"timestamp": "t", "type": "session_meta", "pay'])
def test_empty_or_truncated_file_fails_clearly(data):
    with pytest.raises(TraceError):
        run_of(data, format="codex")


def test_bad_lines_are_skipped_and_counted_with_their_line():
    data = UNIFIED.read_bytes().split(b"\n")
    data[5] = b'{"timestamp": "t", "type": "resp'  # truncated line
    data[6] = b'{"timestamp": "t", "type": "event_msg", "payload": "\xff\xfe"}'  # not UTF-8
    run = run_of(b"\n".join(data), source="r.jsonl")
    assert run.skipped == 2
    assert run.warnings[0].startswith("r.jsonl:6: invalid JSON")
    assert run.warnings[1].startswith("r.jsonl:7: invalid UTF-8")


def test_deep_nesting_is_refused_and_deep_values_cut():
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    data = lines(META, call("exec_command", {"cmd": "ls"}, "c1"), output("c1", deep))
    run = run_of(data, format="codex")  # the output line nests 200 levels: skipped, counted
    assert run.skipped == 1 and "nested deeper than 80 levels" in run.warnings[0]
    # arguments are JSON text: deep text parses, and is cut like any deep value
    run = run_of(lines(META, call("exec_command", {"v": deep}, "c1")))
    assert "nested deeper than 64 levels, cut" in json.dumps(run.steps[0].args)
    shallow: Any = "x"
    for _ in range(30):
        shallow = [shallow]
    run = run_of(lines(META, call("f", {"v": shallow}, "c1")), limits=Limits(max_depth=20))
    assert "nested deeper than 20 levels, cut" in json.dumps(run.steps[0].args)


def test_huge_strings_are_clipped_with_a_marker():
    data = lines(
        META,
        call("exec_command", {"cmd": "y" * 5000}, "c1"),
        output("c1", "Process exited with code 0\nOutput:\n" + "z" * 5000),
    )
    run = run_of(data, limits=Limits(max_value_chars=100))
    step = run.steps[0]
    assert "truncated" in step.args["cmd"] and len(step.args["cmd"]) < 200
    assert "truncated" in step.result and len(step.result) < 200


def test_a_long_command_failing_again_and_again_is_seen_through_its_polls():
    """`make test` run 4 times, each time in a new session (its own id in the result), each
    failing with exit 2 in the poll that follows: the exit status joined to the exec_command
    steps makes them 4 identical failing calls, which the engine flags."""
    records = [META]
    for n in range(4):
        records += [
            call("exec_command", {"cmd": "make test"}, f"e{n}"),
            output(f"e{n}", f"Chunk ID: a{n}\nWall time: 10.0 seconds\nProcess running with "
                            f"session ID {20 + n}\nOriginal token count: 3\nOutput:\nbuilding\n"),
            call("write_stdin", {"session_id": 20 + n, "chars": ""}, f"w{n}"),
            output(f"w{n}", f"Chunk ID: b{n}\nWall time: 3.0 seconds\nProcess exited with code 2"
                            "\nOriginal token count: 3\nOutput:\ntest_tax FAILED\n"),
        ]  # fmt: skip
    run = run_of(lines(*records))
    assert [s.status for s in run.steps if s.tool == "exec_command"] == ["error"] * 4
    assert ("repeat", "warn", "exec_command") in loops(run)
