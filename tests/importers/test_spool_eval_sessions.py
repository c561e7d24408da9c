"""Inspect AI samples, OpenCode sessions, Aider chat histories and Claude Managed Agents
event streams read a run of any length in bounded memory: a long run read through a spool of
a tiny window gives the same run as read held whole, step for step and finding for finding,
a result that comes long after its call included."""

from __future__ import annotations

import io
import json
import random
import zipfile

import pytest

from runs.importers import inspect_ai, iter_runs
from tests.importers.spooling import held_and_spooled

COMMANDS = ("ls src", "cat a.py", "grep -rn handler src", "python -m pytest -q tests")
FAILING = "python -m pytest tests/test_x.py"
TRACEBACK = "Traceback (most recent call last):\n  AssertionError: handler\n1 failed"


def _command(n: int, rng: random.Random) -> str:
    if n % 50 >= 45:  # the same failing call five times every 50: a loop to find
        return FAILING
    return f"{rng.choice(COMMANDS)} {n}"


def _output(command: str, n: int) -> str:
    if command == FAILING:
        return TRACEBACK
    return f"output of {command} at {n}\n" * 3


# --- Inspect AI


def _inspect_sample(calls: int, seed: int, *, opening: str = "init") -> dict:
    """One sample's events, shaped as Inspect writes them: spans, a model event per call
    (its text and reasoning now and then, usage, the first model input from the message
    pool's refs when there is no `sample_init`), the tool event with its result (long ones
    as `attachment://` references, resolved from `attachments`, written after the events),
    an agent span whose events go under it, a sub-agent run as a tool, skipped events,
    errors, limits and scores."""
    rng = random.Random(seed)
    attachments = {"sys": "You are a careful agent.", "task": "Fix the handler in app.py"}
    pool = [{"role": "system", "content": "attachment://sys"}, {"role": "user", "content": "attachment://task"}]  # fmt: skip
    events: list[dict] = [{"event": "span_begin", "id": "init", "type": "init", "name": "init"}]
    if opening == "init":
        state = {"messages": pool}
        events.append({"event": "sample_init", "span_id": "init", "sample": {"input": "x"}, "state": state})  # fmt: skip
    events.append({"event": "span_begin", "id": "solver", "parent_id": None, "type": "solver", "name": "react"})  # fmt: skip
    agent = None
    for n in range(calls):
        command = _command(n, rng)
        when = f"2025-06-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000000+00:00"
        if n % 400 == 100:  # an agent span: the next 40 calls' events go under it
            agent = f"agent{n}"
            events.append({"event": "span_begin", "id": agent, "parent_id": "solver", "type": "agent", "name": f"helper {n}"})  # fmt: skip
            events.append({"event": "span_begin", "id": f"in-{agent}", "parent_id": agent, "type": "solver", "name": "inner"})  # fmt: skip
        elif n % 400 == 140:
            events.append({"event": "span_end", "id": f"in-{agent}"})
            events.append({"event": "span_end", "id": agent})
            agent = None
        span = f"in-{agent}" if agent else "solver"
        content: list | str = f"step {n}" if n % 3 else ""
        if n % 7 == 0:
            content = [{"type": "reasoning", "reasoning": f"think {n}"}, {"type": "text", "text": f"now {n}"}]  # fmt: skip
        message = {"id": f"m{n}", "role": "assistant", "content": content,
                   "tool_calls": [{"id": f"c{n}", "function": "bash", "arguments": {"cmd": command}}]}  # fmt: skip
        usage = {"input_tokens": 100 + n, "output_tokens": 10, "input_tokens_cache_read": 50}
        model = {"event": "model", "span_id": span, "timestamp": when, "input": [],
                 "output": {"choices": [{"message": message}], "usage": usage}}  # fmt: skip
        if opening == "pool" and n == 0:
            model["input_refs"] = [[0, 2]]
        events.append(model)
        events.append({"event": "span_begin", "id": f"t{n}", "parent_id": span, "type": "tool", "name": "bash"})  # fmt: skip
        result = _output(command, n)
        if len(result) > 60:  # Inspect keeps long strings as attachments
            attachments[f"h{n}"] = result
            result = f"attachment://h{n}"
        tool = {"event": "tool", "span_id": f"t{n}", "timestamp": when, "id": f"c{n}",
                "function": "bash", "arguments": {"cmd": command}, "result": result,
                "completed": when}  # fmt: skip
        if n % 97 == 11:
            tool["error"] = {"type": "timeout", "message": "timed out"}
        if n % 250 == 60:  # a sub-agent run as a tool: its events nested in the tool event
            tool["events"] = [
                {
                    "event": "tool",
                    "id": f"c{n}.{i}",
                    "function": "search",
                    "arguments": {"q": i},
                    "result": "found",
                }  # fmt: skip
                for i in range(3)
            ]
        events.append(tool)
        events.append({"event": "sandbox", "action": "exec", "span_id": f"t{n}"})
        events.append({"event": "span_end", "id": f"t{n}"})
        if n % 301 == 150:
            events.append({"event": "error", "error": {"message": f"transient {n}"}})
    events.append({"event": "sample_limit", "type": "message", "message": "limit reached"})
    events.append({"event": "score", "score": {"value": "I"}})
    return {"id": f"s{seed}", "epoch": 1, "input": "x", "messages": [], "events": events,
            "attachments": attachments, "message_pool": pool}  # fmt: skip


