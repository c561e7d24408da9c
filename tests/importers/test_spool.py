"""A run of any length in bounded memory: the step spool (runs/importers/kit/spool.py).

These fail if a long single run is held whole again: the spool must write what leaves its
window and read back the very same steps, a native run must be read in the memory of the
window (tracemalloc), and a spooled run must finish (merge, ids, numbers, lanes) exactly as
the same run held whole.
"""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

import detection
from detection.model import Step
from runs.importers import iter_runs
from runs.importers.kit import spool
from runs.importers.kit.spool import HashSet, Recent, StepSpool
from tests.importers.spooling import held_and_spooled


def _step(n: int) -> Step:
    return Step(
        seq=n,
        kind="tool_call",
        id=f"c{n}",
        tool="read",
        args={"path": f"src/{n}.py", "deep": [1, {"x": n}]},
        result=f"line {n}\n" * 3,
        status="error" if n % 7 == 0 else "ok",
        started_at=1.7e9 + n,
        tokens_in=n,
        cost=float("inf") if n == 5 else 0.5,  # what JSON cannot hold comes back too
    )


def test_the_spool_writes_what_leaves_its_window_and_reads_back_the_same_steps():
    steps = [_step(n) for n in range(1000)]
    spooled = StepSpool(window=16)
    for step in steps:
        spooled.append(step)
        assert spooled.in_memory < 2 * 16
    assert len(spooled) == 1000
    assert spooled.spilled >= 1000 - 2 * 16
    assert list(spooled) == steps
    assert list(spooled) == steps  # read again from the start
    assert spooled[-1] is steps[-1]
    with pytest.raises(IndexError):
        spooled[0]  # noqa: B018 - written: no longer in memory


def test_a_held_step_stays_in_memory_and_keeps_its_later_changes_in_its_place():
    spooled = StepSpool(window=4, hold=lambda step: step.result is None)
    waiting = Step(seq=0, kind="tool_call", id="slow", tool="Task", args={})
    spooled.append(waiting)
    for n in range(1, 100):
        spooled.append(_step(n))
    waiting.result, waiting.status = "done", "error"  # its result, 99 steps later
    read = list(spooled)
    assert read[0] is waiting and read[0].result == "done"
    assert [s.seq for s in read] == list(range(100))


def test_held_steps_are_bounded_and_the_oldest_are_written_as_they_were():
    spooled = StepSpool(window=4, hold=lambda step: step.result is None, max_held=3)
    waiting = [Step(seq=n, kind="tool_call", id=f"w{n}", tool="t") for n in range(50)]
    for step in waiting:
        spooled.append(step)
    assert spooled.in_memory <= 2 * 4 + 3
    assert [s.id for s in spooled] == [s.id for s in waiting]


def test_a_spool_sorted_by_seq_is_sorted_stably_a_chunk_at_a_time():
    rnd = random.Random(3)
    steps = [Step(seq=rnd.randint(0, 300), kind="user", text=str(n)) for n in range(2000)]
    spooled = StepSpool(window=8)
    spooled.extend(steps)
    assert list(spooled.sort_by_seq()) == sorted(steps, key=lambda s: s.seq)


def test_the_hash_set_grows_and_tells_members():
    seen = HashSet()
    assert all(seen.add(f"id{n}") for n in range(5000))
    assert not seen.add("id42")
    assert "id4999" in seen and "id5000" not in seen and len(seen) == 5000


def test_a_recent_mapping_keeps_the_newest_entries_and_gives_back_the_oldest_that_goes():
    recent: Recent[str, int] = Recent(3, refresh=True)
    assert [recent.put(key, n) for n, key in enumerate("abc")] == [None, None, None]
    assert recent.put("d", 3) == ("a", 0)
    assert recent.put("e", 4) == ("b", 1)
    assert list(recent.items()) == [("c", 2), ("d", 3), ("e", 4)]
    del recent["d"]  # a key let go of early: the next put fills its room, nothing goes
    assert recent.put("f", 5) is None and list(recent) == ["c", "e", "f"]


def test_a_recent_mapping_that_refreshes_moves_a_key_put_again_to_the_newest_place():
    recent: Recent[str, int] = Recent(3, refresh=True)
    for n, key in enumerate("abc"):
        recent.put(key, n)
    assert recent.put("a", 9) is None and list(recent.items()) == [("b", 1), ("c", 2), ("a", 9)]
    assert recent.put("d", 3) == ("b", 1)


