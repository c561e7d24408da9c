"""Lanes by actor: nesting is not concurrency (runs/importers/lanes.py and the engine).

Real instrumentations put every tool call under a span of its own step (a turn, a graph node,
`Step N`, the chat span a call was rebuilt from). Wrapping steps in such spans, at any depth,
must never change what the engine finds; a sub-agent is another lane.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from detection import Step, analyze
from detection.model import Run
from runs.importers.lanes import assign_lanes

TOOLS = ("read_file", "search", "Edit", "bash")


@st.composite
def chains(draw):
    """A linear run of one agent: calls (few signatures, some failing), messages."""
    steps = []
    for seq in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["tool_call"] * 6 + ["assistant", "user"]))
        step = Step(seq=seq, kind=kind, id=f"s{seq}")
        if kind == "tool_call":
            step.tool = draw(st.sampled_from(TOOLS))
            step.args = {"path": draw(st.sampled_from(["a.py", "b.py", "missing.txt"]))}
            step.status = draw(st.sampled_from(["ok", "ok", "error"]))
            step.result = draw(st.sampled_from(["same", "other", "Error: not found"]))
        else:
            step.text = draw(st.sampled_from(["go on", "retrying", "done"]))
        steps.append(step)
    return steps


def _wrap(steps, depths):
    """Return the run with step i under depths[i] spans of its own, under one agent span."""
    out = [Step(seq=0, kind="system", id="agent", text="invoke_agent main")]
    origin = {}  # new seq -> old seq
    for index, step in enumerate(steps):
        parent = "agent"
        for level in range(depths[index]):
            span = Step(seq=len(out), kind="system", id=f"w{index}.{level}", parent_id=parent)
            span.text = f"turn {index}"
            out.append(span)
            parent = span.id
        moved = copy.copy(step)
        moved.seq, moved.parent_id = len(out), parent
        origin[moved.seq] = step.seq
        out.append(moved)
    return out, origin


def _shape(findings, origin=None):
    def at(seq):
        return origin.get(seq, seq) if origin is not None else seq

    return sorted(
        (f.detector, f.severity, f.tool, f.signature, f.count, tuple(at(s) for s in f.seqs))
        for f in findings
    )


@settings(max_examples=150, deadline=None)
@given(chains(), st.data())
def test_wrapping_steps_in_spans_at_any_depth_never_changes_a_finding(steps, data):
    depths = data.draw(st.lists(st.integers(0, 3), min_size=len(steps), max_size=len(steps)))
    plain = analyze(assign_lanes(Run(id="r", format="t", steps=copy.deepcopy(steps))))
    wrapped_steps, origin = _wrap(steps, depths)
    wrapped = analyze(assign_lanes(Run(id="r", format="t", steps=wrapped_steps)))
    assert wrapped.verdict == plain.verdict
    assert _shape(wrapped.findings, origin) == _shape(plain.findings)


def test_seven_failing_calls_each_under_its_turn_span_are_a_stop():
    failing = [
        Step(seq, "tool_call", id=f"c{seq}", tool="read_file", args={"path": "missing.txt"},
             result="FileNotFoundError: missing.txt", status="error")
        for seq in range(7)
    ]  # fmt: skip
    steps, _ = _wrap(failing, [2] * 7)
    result = analyze(assign_lanes(Run(id="r", format="t", steps=steps)))
    assert result.verdict == "stop"
    assert {step.lane for step in steps} == {None}


def test_steps_under_a_sub_agent_call_are_a_lane_named_after_it():
    steps = [
        Step(0, "tool_call", id="t", tool="Task", args={"prompt": "find x"}, result="found"),
        Step(1, "user", id="u", parent_id="t", text="find x"),
        Step(2, "tool_call", id="c", parent_id="u", tool="search", args={"q": "x"}, result="x"),
        Step(3, "tool_call", id="d", tool="search", args={"q": "x"}, result="x"),
    ]
    assign_lanes(Run(id="r", format="t", steps=steps))
    assert [step.lane for step in steps] == [None, "agent:t", "agent:t", None]


def test_an_explicit_lane_is_inherited_by_the_steps_beneath_it():
    steps = [
        Step(0, "system", id="sub", text="sub-agent", lane="agent:researcher"),
        Step(1, "system", id="turn", parent_id="sub", text="turn 1"),
        Step(2, "tool_call", id="c", parent_id="turn", tool="search", args={"q": "x"}),
        Step(3, "tool_call", id="d", parent_id="elsewhere", tool="search", args={"q": "x"}),
    ]
    assign_lanes(Run(id="r", format="t", steps=steps))
    assert [step.lane for step in steps] == ["agent:researcher"] * 3 + [None]
