"""Long hook-event logs and Gemini chat recordings read through a spool of a tiny window
read as the same runs held whole, step for step and finding for finding."""

from __future__ import annotations

import json
import random

import pytest

import detection
from runs.importers import iter_runs
from runs.importers.kit import spool
from runs.importers.kit.spool import StepSpool
from tests.importers.spooling import FIELDS, held_and_spooled


def _jsonl(records: list[dict]) -> bytes:
    return ("\n".join(json.dumps(record) for record in records) + "\n").encode()


def _claude_hooks(calls: int, seed: int, sessions: int = 1) -> bytes:
    """Claude Code hook events: prompts, calls by tool_use_id (some refused: never answered,
    some failing, some answered late), a failing call repeated five times now and then, and
    the notices; sessions interleaved."""
    rnd = random.Random(seed)
    out: list[dict] = []
    late: list[tuple[int, dict]] = []
    for n in range(calls):
        base = {"session_id": f"s{rnd.randrange(sessions)}", "cwd": "/repo", "ts": 1e9 + n}
        if n % 50 == 0:
            out.append(base | {"hook_event_name": "UserPromptSubmit", "prompt": f"task {n}"})
        if n % 97 == 0:
            out.append(base | {"hook_event_name": rnd.choice(["Notification", "Stop"]),
                               "message": "waiting"})  # fmt: skip
        repeat = n % 300 < 5
        tool = "Bash" if repeat or rnd.random() < 0.5 else "Read"
        args = {"command": "pytest -x"} if repeat else {"command": f"ls {n}", "file": n % 9}
        cid = f"toolu_{seed}_{n}" if rnd.random() < 0.95 else None
        pre = base | {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": args}
        out.append(pre | ({"tool_use_id": cid} if cid else {}))
        post = pre | ({"tool_use_id": cid} if cid else {}) | {"hook_event_name": "PostToolUse"}
        if repeat:
            post |= {"tool_response": {"stdout": "", "stderr": "Error: 1 failed"}}
        elif rnd.random() < 0.05:
            post |= {"hook_event_name": "PostToolUseFailure", "error": "boom"}
        else:
            post |= {"tool_response": {"stdout": f"out {n}", "stderr": ""}}
        chance = rnd.random()
        if chance < 0.03:
            continue  # refused by a hook: never answered
        if chance < 0.06 and not cid:
            late.append((n + rnd.randint(5, 60), post))  # answered a long way on (held)
        else:
            out.append(post)
        if chance > 0.99:  # a result no call in the file asked for
            out.append(post | {"tool_use_id": f"stray_{n}"})
        while late and late[0][0] <= n:
            out.append(late.pop(0)[1])
    out.extend(post for _, post in late)
    return _jsonl(out)


def _cursor_hooks(calls: int, seed: int) -> bytes:
    """Cursor hook events: shell and MCP pairs without ids (by generation and order), reads,
    edits, responses and thoughts; some answers come many events later."""
    rnd = random.Random(seed)
    base = {"conversation_id": "c1", "cursor_version": "1.7"}
    out: list[dict] = []
    late: list[tuple[int, dict]] = []
    for n in range(calls):
        gen = {"generation_id": f"g{n // 4}"}
        if n % 40 == 0:
            out.append(base | gen | {"hook_event_name": "beforeSubmitPrompt", "prompt": f"do {n}"})
        kind = rnd.random()
        if kind < 0.5:
            command = "make test" if n % 200 < 5 else f"echo {n}"
            out.append(base | gen | {"hook_event_name": "beforeShellExecution", "command": command})
            after = base | gen | {"hook_event_name": "afterShellExecution", "command": command,
                                  "output": f"ok {n}", "exit_code": 1 if n % 200 < 5 else 0}  # fmt: skip
        elif kind < 0.7:
            args = json.dumps({"q": n % 11})
            out.append(base | gen | {"hook_event_name": "beforeMCPExecution", "tool_name": "db",
                                     "tool_input": args})  # fmt: skip
            after = base | gen | {"hook_event_name": "afterMCPExecution", "tool_name": "db",
                                  "tool_input": args, "result_json": json.dumps({"rows": n})}  # fmt: skip
        elif kind < 0.8:
            out.append(base | {"hook_event_name": "beforeReadFile", "file_path": f"f{n % 7}.py"})
            continue
        elif kind < 0.9:
            out.append(base | {"hook_event_name": "afterFileEdit", "file_path": "a.py",
                               "edits": [{"old_string": "a", "new_string": str(n)}]})  # fmt: skip
            continue
        else:
            out.append(base | {"hook_event_name": rnd.choice(["afterAgentResponse",
                               "afterAgentThought"]), "text": f"thinking {n}",
                               "input_tokens": n, "output_tokens": 3})  # fmt: skip
            continue
        if rnd.random() < 0.1:
            late.append((n + rnd.randint(10, 80), after))
        elif rnd.random() > 0.02:
            out.append(after)
        while late and late[0][0] <= n:
            out.append(late.pop(0)[1])
    out.extend(after for _, after in late)
    return _jsonl(out)


@pytest.mark.parametrize("seed", range(2))
def test_a_spooled_claude_code_hook_log_reads_as_the_same_log_held_whole(monkeypatch, seed):
    whole, spooled = held_and_spooled(
        _claude_hooks(3000, seed), monkeypatch, source="hooks.jsonl", format="claude-code-hooks"
    )
    assert spooled.steps.spilled > 2500
    statuses = {s.status for s in whole.steps if s.kind == "tool_call"}
    assert statuses == {"ok", "error"}
    assert any("matches no earlier call" in w for w in whole.warnings)
    assert detection.analyze(whole).findings  # the repeated failing call


@pytest.mark.parametrize("seed", range(2))
def test_a_spooled_cursor_hook_log_reads_as_the_same_log_held_whole(monkeypatch, seed):
    whole, spooled = held_and_spooled(
        _cursor_hooks(3000, seed), monkeypatch, source="hooks.jsonl", format="cursor"
    )
    assert spooled.steps.spilled > 2500
    kinds = {s.kind for s in whole.steps}
    assert {"tool_call", "user", "assistant", "reasoning"} <= kinds
    assert detection.analyze(whole).findings


def test_the_sessions_of_one_hook_log_are_each_spooled(monkeypatch):
    data = _claude_hooks(6000, 7, sessions=3)
    monkeypatch.setattr(spool, "WINDOW", 100_000)
    wholes = list(iter_runs(data, source="hooks.jsonl", format="claude-code-hooks"))
    monkeypatch.setattr(spool, "WINDOW", 32)
    spooleds = list(iter_runs(data, source="hooks.jsonl", format="claude-code-hooks"))
    assert sorted(r.id for r in wholes) == ["s0", "s1", "s2"]
    assert len(spooleds) == len(wholes)
    for whole, spooled in zip(wholes, spooleds, strict=True):
        assert isinstance(spooled.steps, StepSpool) and isinstance(whole.steps, list)
        assert list(spooled.steps) == whole.steps
        assert [getattr(spooled, f) for f in FIELDS] == [getattr(whole, f) for f in FIELDS]
        assert detection.analyze(spooled).to_dict() == detection.analyze(whole).to_dict()


def _gemini_chat(messages: int, seed: int, open_messages: int = 16) -> tuple[bytes, list[dict]]:
    """A Gemini chat recording (JSONL) of a long session: user turns, model turns whose
    calls are re-appended when they finish (now and then after a notice), calls made in
    content parts answered by a later user message, sub-agent calls, a failing shell command
    repeated five times now and then, checkpoints (a summary and the newest messages) and
    rewinds to one of the newest live messages (among the `open_messages` newest a spooled
    reader keeps open: half the spool's window of 32). Also the last version of each live message,
    in order (the same session as a `.json` document)."""
    rnd = random.Random(seed)
    out: list[dict] = [{"sessionId": "gem-1", "projectHash": "p", "startTime": "t",
                        "lastUpdated": "t", "kind": "main"}]  # fmt: skip
    live: list[str] = []  # the live message ids, in order (as the reader keeps them)
    laid = 0  # how many of them a spooled reader has laid out (closed)
    last: dict[str, dict] = {}
    parts_waiting: list[tuple[str, str]] = []  # (call id, tool) made in content parts

    def write(record: dict) -> None:
        out.append(record)
        if record["id"] not in last:
            live.append(record["id"])
        last[record["id"]] = record

    for n in range(messages):
        laid = max(laid, len(live) - open_messages)
        when = f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z"
        chance = rnd.random()
        if n % 25 == 0:
            write({"id": f"u{n}", "type": "user", "timestamp": when, "content": f"task {n}"})
        elif chance < 0.05 and len(live) - laid > 4:
            target = rnd.choice(live[max(laid, len(live) - 8) :])
            out.append({"$rewindTo": target})
            for gone in live[live.index(target) :]:
                last.pop(gone)
            del live[live.index(target) :]
        elif chance < 0.08 and len(live) - laid > 4:
            listed = [last[i] for i in live[-4:]]
            summary = {"id": f"sum{n}", "type": "info", "timestamp": when, "content": "summary"}
            out.append({"$set": {"lastUpdated": when, "messages": [summary, *listed]}})
            live.insert(len(live) - 4, summary["id"])
            last[summary["id"]] = summary
        elif chance < 0.13:
            kind = rnd.choice(["info", "warning", "error"])
            write({"id": f"n{n}", "type": kind, "timestamp": when, "content": f"{kind} {n}"})
        elif chance < 0.2:
            cid = f"part{n}"
            write({"id": f"g{n}", "type": "gemini", "timestamp": when, "model": "gemini-2.5-pro",
                   "content": [{"text": "looking"},
                               {"functionCall": {"id": cid, "name": "read_file",
                                                 "args": {"path": f"f{n % 5}"}}}]})  # fmt: skip
            parts_waiting.append((cid, "read_file"))
        elif chance < 0.27 and parts_waiting:
            cid, tool = parts_waiting.pop(0)
            response = {"functionResponse": {"id": cid if rnd.random() < 0.8 else None,
                                             "name": tool, "response": {"output": f"r{n}"}}}  # fmt: skip
            write({"id": f"r{n}", "type": "user", "timestamp": when, "content": [response]})
        else:
            failing = n % 300 < 5
            tool = "run_shell_command" if failing or rnd.random() < 0.5 else "glob"
            args = {"command": "pytest -x"} if failing else {"pattern": f"*{n}.py"}
            output = "Command: pytest -x\nExit Code: 1" if failing else f"found {n}"
            call = {"id": f"c{n}", "name": tool, "args": args, "timestamp": when}
            if rnd.random() < 0.1:
                call["agentId"] = f"agent{n // 500}"
            record = {"id": f"g{n}", "type": "gemini", "timestamp": when, "content": "",
                      "model": "gemini-2.5-pro", "tokens": {"input": n, "output": 7},
                      "thoughts": [{"subject": "Plan", "description": f"step {n}"}]}  # fmt: skip
            write(record | {"toolCalls": [call | {"status": "executing"}]})
            if rnd.random() < 0.2:
                write({"id": f"i{n}", "type": "info", "timestamp": when, "content": "running"})
            result = [{"functionResponse": {"id": call["id"], "name": tool,
                                            "response": {"output": output}}}]  # fmt: skip
            status = "cancelled" if rnd.random() < 0.03 else "success"
            write(record | {"toolCalls": [call | {"status": status, "result": result}]})
    return _jsonl(out), [last[i] for i in live]


@pytest.mark.parametrize("seed", range(3))
def test_a_spooled_gemini_chat_recording_reads_as_the_same_recording_held_whole(monkeypatch, seed):
    data, _ = _gemini_chat(3000, seed)
    whole, spooled = held_and_spooled(data, monkeypatch, source="chat.jsonl", format="gemini-chat")
    assert spooled.steps.spilled > 2500
    meta = whole.metadata
    assert meta["rewinds"] > 50 and meta["checkpoints"] > 50 and meta["sub_agents"]
    assert any(s.id.startswith("branch:") for s in whole.steps)
    assert {s.status for s in whole.steps if s.kind == "tool_call"} == {"ok", "error"}
    assert detection.analyze(whole).findings


def test_a_spooled_gemini_chat_document_reads_as_the_same_document_held_whole(monkeypatch):
    _, messages = _gemini_chat(3000, 5)
    document = {"sessionId": "gem-2", "projectHash": "p", "startTime": "t",
                "lastUpdated": "t", "messages": messages}  # fmt: skip
    whole, spooled = held_and_spooled(
        json.dumps(document).encode(), monkeypatch, source="chat.json", format="gemini-chat"
    )
    assert spooled.steps.spilled > 2500 and whole.metadata["recording"] == "json"
    assert detection.analyze(whole).findings