def test_a_recent_mapping_that_does_not_refresh_keeps_a_key_put_again_in_its_first_place():
    recent: Recent[str, int] = Recent(3, refresh=False)
    for n, key in enumerate("abc"):
        recent.put(key, n)
    assert recent.put("a", 9) is None and list(recent.items()) == [("a", 9), ("b", 1), ("c", 2)]
    assert recent.put("d", 3) == ("a", 9)


def test_a_recent_mapping_goes_oldest_first_over_many_puts_as_a_list_of_its_keys_would():
    rnd = random.Random(7)
    for refresh in (True, False):
        recent: Recent[int, int] = Recent(50, refresh=refresh)
        order: list[int] = []  # the keys, oldest first, kept the slow plain way
        for n in range(5000):
            key = rnd.randrange(200)
            if key in order and rnd.random() < 0.2:
                order.remove(key)
                del recent[key]
                continue
            if key in order and refresh:
                order.remove(key)
            if key not in order:
                order.append(key)
            oldest = order.pop(0) if len(order) > 50 else None
            gone = recent.put(key, n)
            assert (gone[0] if gone is not None else None) == oldest
            assert list(recent) == order and recent[key] == n


def _native(n: int, seed: int) -> bytes:
    """A native run with what finishing a run must handle: copies of a call (by id, near
    each other), repeated ids, parents before and after their steps, sub-agent calls, lines
    out of order, loops."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        seq = i if rnd.random() > 0.05 else max(0, i - rnd.randint(1, 30))
        roll = rnd.random()
        if roll < 0.1:
            lines.append({"type": "message", "role": "user", "content": f"u{i}", "seq": seq})
            continue
        if roll < 0.15:
            line = {"type": "tool_call", "tool": "Task", "id": f"t{i}", "args": {"p": "x"}}
        else:
            line = {"type": "tool_call", "tool": rnd.choice(["read", "grep"]),
                    "id": f"c{max(0, i - rnd.randint(0, 15))}", "args": {"p": rnd.randint(0, 9)},
                    "status": rnd.choice(["ok", "error"])}  # fmt: skip
            if rnd.random() < 0.5:
                line["result"] = rnd.choice(["a", "b", None, {"x": 1}])
            if rnd.random() < 0.3:
                line["parent_id"] = rnd.choice([f"t{i - rnd.randint(-10, 10)}", f"c{i - 3}"])
            if rnd.random() < 0.2:
                line["batch_id"] = f"b{i // 3}"
        lines.append(line | {"seq": seq, "ts": 1.7e9 + i})
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def _read(data: bytes, monkeypatch, window: int):
    monkeypatch.setattr(spool, "WINDOW", window)
    (run,) = iter_runs(data, source="long.jsonl", format="native")
    return run


@pytest.mark.parametrize("seed", range(4))
def test_a_spooled_run_finishes_exactly_as_the_same_run_held_whole(monkeypatch, seed):
    data = _native(3000, seed)
    whole = _read(data, monkeypatch, 100_000)
    spooled = _read(data, monkeypatch, 40)
    assert isinstance(whole.steps, list)
    assert isinstance(spooled.steps, StepSpool) and spooled.steps.spilled > 2000
    assert list(spooled.steps) == whole.steps
    assert any(step.lane for step in whole.steps) and any("#" in str(s.id) for s in whole.steps)
    assert len(whole.steps) < 3000  # copies were merged
    assert detection.analyze(spooled).to_dict() == detection.analyze(whole).to_dict()


def test_a_long_native_run_is_read_in_the_memory_of_its_window(monkeypatch, tmp_path):
    """The peak of reading and analyzing a run grows with the window, not with the run."""
    result = "x" * 2000

    def write(n: int) -> str:
        path = tmp_path / f"run{n}.jsonl"
        with open(path, "w") as out:
            for i in range(n):
                line = {"type": "tool_call", "tool": "read", "args": {"path": f"f{i % 50}"}}
                out.write(json.dumps(line | {"result": f"{result}{i}"}) + "\n")
        return str(path)

    def peak(path: str) -> tuple[int, int]:
        monkeypatch.setattr(spool, "WINDOW", 64)
        tracemalloc.start()
        try:
            (run,) = iter_runs(path, format="native")
            analysis = detection.analyze(run)
            return tracemalloc.get_traced_memory()[1], analysis.steps
        finally:
            tracemalloc.stop()

    short, steps = peak(write(2_000))
    assert steps == 2_000
    long, steps = peak(write(20_000))  # 40 MB of results: held whole, a peak over 40 MB
    assert steps == 20_000
    assert long < 8 * 1024 * 1024, long
    assert long < 3 * short, (short, long)


def _claude_code(records: int, seed: int) -> bytes:
    """A long Claude Code session: messages of several records with usage, results (some
    failed), sub-agents under Task calls (their records sidechain, the call answered after
    them), a tool_use id used again, a message cut off mid-stream, a hook block, a record
    written twice."""
    rnd = random.Random(seed)
    out: list[dict] = []
    base = {"sessionId": "s1", "timestamp": "2026-01-21T06:19:38.000Z", "version": "2.1.230"}
    state = {"main": None, "n": 0}

    def add(kind: str, content, *, side: str | None = None, parent=None, **extra) -> str:
        state["n"] += 1
        uuid = f"r{state['n']}"
        prev = parent if parent is not None else state["main"] if side is None else side
        record = base | {"type": kind, "uuid": uuid, "parentUuid": prev,
                         "isSidechain": side is not None, "message": {"role": kind,
                         "content": content}} | extra  # fmt: skip
        out.append(record)
        if side is None and parent is None:
            state["main"] = uuid
        return uuid

    def message(msg: str, blocks: list[dict], *, side=None, **extra) -> str:
        last = side
        for index, block in enumerate(blocks):
            last = add("assistant", [block], side=last, **extra)
            record = out[-1]["message"]
            record.update(id=msg, model="claude-x")
            record["usage"] = {"input_tokens": 10 * index, "output_tokens": index + 1}
        return last

    add("user", "begin")
    call = 0
    while len(out) < records:
        call += 1
        roll = rnd.random()
        msg = f"msg{call}"
        if roll < 0.05:
            add("user", f"next {call}")
        elif roll < 0.08:  # a sub-agent
            task = f"toolu_task{call}"
            at = message(msg, [{"type": "text", "text": "delegating"},
                               {"type": "tool_use", "id": task, "name": "Task",
                                "input": {"prompt": f"explore {call}"}}])  # fmt: skip
            side = add("user", f"explore {call}", side=at)
            for n in range(rnd.randint(20, 80)):
                cid = f"toolu_s{call}_{n}"
                side = message(f"{msg}s{n}", [{"type": "tool_use", "id": cid, "name": "Grep",
                                               "input": {"q": n % 5}}], side=side)  # fmt: skip
                answer = [{"type": "tool_result", "tool_use_id": cid, "content": f"hit {n}"}]
                side = add("user", answer, side=side)
            add("user", [{"type": "tool_result", "tool_use_id": task, "content": "found"}])
        else:
            cid = f"toolu_{call}" if rnd.random() > 0.02 else "toolu_again"
            blocks = [{"type": "thinking", "thinking": "hm"}] if rnd.random() < 0.3 else []
            blocks += [{"type": "text", "text": f"step {call}"},
                       {"type": "tool_use", "id": cid, "name": rnd.choice(["Read", "Bash"]),
                        "input": {"path": f"f{rnd.randint(0, 20)}"}}]  # fmt: skip
            aborted = rnd.random() < 0.02
            message(msg, blocks, **({"isAbortedMidStream": True} if aborted else {}))
            if aborted:
                continue
            result = {"type": "tool_result", "tool_use_id": cid, "content": "x" * 50,
                      "is_error": rnd.random() < 0.2}  # fmt: skip
            add("user", [result])
            if rnd.random() < 0.02:
                add("attachment", None, attachment={"type": "hook_blocking_error",
                    "toolUseID": cid, "hookName": "PostToolUse",
                    "blockingError": {"blockingError": "no"}})  # fmt: skip
            if rnd.random() < 0.01:
                out.append(dict(out[-1]))  # the same record written twice
    return ("\n".join(json.dumps(record) for record in out) + "\n").encode()


@pytest.mark.parametrize("seed", range(3))
def test_a_spooled_claude_code_session_reads_as_the_same_session_held_whole(monkeypatch, seed):
    whole, spooled = held_and_spooled(
        _claude_code(6000, seed), monkeypatch, source="s.jsonl", format="claude-code"
    )
    assert spooled.steps.spilled > 2000
    assert any(step.lane for step in whole.steps)  # sub-agents
    assert any(step.tokens_out for step in whole.steps)


def _codex(calls: int, seed: int) -> bytes:
    """A long Codex rollout: user turns (item and event), reasoning items with their events,
    calls answered at once or many lines later, exec_command_end and patch_apply_end before
    or after the output, MCP calls (one whose call is not in the file), exec sessions that
    run over many polls, a reused call id, web searches, bad arguments, turns aborted with
    calls still waiting, token counts."""
    rnd = random.Random(seed)
    out: list[dict] = []
    clock = [0]

    def line(kind: str, payload: dict) -> None:
        clock[0] += 1
        minute, second = divmod(clock[0], 60)
        out.append({"timestamp": f"2026-01-12T{minute // 60 % 24:02d}:{minute % 60:02d}:"
                    f"{second:02d}.000Z", "type": kind, "payload": payload})  # fmt: skip

    def call(call_id: str, name: str, args: dict) -> None:
        line("response_item", {"type": "function_call", "name": name,
                               "arguments": json.dumps(args), "call_id": call_id})  # fmt: skip

    def output(call_id: str, text: str) -> None:
        line("response_item", {"type": "function_call_output", "call_id": call_id,
                               "output": text})  # fmt: skip

    def framed(code: int | None, text: str, session: int | None = None) -> str:
        state = f"Process exited with code {code}" if session is None else (
            f"Process running with session ID {session}")  # fmt: skip
        return f"Chunk ID: {rnd.randrange(1 << 20):x}\nWall time: 0.1 seconds\n{state}\nOutput:\n{text}"

    line("session_meta", {"id": "s-long", "cli_version": "0.120.0", "originator": "codex_cli_rs"})
    line("turn_context", {"model": "gpt-5.2-codex", "effort": "high"})
    late: list[tuple[int, str, str]] = []  # (when, call id, output): answered later
    sessions: list[dict] = []  # running exec sessions: their polls to come
    n = 0
    while n < calls:
        n += 1
        for when, cid, text in [entry for entry in late if entry[0] <= n]:
            late.remove((when, cid, text))
            output(cid, text)
        roll = rnd.random()
        if roll < 0.03:
            text = f"next task {n}"
            line("response_item", {"type": "message", "role": "user",
                                   "content": [{"type": "input_text", "text": text}]})  # fmt: skip
            line("event_msg", {"type": "user_message", "message": text})
            continue
        if roll < 0.05:
            call(f"call_ab{n}", "exec_command", {"cmd": "make"})
            call(f"call_ac{n}", "exec_command", {"cmd": "make check"})
            line("event_msg", {"type": "turn_aborted", "reason": "interrupted"})
            continue
        if rnd.random() < 0.3:
            thought = f"**thinking {n % 7}**"
            line("response_item", {"type": "reasoning", "summary": [
                {"type": "summary_text", "text": thought}]})  # fmt: skip
            line("event_msg", {"type": "agent_reasoning", "text": thought})
        cid = f"call_{n}" if rnd.random() > 0.02 else f"call_{n - 1}"
        if roll < 0.08:  # a command that keeps running: polled over many lines
            session = 1000 + n
            call(cid, "exec_command", {"cmd": f"make test {n}"})
            output(cid, framed(None, "building", session))
            sessions.append({"id": session, "polls": rnd.randint(3, 8), "call": cid})
        elif roll < 0.10 and sessions:
            job = sessions[0]
            job["polls"] -= 1
            pid = f"call_w{n}"
            call(pid, "write_stdin", {"session_id": job["id"], "chars": ""})
            done = job["polls"] <= 0
            output(pid, framed(rnd.choice([0, 2]) if done else None, f"tick {n % 3}",
                               None if done else job["id"]))  # fmt: skip
            if done:
                sessions.pop(0)
        elif roll < 0.13:  # an MCP call, its end event after the output (or its call absent)
            if rnd.random() < 0.3:
                cid = f"call_m{n}"
            else:
                call(cid, "mcp__docs__search", {"q": n % 4})
                output(cid, "no index")
            result = {"Ok": {"content": [{"type": "text", "text": "no index"}],
                             "isError": rnd.random() < 0.5}}  # fmt: skip
            line("event_msg", {"type": "mcp_tool_call_end", "call_id": cid, "result": result,
                               "invocation": {"server": "docs", "tool": "search"}})  # fmt: skip
        elif roll < 0.15:
            line("response_item", {"type": "web_search_call", "status": "completed",
                                   "action": {"type": "search", "query": f"q{n % 3}"}})  # fmt: skip
        elif roll < 0.17:
            line("response_item", {"type": "custom_tool_call", "call_id": cid,
                                   "name": "apply_patch", "input": f"*** Begin Patch {n % 2}"})  # fmt: skip
            line("event_msg", {"type": "patch_apply_end", "call_id": cid,
                               "success": rnd.random() < 0.5})  # fmt: skip
            line("response_item", {"type": "custom_tool_call_output", "call_id": cid,
                                   "output": "Success. Updated the following files"})  # fmt: skip
        elif roll < 0.18:
            line("response_item", {"type": "function_call", "name": "exec_command",
                                   "arguments": "{not json", "call_id": cid})  # fmt: skip
            output(cid, "failed to parse function arguments")
        else:
            code = 1 if rnd.random() < 0.2 else 0
            cmd = f"pytest -q tests/{n % 9}"
            call(cid, "exec_command", {"cmd": cmd})
            if rnd.random() < 0.1:
                call(cid, "exec_command", {"cmd": cmd})  # the same call written twice
            end = {"type": "exec_command_end", "call_id": cid, "exit_code": code}
            if rnd.random() < 0.05:  # answered many lines later
                late.append((n + rnd.randint(20, 60), cid, framed(code, f"out {n % 5}")))
                line("event_msg", end)
                continue
            before = rnd.random() < 0.5
            if before:
                line("event_msg", end)
            output(cid, framed(code, f"out {n % 5}"))
            if not before:
                line("event_msg", end)
        if rnd.random() < 0.1:
            text = f"done {n % 4}"
            line("response_item", {"type": "message", "role": "assistant",
                                   "content": [{"type": "output_text", "text": text}]})  # fmt: skip
            line("event_msg", {"type": "agent_message", "message": text})
        usage = {"input_tokens": 100 + n, "output_tokens": n % 50}
        line("event_msg", {"type": "token_count", "info": {"last_token_usage": usage,
                                                           "total_token_usage": usage}})  # fmt: skip
    return ("\n".join(json.dumps(record) for record in out) + "\n").encode()


@pytest.mark.parametrize("seed", range(3))
def test_a_spooled_codex_rollout_reads_as_the_same_rollout_held_whole(monkeypatch, seed):
    whole, spooled = held_and_spooled(
        _codex(3000, seed), monkeypatch, source="rollout.jsonl", format="codex"
    )
    assert spooled.steps.spilled > 2000
    steps = whole.steps
    assert any("#" in str(step.id) for step in steps)  # a reused id, answered twice
    assert any(step.text and step.text.startswith("turn aborted") for step in steps)
    assert any(step.result == "turn aborted: interrupted" for step in steps)
    polled = [s for s in steps if s.tool == "exec_command" and "Process running" in str(s.result)]
    assert {s.status for s in polled} == {"ok", "error"}  # a poll's exit code, lines later
    assert any(step.tool == "docs__search" for step in steps)  # an MCP end without its call
    assert any(step.tokens_in for step in steps)


def test_scan_reports_a_spooled_run_as_the_same_run_held_whole(monkeypatch, tmp_path, capsys):
    from loopboard.cli import scan

    path = tmp_path / "long.jsonl"
    path.write_bytes(_native(3000, seed=5))

    def report(window: int) -> str:
        monkeypatch.setattr(spool, "WINDOW", window)
        scan.main(["--json", str(path)])
        return capsys.readouterr().out

    whole = report(100_000)
    assert json.loads(whole)["findings"]
    assert report(40) == whole
