"""pi coding agent sessions: the real v1 sample and a v3 tree written from the notes."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from runs.importers import detect_format, explain_format, iter_runs
from tests.importers.spooling import held_and_spooled

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


def _pi(turns: int, seed: int, *, layout: str) -> bytes:
    """A long pi session. `tree` (v3: ids and parentIds): user prompts, assistant turns with
    thinking, text and one to three toolCalls, usage and cost, toolResults (some failed, some
    decided by the text rules, some many entries later), turns aborted or failed with calls
    never answered, a result for a call not in the file, a call id used again, the user's own
    `!cmd`, injected context, compactions, model and thinking changes, a name, a label, and
    retries that fork the tree from an earlier entry. `chain`: the same without forks, and
    without the results that match no call (each makes a step that forks off the chain): a
    linear run. `stream`: that as `pi --mode json` events (message_end, tool_execution_end).
    """
    rnd = random.Random(seed)
    out: list[dict] = []
    head = {"entry": None}

    def entry(kind: str, parent=..., **fields) -> str:
        entry_id = f"{len(out):08x}"
        record = {"type": kind, "timestamp": f"2025-12-10T09:{len(out) // 60 % 60:02d}:"
                  f"{len(out) % 60:02d}.000Z"} | fields  # fmt: skip
        if layout != "stream":
            record |= {"id": entry_id, "parentId": head["entry"] if parent is ... else parent}
        out.append(record)
        head["entry"] = entry_id
        return entry_id

    def message(message: dict, parent=...) -> str:
        return entry("message_end" if layout == "stream" else "message", parent, message=message)

    def result(call_id: str, n: int) -> None:
        text = f"ok {n % 5}" if rnd.random() < 0.7 else "Error: ENOENT\nCommand exited with code 1"
        flag = {} if rnd.random() < 0.3 else {"isError": text.startswith("Error")}
        content = [{"type": "text", "text": text}]
        if layout == "stream":
            entry("tool_execution_end", toolCallId=call_id, toolName="bash",
                  result={"content": content}, **flag)  # fmt: skip
            if rnd.random() < 0.5:
                return
        message({"role": "toolResult", "toolCallId": call_id, "toolName": "bash",
                 "content": content} | flag)  # fmt: skip

    if layout != "stream":
        out.append({"type": "session", "version": 3, "id": "s-long", "cwd": "/home/u/p",
                    "timestamp": "2025-12-10T09:00:00.000Z"})  # fmt: skip
    late: list[tuple[int, str]] = []
    forks: list[str] = []  # entries a retry may go back to
    for n in range(turns):
        for when, cid in [item for item in late if item[0] <= n]:
            late.remove((when, cid))
            result(cid, when)
        roll = rnd.random()
        if roll < 0.05:
            forks.append(message({"role": "user", "content": f"next task {n}"}))
            continue
        if roll < 0.07 and layout == "tree" and forks:  # a retry: a branch from earlier
            head["entry"] = rnd.choice(forks[-30:])
            message({"role": "user", "content": f"try again {n}"})
            continue
        if roll < 0.08 and layout != "stream":
            kind = rnd.choice(["custom_message", "compaction", "branch_summary",
                               "model_change", "thinking_level_change", "session_info",
                               "label", "custom"])  # fmt: skip
            entry(kind, customType="ext", content="ctx", summary=f"so far {n}",
                  modelId=rnd.choice(["gpt-5.1-codex", "claude-sonnet-4-5"]),
                  thinkingLevel="high", name=f"session {n // 100}", label="x")  # fmt: skip
            continue
        if roll < 0.09:
            message({"role": "bashExecution", "command": "ls", "output": "a.txt\n",
                     "exitCode": rnd.choice([0, 1])})  # fmt: skip
            continue
        if roll < 0.095 and layout == "tree":  # a result whose call is not in the file
            result(f"toolu_gone{n}", n)
            continue
        blocks: list[dict] = []
        if rnd.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": f"look at {n % 7}"})
        if rnd.random() < 0.6:
            blocks.append({"type": "text", "text": f"step {n}"})
        calls = []
        for k in range(rnd.choice([0, 1, 1, 1, 2, 3])):
            again = rnd.random() < 0.01 and layout == "tree"
            cid = "toolu_again" if again else f"toolu_{n}_{k}"
            if rnd.random() < 0.01:
                cid = None  # a call without an id
            calls.append(cid)
            blocks.append({"type": "toolCall", "id": cid, "name": rnd.choice(["bash", "read"]),
                           "arguments": {"command": f"npm test {n % 9}"}})  # fmt: skip
        stop = rnd.choice(["aborted", "error"]) if rnd.random() < 0.03 else "toolUse"
        usage = {"input": 10 + n, "output": n % 40, "cacheRead": 100, "cacheWrite": 5,
                 "cost": {"total": 0.0001 * (n % 7)}}  # fmt: skip
        forks.append(message({"role": "assistant", "content": blocks, "stopReason": stop,
                              "errorMessage": "terminated", "usage": usage,
                              "model": "claude-sonnet-4-5"}))  # fmt: skip
        for cid in calls:
            if cid is None or stop != "toolUse" and rnd.random() < 0.7:
                continue  # never answered
            if rnd.random() < 0.05:
                late.append((n + rnd.randint(3, 30), cid))
            else:
                result(cid, n)
    return ("\n".join(json.dumps(record) for record in out) + "\n").encode()


@pytest.mark.parametrize("layout", ["tree", "chain", "stream"])
@pytest.mark.parametrize("seed", range(2))
def test_a_spooled_session_reads_as_the_same_session_held_whole(monkeypatch, seed, layout):
    whole, spooled = held_and_spooled(
        _pi(2500, seed, layout=layout), monkeypatch, source="session.jsonl", format="pi"
    )
    assert spooled.steps.spilled > 3000
    steps = whole.steps
    forked = any(step.parent_id for step in steps)
    assert forked == (layout == "tree")  # a run that never forks is linear
    not_run = [s for s in steps if str(s.result).startswith("[not run")]
    assert not_run and all(s.status == "error" for s in not_run)
    assert any(step.cost for step in steps) and any(s.kind == "reasoning" for s in steps)
    assert {s.status for s in steps if s.kind == "tool_call"} == {"ok", "error"}
    if layout == "tree":
        assert any("matches no earlier call" in warning for warning in whole.warnings)
        assert any("repeats" in warning for warning in whole.warnings)


@pytest.mark.parametrize("sample", [SAMPLE, BRANCHES])
def test_the_samples_read_the_same_through_a_spool_of_a_tiny_window(monkeypatch, sample):
    whole, spooled = held_and_spooled(
        sample.read_bytes(), monkeypatch, source="session.jsonl", format="pi", window=2
    )
    assert spooled.steps.spilled >= len(whole.steps) - 4
