"""Streaming and limits for the SWE-agent, mini-swe-agent, OpenHands and tree importers.

Every document here is built in the test from the format notes (§3.1–3.3), not copied from a
real file. The documents are small except in the memory tests, which build ~20 MB ones and
check that the peak Python memory while reading stays a fraction of the file.
"""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from runs.importers import iter_runs
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

BIG = "x" * 20_000  # the bulk of every generated item: what the formats repeat


def swe_agent(args: str = "ls", steps: int = 1, bulk: str = "") -> dict:
    """A SWE-agent 1.x .traj in the order SWE-agent writes it: trajectory, history, info."""
    trajectory = [
        {
            "action": f"{args} {i}" if i else args,
            "observation": "out",
            "thought": "t",
            "messages": [{"role": "user", "content": bulk}] * 3,
            "state": "{'open_file': 'n/a'}",
        }
        for i in range(steps)
    ]
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the task"}]
    return {
        "environment": "main",
        "trajectory": trajectory,
        "history": history,
        "info": {"exit_status": "submitted", "submission": "diff", "model_stats": {}},
    }


def mini(command: str = "ls", turns: int = 1, bulk: str = "") -> dict:
    """A mini-swe-agent 1.1 trajectory: info first, trajectory_format last (as 2.x writes)."""
    messages: list[dict] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "the task"},
    ]
    for turn in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": "t",
                "extra": {
                    "actions": [{"command": command, "tool_call_id": f"c{turn}"}],
                    "response": {"reasoning": bulk},
                },
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{turn}",
                "content": "ok",
                "extra": {"returncode": 0},
            }
        )
    return {
        "info": {"mini_version": "2.1.0"},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1.1",
    }


def gui_events(command: str = "ls", count: int = 1, bulk: str = "") -> list:
    events: list[dict] = [
        {"id": 0, "source": "user", "action": "message", "args": {"content": "t"}}
    ]
    for n in range(count):
        events.append(
            {
                "id": 2 * n + 1,
                "source": "agent",
                "action": "run",
                "args": {"command": command},
                "tool_call_metadata": {"model_response": {"reasoning": bulk}},
            }
        )
        events.append(
            {
                "id": 2 * n + 2,
                "source": "environment",
                "cause": 2 * n + 1,
                "observation": "run",
                "content": "out",
                "extras": {"metadata": {"exit_code": 0}},
            }
        )
    return events


def eval_row(command: str = "ls", count: int = 1, bulk: str = "") -> dict:
    return {
        "instance_id": "demo__1",
        "instance": {"problem_statement": bulk},
        "history": gui_events(command, count, bulk),
        "metadata": {"agent_class": "CodeActAgent"},
    }


def tree(tool: str = "ls", count: int = 1, bulk: str = "") -> dict:
    children = [
        {"type": "ToolNode", "name": tool, "args": {"bulk": bulk}, "result": "r", "children": []}
        for _ in range(count)
    ]
    return {"type": "ThinkNode", "thought": "plan", "children": children}


BUILDERS = {
    "swe-agent": lambda arg="ls": swe_agent(arg),
    "mini-swe-agent": lambda arg="ls": mini(arg),
    "openhands": lambda arg="ls": gui_events(arg),
    "openhands-eval": lambda arg="ls": eval_row(arg),
}
FORMATS = sorted(BUILDERS)


def data_of(label: str, arg: str = "ls", indent: int | None = None) -> bytes:
    text = json.dumps(BUILDERS[label](arg), indent=indent)
    if label == "openhands-eval":
        text = json.dumps(BUILDERS[label](arg)) + "\n"
    return text.encode()


def runs(data: bytes, label: str, **kwargs):
    format = "openhands" if label == "openhands-eval" else label
    return list(iter_runs(data, source="t.json", format=format, **kwargs))


@pytest.mark.parametrize("label", FORMATS)
def test_the_built_documents_read_as_one_call(label):
    (run,) = runs(data_of(label), label)
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.args == {"command": "ls"} and call.status == "ok"


@pytest.mark.parametrize("label", FORMATS)
def test_empty_file(label):
    with pytest.raises(TraceError, match="empty"):
        runs(b"", label)


@pytest.mark.parametrize("label", sorted(set(FORMATS) - {"openhands-eval"}))
def test_truncated_document_names_a_line(label):
    data = data_of(label, indent=1)
    with pytest.raises(TraceError) as info:
        runs(data[: len(data) - 8], label)
    assert info.value.line is not None and "truncated" in info.value.reason