HEADER = {"version": 2, "status": "success", "eval": {"eval_id": "E1", "task": "fix", "model": "m"}}


def _inspect_json(*samples: dict) -> bytes:
    return json.dumps(HEADER | {"samples": list(samples)}).encode()


def _inspect_zip(*samples: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("_journal/start.json", json.dumps(HEADER))
        archive.writestr("header.json", json.dumps(HEADER))
        for sample in samples:
            archive.writestr(f"samples/{sample['id']}_epoch_1.json", json.dumps(sample))
    return buffer.getvalue()


@pytest.mark.parametrize("opening", ["init", "pool"])
@pytest.mark.parametrize("form", ["json", "eval"])
def test_a_long_inspect_sample_reads_the_same_through_a_small_spool(monkeypatch, form, opening):
    sample = _inspect_sample(1500, 3, opening=opening)
    data = (_inspect_json if form == "json" else _inspect_zip)(sample)
    whole, spooled = held_and_spooled(data, monkeypatch, source=f"x.{form}", format="inspect-ai")
    assert spooled.steps.spilled > 2500
    steps = whole.steps
    assert [s.text for s in steps[:2]] == ["You are a careful agent.", "Fix the handler in app.py"]
    calls = [s for s in steps if s.kind == "tool_call"]
    assert len(calls) == 1500 + 3 * 6  # and the sub-agents' calls
    assert all(not (s.result or "").startswith("attachment://") for s in calls)  # resolved
    assert sum(s.status == "error" for s in calls) >= 150
    helped = [s for s in steps if s.lane and s.lane.startswith("agent:")]
    assert len(helped) > 200  # the agent spans' steps and the sub-agents' calls
    assert whole.metadata["scores"] == {"0": "I"}
    assert whole.metadata["skipped_events"] == {"span_end": 1500 + 8, "sandbox": 1500}


def test_the_samples_of_a_log_each_read_their_own_attachments(monkeypatch):
    """Two samples with the same attachment hashes: each resolves its own."""
    first, second = _inspect_sample(200, 1), _inspect_sample(200, 2)
    second["attachments"] = {k: f"second {v}" for k, v in second["attachments"].items()}
    for data in (_inspect_json(first, second), _inspect_zip(first, second)):
        one, two = iter_runs(data, format="inspect-ai")
        assert one.steps[1].text == "Fix the handler in app.py"
        assert two.steps[1].text == "second Fix the handler in app.py"


def test_a_log_of_samples_with_and_without_events_reads_each_as_alone():
    """The second pass reads a `.json` log's events and messages with one reader each, and
    gives each sample its slice: every run is the run of its sample in a log of its own."""
    samples = [_inspect_sample(120, 1), _inspect_messages(80, 2), _inspect_sample(90, 3)]
    samples[1]["events"] = []  # an empty list: the messages are read
    for pack in (_inspect_json, _inspect_zip):
        runs = list(iter_runs(pack(*samples), format="inspect-ai"))
        alone = [next(iter_runs(pack(sample), format="inspect-ai")) for sample in samples]
        assert [run.steps for run in runs] == [run.steps for run in alone]
        assert [len(run.steps) for run in runs] == [len(run.steps) for run in alone]
        assert all(len(run.steps) > 150 for run in runs)


def _inspect_messages(calls: int, seed: int) -> dict:
    """A sample without events (an older log): assistant `tool_calls` answered by `tool`
    messages, one call answered only at the very end, long after it was made."""
    rng = random.Random(seed)
    messages: list[dict] = [{"role": "user", "content": "attachment://task"}]
    for n in range(calls):
        command = _command(n, rng)
        ids = [f"c{n}", "late"] if n == 10 else [f"c{n}"]
        calls_ = [{"id": i, "function": "bash", "arguments": {"cmd": command}} for i in ids]
        messages.append({"id": f"m{n}", "role": "assistant", "content": f"step {n}", "tool_calls": calls_})  # fmt: skip
        message = {"role": "tool", "tool_call_id": f"c{n}", "content": _output(command, n)}
        if n % 97 == 11:
            message["error"] = {"type": "parsing", "message": "bad arguments"}
        messages.append(message)
    messages.append({"role": "tool", "tool_call_id": "late", "content": "the late result"})
    messages.append({"role": "tool", "tool_call_id": "nobody", "content": "an orphan"})
    return {"id": "old", "epoch": 1, "messages": messages, "attachments": {"task": "Fix it"},
            "error": {"message": "sandbox gone"}}  # fmt: skip


def test_a_long_inspect_sample_without_events_holds_a_call_until_its_late_result(monkeypatch):
    data = _inspect_json(_inspect_messages(1500, 5))
    whole, spooled = held_and_spooled(data, monkeypatch, source="x.json", format="inspect-ai")
    assert spooled.steps.spilled > 2500
    steps = whole.steps
    assert steps[0].text == "Fix it"
    late = next(s for s in steps if s.id == "late")
    assert (late.result, late.status) == ("the late result", "ok")
    assert sum(s.status == "invalid" for s in steps) == 16
    orphan = steps[-2]
    assert (orphan.args, orphan.result) == (None, "an orphan")
    assert steps[-1].text == "sample error: sandbox gone"
    assert any("matches no call" in w for w in whole.warnings)


def test_past_max_open_calls_the_oldest_call_waits_no_more_and_nothing_is_lost(monkeypatch):
    monkeypatch.setattr(inspect_ai, "MAX_OPEN_CALLS", 16)
    calls = [{"id": f"c{n}", "function": "bash", "arguments": {"n": n}} for n in range(20)]
    messages = [{"role": "assistant", "content": "", "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": f"c{n}", "content": f"r{n}"} for n in (0, 19)]
    sample = {"id": "old", "epoch": 1, "messages": messages}
    (run,) = iter_runs(_inspect_json(sample), format="inspect-ai")
    steps = {s.id: s for s in run.steps}
    assert steps["c0"].result is None  # 20 calls waited: the oldest 4 were given up
    assert steps["c19"].result == "r19"
    orphan = run.steps[-1]  # its result is kept, as a call of its own
    assert (orphan.args, orphan.result) == (None, "r0")
    assert len(run.steps) == 21


def test_an_agent_span_in_use_outlives_the_span_look_back(monkeypatch):
    """The look-back keeps the newest MAX_SPANS spans, and a span an event names moves to
    the newest place: the span inside an agent span, whose events go on past many tool
    spans, still leads them to the agent."""
    data = _inspect_json(_inspect_sample(600, 9))
    (whole,) = iter_runs(data, format="inspect-ai")
    monkeypatch.setattr(inspect_ai, "MAX_SPANS", 4)
    monkeypatch.setattr(inspect_ai, "MAX_AGENTS", 2)
    (bounded,) = iter_runs(data, format="inspect-ai")
    assert bounded.steps == whole.steps
    assert sum(1 for s in whole.steps if s.lane) > 80


def test_a_sample_member_that_is_not_json_is_reported_and_the_next_is_read():
    good = _inspect_sample(100, 4)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", json.dumps(HEADER))
        archive.writestr("samples/1_epoch_1.json", json.dumps(good)[:-5000])  # cut in its events
        archive.writestr("samples/2_epoch_1.json", json.dumps(good))
    broken, read = iter_runs(buffer.getvalue(), format="inspect-ai")
    assert broken.skipped == 1 and not broken.steps and "truncated" in broken.warnings[0]
    assert sum(s.kind == "tool_call" for s in read.steps) == 100 + 3


# --- OpenCode


def _opencode(turns: int, seed: int) -> bytes:
    """An export: a user message every 20 turns, assistant messages of one or more model
    calls (`step-start` parts), reasoning and text parts, tool parts completed (exit codes
    in `metadata.exit`), failed or interrupted, message errors, and now and then a message
    of more calls than the spool's window (its usage on its first step)."""
    rng = random.Random(seed)
    messages: list[dict] = []
    for n in range(turns):
        if n % 20 == 0:
            parts = [{"type": "text", "text": f"next task {n}"}]
            messages.append({"info": {"id": f"msg_u{n}", "role": "user", "time": {"created": n}}, "parts": parts})  # fmt: skip
        calls = 60 if n % 97 == 50 else 1 + (n % 5 == 0)
        parts = [{"type": "step-start"}]
        if n % 3 == 0:
            parts.append({"type": "reasoning", "text": f"think {n}"})
        parts.append({"type": "text", "text": f"step {n}"})
        for i in range(calls):
            command = _command(n, rng)
            state: dict = {"status": "completed", "input": {"command": command}, "output": _output(command, n),
                           "metadata": {"exit": 1 if command == FAILING else 0}, "time": {"start": n, "end": n + 1}}  # fmt: skip
            if n % 61 == 7:
                state = {"status": "error", "input": {"command": command}, "error": "tool failed"}
            elif n % 83 == 9:
                state = {"status": "running", "input": {"command": command}}
            parts.append({"type": "tool", "callID": f"c{n}.{i}", "tool": "bash", "state": state})
            if i % 2:
                parts.append({"type": "step-start"})
        info = {"id": f"msg_{n}", "role": "assistant", "modelID": "claude-sonnet-4-5", "time": {"created": n},
                "cost": 0.01, "tokens": {"input": 100 + n, "output": 20, "reasoning": 5, "cache": {"read": 50}}}  # fmt: skip
        if n % 211 == 100:
            info["error"] = {"name": "APIError", "data": {"message": f"overloaded {n}"}}
        messages.append({"info": info, "parts": parts})
    return json.dumps({"info": {"id": "ses_long", "title": "long"}, "messages": messages}).encode()


def test_a_long_opencode_session_reads_the_same_through_a_small_spool(monkeypatch):
    """A tool part holds its call's result, so no result comes late in this format; the
    message longer than the window still gets its usage on its first step."""
    data = _opencode(1500, 13)
    whole, spooled = held_and_spooled(data, monkeypatch, source="x.json", format="opencode")
    assert spooled.steps.spilled > 3000
    steps = whole.steps
    calls = [s for s in steps if s.kind == "tool_call"]
    assert len(calls) == sum(60 if n % 97 == 50 else 1 + (n % 5 == 0) for n in range(1500))
    assert all(s.result is not None for s in calls)
    assert sum(s.result == "[Tool execution was interrupted]" for s in calls) > 10
    assert sum(s.status == "error" for s in calls) > 150
    big = next(s for s in steps if s.batch_id == "msg_50#1")
    first = steps[steps.index(big) - 1]  # the message's text step comes first: its usage
    assert (first.kind, first.tokens_in, first.cost) == ("assistant", 150 + 50, 0.01)
    assert len(whole.warnings) == len(range(100, 1500, 211))  # the message errors
