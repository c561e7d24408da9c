"""Hook-event logs: Claude Code's and Cursor's (fixtures written from the hooks' documented
payloads and the notes §3.22), and Cursor's agent transcripts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import detection
from runs.importers import TraceError, detect_format, iter_runs
from tests.importers.spooling import held_and_spooled

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def calls(run):
    return [(s.tool, s.id, s.status) for s in run.steps if s.kind == "tool_call"]


def test_claude_code_hooks_one_run_per_session_with_results_by_tool_use_id():
    path = DATA / "claude_code_hooks.jsonl"
    assert detect_format(path.read_bytes()) == "claude-code-hooks"
    first, second = iter_runs(path)
    assert (first.id, second.id) == ("s1", "s2")
    # s1: Bash (stderr "command not found"), Edit (PostToolUseFailure), Read; s2: Glob
    assert calls(first) == [
        ("Bash", "toolu_01", "error"),
        ("Edit", "toolu_02", "error"),
        ("Read", "toolu_03", "ok"),
    ]
    assert calls(second) == [("Glob", "toolu_09", "ok")]
    bash = first.steps[2]
    assert bash.args == {"command": "pytst -q", "description": "run tests"}
    assert bash.started_at is not None and bash.ended_at > bash.started_at
    assert [s.text for s in first.steps if s.kind == "user"] == ["make the tests pass"]


def test_cursor_hooks_pair_before_and_after_events():
    path = DATA / "cursor_hooks.jsonl"
    assert detect_format(path.read_bytes()) == "cursor"
    (run,) = iter_runs(path)
    assert run.id == "c-77" and run.metadata["model"] == "claude-4.5-sonnet"
    assert calls(run) == [
        # the first lint run fails only in its text, which no common rule reads as an error
        # (eslint's "✖ 1 problem"): without an exit code the status stays ok
        ("Shell", None, "ok"),
        ("Read", None, "ok"),  # beforeReadFile: no result
        ("Edit", None, "ok"),
        ("Shell", None, "ok"),  # exit_code 0
        ("github.create_issue", None, "error"),  # result_json isError
        ("Shell", "tu_1", "error"),  # postToolUseFailure, permission_denied
    ]
    mcp = next(s for s in run.steps if s.tool == "github.create_issue")
    assert mcp.args == {"title": "lint"}
    assistant = next(s for s in run.steps if s.kind == "assistant")
    assert (assistant.tokens_in, assistant.tokens_out) == (1200, 40)


def test_cursor_transcript_without_ids_pairs_results_with_the_nearest_call():
    path = DATA / "cursor_transcript.jsonl"
    assert detect_format(path.read_bytes()) == "cursor"
    (run,) = iter_runs(path)
    assert calls(run) == [
        ("Shell", None, "ok"),  # no result in the transcript
        ("Read", None, "ok"),
        ("StrReplace", None, "ok"),
        ("Shell", None, "error"),  # "tsc: not found"
    ]
    assert run.steps[0].text == "why does the build fail?"  # <user_query> taken off
    read = next(s for s in run.steps if s.tool == "Read")
    assert json.loads(read.result) == {"scripts": {}}


def test_a_repeated_failing_hook_call_is_a_loop():
    lines = []
    for n in range(6):
        event = {"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash"}
        event |= {"tool_input": {"command": "make"}, "tool_use_id": f"t{n}"}
        lines.append(event)
        lines.append(
            event | {"hook_event_name": "PostToolUseFailure", "error": "make: *** No rule"}
        )
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (run,) = iter_runs(data, source="hooks.jsonl")
    assert detection.analyze(run).verdict == "stop"


def test_unknown_events_and_bad_lines_are_skipped_with_their_line():
    path = DATA / "claude_code_hooks.jsonl"
    data = path.read_bytes() + b'{"session_id": "s1", "hook_event_name": "Nope"}\n[1]\n'
    first, _ = iter_runs(data, source="h.jsonl", format="claude-code-hooks")
    assert first.skipped == 2
    assert "h.jsonl:14: field 'hook_event_name': unknown hook event 'Nope'" in first.warnings
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"", format="claude-code-hooks"))


def hook(event: str, call_id: str, **fields) -> dict:
    return {"session_id": "s", "hook_event_name": event, "tool_name": "Bash",
            "tool_use_id": call_id, **fields}  # fmt: skip


def test_pre_and_post_records_of_one_call_are_one_step_and_repeats_are_new_steps():
    command = {"command": "npm test"}
    records = []
    for n in range(3):  # the same call made three times, each with its own tool_use_id
        records.append(hook("PreToolUse", f"toolu_{n}", tool_input=command))
        records.append(hook("PostToolUse", f"toolu_{n}", tool_input=command,
                            tool_response={"stdout": "", "stderr": "Exit code 1"}))  # fmt: skip
    records.append(hook("PreToolUse", "toolu_9", tool_input={"command": "ls"}))  # no result
    data = "\n".join(json.dumps(r) for r in records).encode()
    (run,) = iter_runs(data, source="hooks.jsonl")
    assert calls(run) == [("Bash", f"toolu_{n}", "error") for n in range(3)] + [
        ("Bash", "toolu_9", "ok")
    ]
    assert [s.args for s in run.steps] == [command] * 3 + [{"command": "ls"}]
    assert run.steps[3].result is None  # a PreToolUse alone carries no result: unknown
    assert run.warnings == []


def _cursor(turns: int, seed: int) -> bytes:
    """A long Cursor transcript: user queries, assistant lines with thinking, text and one to
    three calls in each spelling (a few with ids), and results: most calls get none, some
    the next line, some by `tool_use_id` many lines later, some failed, one before any call."""
    rnd = random.Random(seed)
    out: list[dict] = [{"role": "user", "message": {"content": [
        {"type": "tool_result", "content": "stray"}]}}]  # fmt: skip
    late: list[tuple[int, str]] = []
    for n in range(turns):
        for when, cid in [item for item in late if item[0] <= n]:
            late.remove((when, cid))
            out.append({"role": "user", "message": {"content": [
                {"type": "tool_result", "tool_use_id": cid, "content": f"late {when % 3}"}]}})  # fmt: skip
        if rnd.random() < 0.05:
            text = f"<user_query>\nnext task {n}\n</user_query>"
            out.append({"role": "user", "message": {"content": [{"type": "text", "text": text}]}})
            continue
        blocks: list[dict] = []
        if rnd.random() < 0.3:
            blocks.append({"type": "thinking", "thinking": f"look at {n % 7}"})
        if rnd.random() < 0.7:
            blocks.append({"type": "text", "text": f"step {n % 11}"})
        for k in range(rnd.choice([1, 1, 2, 3])):
            block = {"type": rnd.choice(["tool_use", "tool_call", "tool-call"]),
                     "name": rnd.choice(["Shell", "Read", "Grep"]),
                     "input": {"command": f"npm test {n % 9}"}}  # fmt: skip
            if rnd.random() < 0.1:
                block["id"] = f"c{n}_{k}"
                if rnd.random() < 0.5:
                    late.append((n + rnd.randint(3, 200), block["id"]))
            blocks.append(block)
        out.append({"role": "assistant", "message": {"content": blocks}})
        if rnd.random() < 0.3:
            text = rnd.choice(["ok", "sh: 1: tsc: not found", "Error: ENOENT"])
            result = {"type": rnd.choice(["tool_result", "tool-result"]), "content": text}
            if rnd.random() < 0.2:
                result["is_error"] = True
            out.append({"role": "user", "message": {"content": [result]}})
    return ("\n".join(json.dumps(record) for record in out) + "\n").encode()


@pytest.mark.parametrize("seed", range(3))
def test_a_spooled_cursor_transcript_reads_as_the_same_transcript_held_whole(monkeypatch, seed):
    whole, spooled = held_and_spooled(
        _cursor(2000, seed), monkeypatch, source="t.jsonl", format="cursor"
    )
    assert spooled.steps.spilled > 3000
    steps = [s for s in whole.steps if s.kind == "tool_call"]
    assert any(str(s.result).startswith("late") for s in steps)  # named, lines later
    assert {s.status for s in steps} == {"ok", "error"} and any(s.result is None for s in steps)
    assert whole.warnings  # the stray result


def test_the_cursor_transcript_reads_the_same_through_a_spool_of_a_tiny_window(monkeypatch):
    whole, spooled = held_and_spooled(
        (DATA / "cursor_transcript.jsonl").read_bytes(),
        monkeypatch,
        source="t.jsonl",
        format="cursor",
        window=2,
    )
    assert spooled.steps.spilled > 5


def test_two_identical_cursor_calls_each_get_their_own_result():
    call = {"role": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Shell", "input": {"command": "make"}}]}}  # fmt: skip
    lines = [call, call] + [
        {"role": "user", "message": {"content": [{"type": "tool_result", "content": text}]}}
        for text in ("first", "second")
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    (run,) = iter_runs(data, source="t.jsonl", format="cursor")
    assert [s.result for s in run.steps] == ["second", "first"]  # each the nearest waiting
