"""Gemini CLI chat recordings in JSONL (v0.40+), on fixtures written from the notes.

Both fixtures are written from the notes §3.27 (and §3.6 (b) for the message shape), not real
files (no licensed real recording exists to vendor):

- gemini_chat_session.jsonl (17 lines): a metadata line; `g1` written three times (no calls,
  then a call `executing`, then two calls done); a `$set`; an `info` and an `error` notice;
  `u2`/`g2` then `{"$rewindTo": "u2"}`; a broken line (12) and a record of no known kind (15);
  `u3`/`g3` with a sub-agent call (`agentId`), an unknown tool and a call left `scheduled`;
  a `warning`; a `$set` with `summary`.
- gemini_chat_checkpoint.jsonl (9 lines): u1, g1 (make: Exit Code 2), n1 (info), u2, g2, then
  a `$set` with `messages` [s1 (a new summary), u2, g2 with its output masked], then g3 calling
  in a `functionCall` part and u3 answering in a `functionResponse` part.

Counts are by hand from those lines (see each test).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detection.engine import analyze
from runs.importers import iter_runs
from runs.importers.errors import TraceError
from runs.importers.gemini import call_status
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
SESSION = DATA / "gemini_chat_session.jsonl"
CHECKPOINT = DATA / "gemini_chat_checkpoint.jsonl"


def one_run(data: bytes, **kwargs):
    (run,) = iter_runs(data, source=kwargs.pop("source", "s.jsonl"), **kwargs)
    return run


def jsonl(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


META = {"sessionId": "s-1", "projectHash": "ab" * 32, "startTime": "2026-01-01T00:00:00Z"}


def shell(call_id: str, code: int) -> dict:
    out = f"Command: pytest\nDirectory: (root)\nOutput: 1 failed\nError: (none)\nExit Code: {code}"
    response = {"id": call_id, "name": "run_shell_command", "response": {"output": out}}
    return {
        "id": call_id,
        "name": "run_shell_command",
        "args": {"command": "pytest"},
        "status": "success",
        "result": [{"functionResponse": response}],
    }


def gemini(msg_id: str, *calls: dict) -> dict:
    return {"id": msg_id, "type": "gemini", "content": "", "toolCalls": list(calls)}


def user(msg_id: str, text: str = "go") -> dict:
    return {"id": msg_id, "type": "user", "content": text}


# --- the session fixture


def test_session_steps_counted_by_hand():
    run = one_run(SESSION.read_bytes())
    assert run.format == "gemini-chat" and run.id == "a1b2c3d4-5555-4eee-8fff-000000000027"
    # live: u1 (1) + g1 (reasoning + 2 calls = 3) + n1, n2 (2); branch marker + u2 + g2
    # (assistant + 1 call) = 4; u3 (1) + g3 (assistant + sub-agent marker + 3 calls = 5) + n3
    assert len(run.steps) == 17
    # g1's 2 calls (not 3: its earlier versions are replaced), g2's 1, g3's 3
    assert run.tool_calls == 6
    statuses = [s.status for s in run.steps if s.is_tool_call]
    # shell Exit Code 1, read_file error, g2's cancelled call, grep ok, unknown tool, scheduled
    assert statuses == ["error", "error", "error", "ok", "invalid", "ok"]
    assert run.skipped == 2  # line 12 (broken JSON) and line 15 (no known kind)
    assert run.warnings[0].startswith("s.jsonl:12: invalid JSON")
    assert run.warnings[1].startswith("s.jsonl:15: not a Gemini chat record")


def test_the_last_version_of_a_message_wins_in_its_first_place():
    run = one_run(SESSION.read_bytes())
    kinds = [s.kind for s in run.steps[:4]]
    assert kinds == ["user", "reasoning", "tool_call", "tool_call"]
    reasoning, make, read = run.steps[1:4]
    assert reasoning.tokens_in == 2100 and reasoning.tokens_out == 64  # from g1's 3rd version
    assert make.result.startswith("Command: pytest -q") and make.status == "error"
    assert read.result == "File not found: /w/tests/test_x.py"
    assert make.batch_id == read.batch_id == "g1"
    assert run.metadata["model"] == "gemini-2.5-pro"
    assert run.metadata["lastUpdated"] == "2026-02-03T10:01:03.000Z"  # the last `$set`
    assert run.metadata["summary"] == "Fix the failing tests"
    assert run.metadata["kind"] == "main" and run.metadata["recording"] == "jsonl"


def test_notices_are_system_steps_and_counted():
    run = one_run(SESSION.read_bytes())
    notices = [s.text for s in run.steps if s.kind == "system" and s.id in ("n1", "n2", "n3")]
    assert notices == [
        "info: Request cancelled.",
        "error: [API Error: 429 Too Many Requests: Resource exhausted. Please try again later.]",
        "warning: Approaching the context window limit.",
    ]
    assert run.metadata["notices"] == {"info": 1, "error": 1, "warning": 1}


def test_rewind_keeps_the_dropped_messages_as_a_sibling_branch():
    run = one_run(SESSION.read_bytes())
    by_id = {s.id: s for s in run.steps}
    marker = by_id["branch:u2"]
    assert marker.kind == "system" and marker.parent_id == "n2"  # the last step before u2
    assert "2 messages from 'u2'" in marker.text and "line 11" in marker.text
    abandoned = [s for s in run.steps if s.parent_id == "branch:u2"]
    assert [s.id for s in abandoned] == ["u2", "g2", "read_file-1770112810000-cc"]
    # the live branch goes on under the same step as the branch marker
    assert by_id["u3"].parent_id == "n2" and by_id["g3"].parent_id == "n2"
    assert run.metadata["rewinds"] == 1 and run.metadata["abandoned_messages"] == 2
    assert [s.parent_id for s in run.steps[:6]] == [None] * 6  # before the fork: the trunk


def test_sub_agent_calls_hang_under_their_agent():
    run = one_run(SESSION.read_bytes())
    by_id = {s.id: s for s in run.steps}
    agent = by_id["agent:codebase_investigator-7f3e"]
    assert agent.kind == "system" and agent.parent_id == "n2"
    assert by_id["grep-1770112862000-dd"].parent_id == agent.id
    assert by_id["run_tests-1770112862000-ee"].parent_id == "n2"  # the main agent's own
    assert run.metadata["sub_agents"] == ["codebase_investigator-7f3e"]


def test_unknown_tool_is_invalid_and_a_leftover_call_has_no_result():
    run = one_run(SESSION.read_bytes())
    by_id = {s.id: s for s in run.steps}
    unknown = by_id["run_tests-1770112862000-ee"]
    assert unknown.status == "invalid" and "not found in registry" in unknown.result
    leftover = by_id["replace-1770112862000-ff"]
    assert leftover.result is None and leftover.status == "ok"
    cancelled = by_id["read_file-1770112810000-cc"]
    assert cancelled.status == "error" and cancelled.result.startswith("[Operation Cancelled]")


def test_abandoned_and_live_branches_do_not_see_each_other():
    """The engine's own verdict: pytest fails twice on the abandoned branch, once on the live
    one. Read as a tree, only the abandoned branch's second call repeats (1 of 3 calls); read
    flat, the live call would repeat them too (2 of 3)."""
    data = jsonl(
        META,
        user("u1"),
        user("u2"),
        gemini("g1", shell("c1", 1)),
        gemini("g2", shell("c2", 1)),
        {"$rewindTo": "u2"},
        user("u3", "once more"),
        gemini("g3", shell("c3", 1)),
    )
    run = one_run(data)
    assert [s.status for s in run.steps if s.is_tool_call] == ["error"] * 3
    assert analyze(run).stall_score == pytest.approx(1 / 3, abs=1e-3)
    for step in run.steps:
        step.parent_id = step.lane = None
    assert analyze(run).stall_score == pytest.approx(2 / 3, abs=1e-3)


def test_rewind_to_an_unknown_id_drops_everything_and_warns():
    data = jsonl(META, user("u1"), gemini("g1", shell("c1", 0)), {"$rewindTo": "nope"}, user("u2"))
    run = one_run(data)
    # marker, u1, c1 (abandoned, under the marker), then u2 as a root
    assert [(s.id, s.parent_id) for s in run.steps] == [
        ("branch:u1", None),
        ("u1", "branch:u1"),
        ("c1", "branch:u1"),
        ("u2", None),
    ]
    assert "names no live message" in run.warnings[0] and run.skipped == 0


def test_a_message_written_again_after_a_rewind_is_new():
    data = jsonl(META, user("u1"), user("u2", "first"), {"$rewindTo": "u2"}, user("u2", "again"))
    run = one_run(data)
    assert [(s.id, s.text) for s in run.steps] == [
        ("u1", "go"),
        ("branch:u2", run.steps[1].text),
        ("u2", "first"),
        ("u2#2", "again"),  # ids stay unique in the run
    ]
    assert run.steps[3].parent_id == "u1"


def test_linear_recording_has_no_parent_ids():
    run = one_run(jsonl(META, user("u1"), gemini("g1", shell("c1", 0))))
    assert [s.parent_id for s in run.steps] == [None, None]
    assert run.steps[1].status == "ok"  # Exit Code: 0 and `Error: (none)` are not errors


# --- checkpoints


def test_checkpoint_replaces_versions_and_keeps_what_it_leaves_out():
    run = one_run(CHECKPOINT.read_bytes())
    # u1, g1's call, n1 (left out by the checkpoint: kept in place), s1 (new: before u2),
    # u2, g2's call (masked version), g3's text and its call made in a functionCall part
    assert [s.id for s in run.steps] == [
        "u1",
        "run_shell_command-1770192001000-01",
        "n1",
        "s1",
        "u2",
        "run_shell_command-1770192002000-02",
        "g3",
        "fc-ls",
    ]
    assert run.metadata["checkpoints"] == 1
    masked = run.steps[5]
    assert masked.result.startswith("[output masked") and masked.status == "ok"
    assert run.steps[1].status == "error"  # make: Exit Code: 2
    assert run.tool_calls == 3 and run.skipped == 0


def test_function_response_parts_answer_function_call_parts():
    run = one_run(CHECKPOINT.read_bytes())
    call = run.steps[-1]
    assert call.tool == "run_shell_command" and call.args == {"command": "ls out"}
    assert call.result.startswith("Command: ls out") and call.status == "ok"
    assert call.batch_id == "g3"
    assert not any(s.id == "u3" for s in run.steps)  # only results: not a user turn


def test_legacy_whole_record_on_the_first_line():
    legacy = {**META, "messages": [user("u1"), gemini("g1", shell("c1", 1))]}
    run = one_run(jsonl(legacy, user("u2", "next")))
    assert [s.id for s in run.steps] == ["u1", "c1", "u2"]
    assert run.id == "s-1" and run.steps[1].status == "error"


# --- outcome rule


@pytest.mark.parametrize(
    ("status", "output", "tool", "error", "expected"),
    [
        ("success", "Command: ls\nOutput: a\nError: (none)\nExit Code: (none)", "x", None, "ok"),
        ("success", "Command: ls\nOutput: (empty)\nExit Code: 127", "x", None, "error"),
        ("success", "Command: ls\nOutput: a\nExit Code: 0", "run_shell_command", None, "ok"),
        ("success", "bash: foo: command not found", "run_shell_command", None, "error"),
        ("success", "Command: sleep 9\nOutput: (empty)\nSignal: 9", "x", None, "error"),
        ("success", "Error: a line of a file that was read", "read_file", None, "ok"),
        ("error", None, "read_file", "File not found", "error"),
        ("error", None, "x", 'Tool "x" not found in registry. Tools must use...', "invalid"),
        ("cancelled", None, "x", None, "error"),
        ("executing", None, "x", None, "ok"),
        ("awaiting_approval", None, "x", None, "ok"),
    ],
)
def test_call_status(status, output, tool, error, expected):
    assert call_status(status, output, tool=tool, error=error) == expected


# --- bad input


def test_bad_lines_are_skipped_and_an_all_bad_file_fails():
    run = one_run(jsonl(META, user("u1")) + b"\xff\xfe\n" + jsonl([1, 2]))
    assert run.skipped == 2 and "invalid UTF-8" in run.warnings[0]
    with pytest.raises(TraceError, match="invalid JSON"):
        one_run(b"{not json\n{nor this\n", format="gemini-chat")
    with pytest.raises(TraceError, match="empty"):
        one_run(b"", format="gemini-chat")


def test_malformed_fields_skip_the_record_not_the_file():
    bad = {"id": "g1", "type": "gemini", "thoughts": 5, "toolCalls": [{"id": "c", "args": 3}]}
    run = one_run(jsonl(META, user("u1"), bad, user("u2")))
    assert [s.id for s in run.steps][:1] == ["u1"] and run.steps[-1].id == "u2"


def test_deep_nesting_and_huge_strings():
    deep: object = "leaf"
    for _ in range(30):
        deep = {"a": deep}
    call = {**shell("c1", 0), "args": {"v": deep, "s": "y" * 5000}}
    run = one_run(jsonl(META, gemini("g1", call)), limits=Limits(max_depth=20, max_value_chars=100))
    (step,) = run.steps
    assert "nested deeper than 20 levels, cut" in repr(step.args)
    assert step.args["s"] == "y" * 100 + "…[truncated 4900 chars]"
    too_deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    run = one_run(jsonl(META, user("u1")) + too_deep + too_deep, format="gemini-chat")
    assert run.skipped == 2 and "nested" in run.warnings[0]  # skipped and counted
    with pytest.raises(TraceError, match="nested"):
        one_run(too_deep + too_deep, format="gemini-chat")


def test_step_limit_fails_the_file():
    records = [META] + [user(f"u{n}") for n in range(5)]
    with pytest.raises(TraceError, match="more than 3 steps"):
        one_run(jsonl(*records), limits=Limits(max_steps=3))


def test_a_history_turn_repeating_a_recorded_result_adds_no_step():
    # a checkpoint rebuilt from the model's history: the user turn answering c1 repeats the
    # result the `toolCalls` entry already holds; a result for no call at all is kept
    repeat = {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {}}}
    stray = {"functionResponse": {"id": "c9", "name": "grep", "response": {"output": "x"}}}
    turns = [user("u1"), gemini("g1", shell("c1", 1)), {**user("h1"), "content": [repeat]}]
    run = one_run(jsonl(META, {"$set": {"messages": [*turns, {**user("h2"), "content": [stray]}]}}))
    assert [(s.id, s.status) for s in run.steps] == [("u1", "ok"), ("c1", "error"), ("c9", "ok")]
    assert "result for call 'c9' matches no call" in run.warnings[0]
