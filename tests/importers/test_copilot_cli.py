"""GitHub Copilot CLI session events (fixture written from the notes §3.17)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from runs.importers import TraceError, copilot_cli, detect_format, iter_runs
from runs.importers.kit.spool import StepSpool
from tests.importers.spooling import held_and_spooled

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


def _copilot(calls: int, seed: int) -> bytes:
    """A long Copilot CLI session: user turns, assistant messages with reasoning and one to
    three tool requests (executed with other arguments, or never started), results at once or
    many events later, a shell that fails in its text only, refusals, a result sent twice, a
    result whose call is not in the file, a call id used again much later, sub-agents (by
    `agentId`, named before or after their first event, or by the older `parentToolCallId`),
    errors, warnings, aborts, model changes and the shutdown totals."""
    rnd = random.Random(seed)
    out: list[dict] = []

    def event(kind: str, data: dict, **extra) -> None:
        second = len(out)
        when = (
            f"2026-02-01T{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000Z"
        )
        out.append({"type": kind, "data": data, "id": f"e{second}", "timestamp": when,
                    "parentId": f"e{second - 1}" if second else None} | extra)  # fmt: skip

    def complete(call_id: str, n: int, **extra) -> None:
        roll = rnd.random()
        if roll < 0.1:
            done = {"success": False, "error": {"message": "Permission denied by user"}}
        elif roll < 0.2:
            done = {"success": True, "result": {"content": f"npm ERR! {n % 3}\n<shellId: 0 "
                                                           "completed with exit code 1>"}}  # fmt: skip
        else:
            done = {"success": True, "result": {"content": f"line {n % 11}\n" * 4}}
        event("tool.execution_complete", {"toolCallId": call_id} | done, **extra)

    event("session.start", {"sessionId": "s-long", "producer": "copilot-agent",
                            "copilotVersion": "1.0.3", "selectedModel": "claude-sonnet-4.5",
                            "context": {"cwd": "/home/u/app", "repository": "u/app"}})  # fmt: skip
    late: list[tuple[int, str]] = []
    n = 0
    while n < calls:
        n += 1
        for when, cid in [entry for entry in late if entry[0] <= n]:
            late.remove((when, cid))
            complete(cid, when)
        roll = rnd.random()
        if roll < 0.03:
            event("user.message", {"content": f"next task {n}", "turnId": f"t{n}"})
            event("assistant.turn_start", {"turnId": f"t{n}"})
            continue
        if roll < 0.04:
            kind = rnd.choice(["session.error", "session.warning", "abort", "subagent.failed"])
            event(kind, {"errorType": "rate_limit", "message": f"429 {n % 2}", "reason": "stop"})
            continue
        if roll < 0.045:
            event("session.model_change", {"newModel": rnd.choice(["gpt-5", "claude-opus-4.5"])})
            continue
        if roll < 0.05:  # a result for a call not in the file
            complete(f"call_gone{n}", n)
            continue
        if roll < 0.07:  # a sub-agent under a task call
            task = f"call_task{n}"
            request = {"toolCallId": task, "name": "task", "arguments": {"prompt": f"find {n}"}}
            event("assistant.message", {"messageId": f"m{n}", "content": "Delegating.",
                                        "toolRequests": [request]})  # fmt: skip
            event("tool.execution_start", {"toolCallId": task, "toolName": "task",
                                           "arguments": request["arguments"]})  # fmt: skip
            agent, style = f"agent-{n}", rnd.choice(["named", "pending", "older"])
            started = {"toolCallId": task, "agentName": "explore"}
            event("subagent.started", started | ({"agentId": agent} if style == "named" else {}))
            for k in range(rnd.randint(10, 40)):
                cid = f"call_s{n}_{k}"
                where = {"parentToolCallId": task} if style == "older" else {}
                extra = {} if style == "older" else {"agentId": agent}
                event("tool.execution_start", {"toolCallId": cid, "toolName": "grep",
                                               "arguments": {"pattern": k % 4}} | where, **extra)  # fmt: skip
                complete(cid, k, **extra)
            event("subagent.completed", {"toolCallId": task})
            complete(task, n)
            continue
        batch = []
        for k in range(rnd.choice([1, 1, 1, 2, 3])):
            cid = f"call_{n}_{k}" if rnd.random() > 0.01 else "call_again"
            tool = rnd.choice(["bash", "view", "edit"])
            batch.append((cid, tool, {"command": f"npm test {n % 7}", "k": k}))
        content = f"Step {n}." if rnd.random() < 0.6 else ""
        message = {"messageId": f"m{n}", "content": content, "outputTokens": 40 + n % 9,
                   "toolRequests": [{"toolCallId": c, "name": t, "arguments": a}
                                    for c, t, a in batch]}  # fmt: skip
        if rnd.random() < 0.3:
            message["reasoningText"] = f"Look at {n % 5} first."
        event("assistant.message", message)
        for cid, tool, args in batch:
            if rnd.random() < 0.03:
                continue  # requested, never run
            if rnd.random() < 0.2:
                event("permission.requested", {"toolCallId": cid})
            executed = args | {"description": "run"} if rnd.random() < 0.2 else args
            event("tool.execution_start", {"toolCallId": cid, "toolName": tool,
                                           "arguments": executed})  # fmt: skip
            if rnd.random() < 0.05:
                late.append((n + rnd.randint(5, 40), cid))
                continue
            complete(cid, n)
            if rnd.random() < 0.01:
                complete(cid, n + 1)  # sent twice
    event("session.shutdown", {"modelMetrics": {"claude-sonnet-4.5": {"requests": {"count": n}}}})
    return ("\n".join(json.dumps(record) for record in out) + "\n").encode()


@pytest.mark.parametrize("seed", range(3))
def test_a_spooled_session_reads_as_the_same_session_held_whole(monkeypatch, seed):
    monkeypatch.setattr(copilot_cli, "ANSWERED_STEPS", 500)  # so "call_again" is reused
    whole, spooled = held_and_spooled(
        _copilot(3000, seed), monkeypatch, source="events.jsonl", format="copilot-cli"
    )
    assert isinstance(spooled.steps, StepSpool) and spooled.steps.spilled > 3000
    steps = whole.steps
    assert any(step.lane for step in steps)  # sub-agents
    assert any("#" in str(step.id) for step in steps)  # an id used again, far apart
    assert any(step.tokens_out for step in steps) and any(s.kind == "reasoning" for s in steps)
    assert {s.status for s in steps if s.kind == "tool_call"} == {"ok", "error"}
    assert any("matches no earlier call" in warning for warning in whole.warnings)


def test_the_sample_reads_the_same_through_a_spool_of_a_tiny_window(monkeypatch):
    whole, spooled = held_and_spooled(
        FIXTURE.read_bytes(), monkeypatch, source="events.jsonl", format="copilot-cli", window=2
    )
    assert spooled.steps.spilled > 5
    assert len(whole.steps) == 10
