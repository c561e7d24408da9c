"""The agent harnesses' whole-document formats read a run of any length in bounded memory:
a long SWE-agent trajectory, mini-swe-agent trajectory, OpenHands GUI export and OpenHands
eval line read through a spool of a tiny window give the same run as read held whole, step
for step and finding for finding."""

from __future__ import annotations

import json
import random

import pytest

from runs.importers import iter_runs, openhands
from tests.importers.spooling import held_and_spooled

COMMANDS = ("ls src", "cat a.py", "grep -rn handler src", "python -m pytest -q tests")
FAILING = "python -m pytest tests/test_x.py"


def _command(n: int, rng: random.Random) -> str:
    if n % 50 >= 45:  # the same failing call five times every 50: a loop to find
        return FAILING
    return f"{rng.choice(COMMANDS)} {n}"


def _observation(command: str, n: int) -> str:
    if command == FAILING:
        return "Traceback (most recent call last):\n  AssertionError: handler\n1 failed"
    return f"output of {command} at {n}\n" * 3


def _swe_agent(count: int, seed: int, *, history_first: bool) -> bytes:
    """A 1.x trajectory: thoughts, function calls named in `history` (with retried replies
    the trajectory leaves out, and demo messages), format errors, `info` last."""
    rng = random.Random(seed)
    trajectory, history = (
        [],
        [
            {"role": "system", "content": "You are SWE-agent."},
            {"role": "user", "content": "a demo task", "is_demo": True},
            {"role": "assistant", "content": "demo", "action": "ls", "is_demo": True},
            {"role": "user", "content": "fix the handler"},
        ],
    )
    for n in range(count):
        if n % 97 == 13:  # a malformed reply: nothing ran
            entry = {"action": "oops", "observation": "Your output was not formatted correctly"}
            trajectory.append(entry | {"thought": ""})
            history.append({"role": "assistant", "content": "oops", "action": "oops"})
            continue
        command = _command(n, rng)
        if n % 31 == 7:  # a retried reply the trajectory does not have
            history.append({"role": "assistant", "content": "retry", "action": f"retry {n}"})
        call = {"id": f"call_{n}", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}  # fmt: skip
        message = {"role": "assistant", "content": f"thought {n}", "action": command}
        history.append(message | ({"tool_calls": [call]} if n % 11 else {}))
        history.append({"role": "tool", "content": _observation(command, n)})
        trajectory.append(
            {
                "action": command,
                "observation": _observation(command, n),
                "thought": f"thought {n}" if n % 3 else "",
                "messages": history[-4:],
                "state": "{}",
            }
        )
    info = {"exit_status": "submitted", "submission": "diff", "model_stats": {"api_calls": count}}
    parts = [("history", history), ("trajectory", trajectory)]
    document = {"environment": "swe_main"} | dict(parts if history_first else parts[::-1])
    return json.dumps(document | {"info": info}).encode()


@pytest.mark.parametrize("history_first", [False, True])
def test_a_long_swe_agent_trajectory_reads_the_same_through_a_small_spool(
    monkeypatch, history_first
):
    data = _swe_agent(3000, 7, history_first=history_first)
    whole, spooled = held_and_spooled(data, monkeypatch, source="x.traj", format="swe-agent")
    assert spooled.steps.spilled > 4000
    steps = whole.steps
    assert steps[0].kind == "user" and steps[0].text == "fix the handler"
    assert sum(s.status == "invalid" for s in steps) == 31
    named = [s for s in steps if s.id]
    assert len(named) > 2500 and all(s.tool == "bash" and "command" in s.args for s in named)
    assert all(s.text is None for s in steps if s.kind == "tool_call")


