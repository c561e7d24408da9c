"""pi coding agent sessions: the real v1 sample and a v3 tree written from the notes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from runs.importers import detect_format, explain_format, iter_runs

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = DATA / "traces" / "pi" / "large-session.jsonl"
BRANCHES = DATA / "importers" / "pi_v3_branches.jsonl"  # written from the notes §3.12


def only_run(path):
    (run,) = iter_runs(path)
    return run


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_the_v1_sample_imports_with_its_counts():
    run = only_run(SAMPLE)
    found = calls(run)
    # the shared README's table: 391 tool calls (`grep -o '"type":"toolCall"'` gives 391)
    assert len(found) == 391
    # per tool, from `grep -o '"type":"toolCall","id":"[^"]*","name":"<tool>"'`
    assert Counter(step.tool for step in found) == {
        "bash": 192,
        "edit": 146,
        "read": 50,
        "write": 3,
    }
    # 19 `"isError":true` results (grep -c), plus the 18 calls that never got a result: 16
    # in the turn on line 33 that ended with stopReason "error" ("terminated") and one in
    # each of two aborted turns (lines 234 and 843)
    errors = [step for step in found if step.status == "error"]
    assert len(errors) == 19 + 18
    assert sum(1 for step in errors if str(step.result).startswith("[not run")) == 18
    assert run.id == "d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
    assert run.metadata["session_version"] == 1 and run.metadata["models"] == [
        "claude-sonnet-4-5",
        "gpt-5.1-codex",
    ]
    # v1 has no ids: a plain chain in line order, so a linear run
    assert all(step.parent_id is None for step in run.steps)
    assert run.skipped == 0
    # 21 aborted turns + 1 error turn each leave a system step
    assert sum(1 for s in run.steps if s.kind == "system" and s.text.startswith("turn ")) == 22


def test_the_sample_has_tokens_cost_and_times():
    run = only_run(SAMPLE)
    first = calls(run)[0]
    assert first.tool == "read" and first.args == {"path": "packages/coding-agent/docs/theme.md"}
    assert first.started_at == 1763681634.572 and first.ended_at == 1763681634.575
    # the first assistant message (line 6): usage input 3 + cacheRead 0 + cacheWrite 1684
    assistant = next(s for s in run.steps if s.kind == "assistant" and s.cost)
    assert assistant.tokens_in == 1687 and assistant.tokens_out == 191
    assert assistant.cost == 0.009189


def test_v3_branches_are_kept_as_sibling_subtrees():
    run = only_run(BRANCHES)
    by_id = {step.id: step for step in run.steps}
    edit = next(s for s in calls(run) if s.tool == "edit")
    summary = next(s for s in run.steps if s.kind == "system" and "branch_summary" in s.text)
    npm = next(s for s in calls(run) if s.tool == "bash")
    # the abandoned edit and the branch summary (the retry) both hang off the first result
    assert edit.parent_id == summary.parent_id == npm.id
    assert edit.status == "error" and npm.status == "error"
    retry = next(s for s in run.steps if s.kind == "assistant")
    assert by_id[retry.parent_id] is summary
    assert run.name == "fix failing test"
    assert run.metadata["session_version"] == 3
    # one bad line, counted; the `custom` entry is bookkeeping
    assert run.skipped == 1 and run.metadata["skipped_records"] == {"custom": 1}


def test_v3_aborted_turn_and_user_command():
    run = only_run(BRANCHES)
    aborted = calls(run)[-1]
    assert aborted.status == "error" and "aborted" in aborted.result
    command = next(s for s in run.steps if s.kind == "user" and s.text.startswith("$ git"))
    assert "(exit code 128)" in command.text
    # tokens: input 10 + cacheRead 100 + cacheWrite 5 on the first step of the turn
    reasoning = next(s for s in run.steps if s.kind == "reasoning")
    assert reasoning.tokens_in == 115 and reasoning.cost == 0.00038


def test_a_result_without_a_call_is_kept(tmp_path):
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/"},
        {"type": "message", "id": "a1", "parentId": None, "timestamp": "2025-01-01T00:00:01Z",
         "message": {"role": "toolResult", "toolCallId": "gone", "toolName": "bash",
                     "content": [{"type": "text", "text": "Exit code: 2"}], "timestamp": 1}},
    ]  # fmt: skip
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (step,) = calls(only_run(path))
    # no isError field: the common text rules decide
    assert step.tool == "bash" and step.args is None and step.status == "error"


def test_json_mode_event_stream(tmp_path):
    message = {"role": "assistant", "content": [
        {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {"command": "ls"}}]}  # fmt: skip
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/"},
        {"type": "agent_start"},
        {"type": "message_update", "message": message},
        {"type": "message_end", "message": message},
        {"type": "tool_execution_start", "toolCallId": "t1", "toolName": "bash", "args": {}},
        {"type": "tool_execution_end", "toolCallId": "t1", "toolName": "bash",
         "result": {"content": [{"type": "text", "text": "a.txt"}]}, "isError": False},
        {"type": "turn_end", "message": message, "toolResults": []},
    ]  # fmt: skip
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert detect_format(path.read_bytes()) == "pi"
    (step,) = calls(only_run(path))
    assert step.result == "a.txt" and step.status == "ok"


def test_detection_prefers_pi_over_claude_code_and_native():
    verdict = explain_format(SAMPLE.read_bytes()[:65536])
    (best, claim), (_, runner_up) = verdict.claims[:2]
    assert best == "pi" and claim.score > runner_up.score
    assert "session` header" in claim.reason


def test_detection_says_why_not():
    verdict = explain_format(b'{"type": "user", "message": {"role": "user"}}\n')
    claim = dict(verdict.claims)["pi"]
    assert claim.score == 0 and "no `session` header" in claim.reason