def test_truncated_eval_line_is_skipped_and_counted():
    good = data_of("openhands-eval")
    (run,) = runs(good + good[:-30] + b"\n", "openhands-eval")
    assert run.skipped == 1 and "t.json:2: invalid JSON" in run.warnings[0]


@pytest.mark.parametrize("label", FORMATS)
def test_invalid_utf8_is_reported(label):
    data = data_of(label).replace(b'"ls"', b'"l\xff"', 1)
    with pytest.raises(TraceError, match="UTF"):
        runs(data, label)


@pytest.mark.parametrize("label", FORMATS)
def test_deep_nesting_is_refused_with_the_limit(label):
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(TraceError, match="nested deeper"):
        runs(deep, label)


@pytest.mark.parametrize("label", FORMATS)
def test_huge_strings_are_clipped_with_a_marker(label):
    (run,) = runs(data_of(label, "y" * 5000), label, limits=Limits(max_value_chars=100))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.args == {"command": "y" * 100 + "…[truncated 4900 chars]"}


@pytest.mark.parametrize("label", ["swe-agent", "mini-swe-agent", "openhands"])
def test_a_document_that_is_not_the_format_fails_clearly(label):
    with pytest.raises(TraceError):
        runs(b'"just a string"', label)
    with pytest.raises(TraceError):
        runs(json.dumps([1, 2, 3]).encode(), label)


def test_steps_per_run_limit():
    for label in FORMATS:
        with pytest.raises(TraceError, match="more than 0 steps"):
            runs(data_of(label), label, limits=Limits(max_steps=0))


def test_an_eval_line_over_the_line_limit_is_skipped_without_being_held():
    small = data_of("openhands-eval")
    big = json.dumps(eval_row(bulk="z" * 10_000)).encode() + b"\n"
    found = runs(big + small, "openhands-eval", limits=Limits(max_line_bytes=len(small) + 10))
    assert len(found) == 1 and found[0].skipped == 1
    assert "t.json:1: line is over" in found[0].warnings[0]


# --- memory: the big arrays are read item by item, the repeated parts never built

MEMORY_CASES = {
    # label: (format, build(count, bulk), items, calls per item)
    "swe-agent": ("swe-agent", lambda n, bulk: swe_agent("ls", n, bulk), 300),
    "mini-swe-agent": ("mini-swe-agent", lambda n, bulk: mini("ls", n, bulk), 1_000),
    "openhands-gui": ("openhands", lambda n, bulk: gui_events("ls", n, bulk), 1_000),
    "tree": ("tree", lambda n, bulk: [tree("ls", 2, bulk) for _ in range(n)], 500),
}


@pytest.mark.parametrize("label", sorted(MEMORY_CASES))
def test_a_big_document_is_read_incrementally(label):
    """Peak Python memory while reading a ~20 MB document stays far below the file size."""
    format, build, count = MEMORY_CASES[label]
    data = json.dumps(build(count, BIG)).encode()
    tracemalloc.start()
    calls = sum(run.tool_calls for run in iter_runs(io.BytesIO(data), source="b", format=format))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert calls == (count * 2 if label == "tree" else count)  # tree: 2 ToolNodes per root
    assert len(data) > 15_000_000 and peak < len(data) / 4, (len(data), peak)


def test_a_big_eval_line_is_streamed_too():
    row = json.dumps(eval_row("ls", 1_000, BIG)).encode() + b"\n"  # one ~20 MB line
    tracemalloc.start()
    (run,) = list(iter_runs(io.BytesIO(row), source="output.jsonl", format="openhands"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert run.tool_calls == 1_000 and run.metadata["agent"] == "CodeActAgent"
    # the line is held as bytes (read up to max_line_bytes); what is built from it is not a
    # second copy of it: json.loads of the line would take several times the line
    assert len(row) > 15_000_000 and peak < len(row) * 2.5, (len(row), peak)


def test_members_after_the_big_array_are_read():
    doc = swe_agent("ls", 3)
    reordered = {"trajectory": doc["trajectory"], "history": doc["history"], "info": doc["info"]}
    reordered["environment"] = "late"
    (run,) = runs(json.dumps(reordered).encode(), "swe-agent")
    assert run.metadata["exit_status"] == "submitted" and run.metadata["environment"] == "late"
    assert run.steps[0].text == "the task"  # history after the trajectory still gives the task
    doc = mini("ls", 2)
    late = {"messages": doc["messages"], "trajectory_format": "x", "info": {"mini_version": "9"}}
    (run,) = runs(json.dumps(late).encode(), "mini-swe-agent")
    assert run.metadata["mini_version"] == "9" and run.tool_calls == 2