def _mini_swe_agent(turns: int, seed: int) -> bytes:
    """A 1.1 trajectory (`extra.actions`, native tool calls, `role: tool` results), with
    format errors, 1-style text actions answered by a user message, and an exit."""
    rng = random.Random(seed)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "fix the handler"},
    ]
    for n in range(turns):
        command = _command(n, rng)
        if n % 89 == 5:
            messages.append(
                {
                    "role": "user",
                    "content": "Format error: found 2 actions",
                    "extra": {"interrupt_type": "FormatError", "n_actions": 2},
                }
            )
            continue
        if n % 13 == 3:  # a text action, answered by the next user message
            text = f"THOUGHT: step {n}\n```bash\n{command}\n```"
            messages.append({"role": "assistant", "content": text})
            code = 1 if command == FAILING else 0
            answer = f"<returncode>{code}</returncode>\n{_observation(command, n)}"
            messages.append({"role": "user", "content": answer})
            continue
        ids = [f"call_{n}_{i}" for i in range(1 + (n % 7 == 0))]  # now and then two calls
        calls = [{"id": i, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}} for i in ids]  # fmt: skip
        usage = {"prompt_tokens": 1000 + n, "completion_tokens": 50}
        extra = {
            "actions": [{"command": command, "tool_call_id": i} for i in ids],
            "response": {"created": 1_763_500_000 + n, "usage": usage},
        }
        messages.append(
            {"role": "assistant", "content": f"THOUGHT: {n}", "tool_calls": calls, "extra": extra}
        )
        for i in reversed(ids):  # answered last call first
            code = 1 if command == FAILING else 0
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": i,
                    "content": _observation(command, n),
                    "extra": {"returncode": code},
                }
            )
    messages.append({"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"})  # fmt: skip
    messages.append({"role": "exit", "content": "diff", "extra": {"exit_status": "Submitted"}})
    info = {"mini_version": "2.1.0", "exit_status": "Submitted", "submission": "diff"}
    document = {"info": info, "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}
    return json.dumps(document).encode()


def test_a_long_mini_swe_agent_trajectory_reads_the_same_through_a_small_spool(monkeypatch):
    data = _mini_swe_agent(3000, 11)
    whole, spooled = held_and_spooled(data, monkeypatch, source="x.traj.json", format="mini-swe-agent")  # fmt: skip
    assert spooled.steps.spilled > 4000
    steps = whole.steps
    calls = [s for s in steps if s.kind == "tool_call" and s.status != "invalid"]
    assert all(s.result is not None for s in calls)  # every call got its result
    assert sum(s.status == "error" for s in calls) > 250
    assert steps[-1].result == "diff" and steps[-1].status == "ok"


def _openhands_events(count: int, seed: int) -> list[dict]:
    """Current-schema events: a task, actions with thoughts and model responses (two actions
    to a response now and then), their observations (some a few events late), messages,
    skipped state changes, rejected calls."""
    rng = random.Random(seed)
    events: list[dict] = [{"id": 0, "source": "user", "action": "message", "args": {"content": "fix it"}}]  # fmt: skip
    late: list[dict] = []
    next_id = 1
    for n in range(count):
        command = _command(n, rng)
        shared = n % 10 == 1  # now and then a response's second action
        response = {"id": f"resp-{n - shared}", "usage": {"prompt_tokens": 100 + n}}
        action = {
            "id": next_id,
            "source": "agent",
            "action": "run",
            "args": {"command": command, "thought": f"step {n}" if n % 4 else ""},
            "tool_call_metadata": {"model_response": response},
        }
        code = 1 if command == FAILING else 0
        observation = {
            "id": next_id + 1,
            "source": "environment",
            "cause": next_id,
            "observation": "run",
            "content": _observation(command, n),
            "extras": {"metadata": {"exit_code": code}},
        }
        next_id += 2
        events.append(action)
        (late if n % 9 == 4 else events).append(observation)
        if len(late) > 3 or n % 9 == 0:  # the late ones come a few events on
            events.extend(late)
            late = []
        if n % 40 == 20:
            events.append({"id": next_id, "source": "agent", "action": "message", "args": {"content": f"note {n}"}})  # fmt: skip
            events.append({"id": next_id + 1, "cause": next_id, "observation": "null", "content": ""})  # fmt: skip
            events.append({"id": next_id + 2, "observation": "agent_state_changed", "cause": None})
            next_id += 3
        if n % 70 == 33:
            metadata = {"function_name": "str_replace_editor"}
            events.append({"id": next_id, "observation": "error", "cause": None, "content": "missing path", "tool_call_metadata": metadata})  # fmt: skip
            next_id += 1
    return events + late


def test_a_long_openhands_gui_export_reads_the_same_through_a_small_spool(monkeypatch):
    monkeypatch.setattr(openhands, "MAX_ACTIONS", 64)  # more than any observation is late
    data = json.dumps(_openhands_events(3000, 5)).encode()
    whole, spooled = held_and_spooled(data, monkeypatch, source="t.json", format="openhands")
    assert spooled.steps.spilled > 4000
    calls = [s for s in whole.steps if s.kind == "tool_call"]
    assert sum(s.status == "invalid" for s in calls) == 43
    assert all(s.result is not None for s in calls)  # every action got its observation
    assert sum(s.tokens_in is not None for s in whole.steps) == 2700  # once a response


def test_a_long_openhands_eval_line_reads_the_same_through_a_small_spool(monkeypatch):
    monkeypatch.setattr(openhands, "MAX_ACTIONS", 64)
    row = {
        "instance_id": "bench__1",
        "instruction": "fix the handler",
        "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "m"}},
        "history": _openhands_events(3000, 9),
        "metrics": {"accumulated_cost": 0.5},
    }
    data = json.dumps(row).encode() + b"\n"
    whole, spooled = held_and_spooled(data, monkeypatch, source="output.jsonl", format="openhands")  # fmt: skip
    assert spooled.steps.spilled > 4000
    assert whole.id == "bench__1" and whole.metadata["model"] == "m"


def test_an_observation_naming_an_action_past_the_bound_reads_as_its_own_step(monkeypatch):
    monkeypatch.setattr(openhands, "MAX_ACTIONS", 2)
    events = [
        {"id": i, "source": "agent", "action": "run", "args": {"command": f"ls {i}"}}
        for i in range(1, 4)
    ] + [{"id": 9, "cause": 1, "observation": "run", "content": "late", "extras": {}}]
    (run,) = iter_runs(json.dumps(events).encode(), source="t.json", format="openhands")
    assert [s.result for s in run.steps] == [None, None, None, "late"]
    assert run.steps[-1].tool == "run"  # a step of its own, named after the observation
