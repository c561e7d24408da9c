"""Unknown is not equal: arguments or results the trace does not carry (None) never make two
calls the same call or give them the same result."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from detection import Step, analyze

RANK = {"ok": 0, "info": 1, "warn": 2, "stop": 3}
TOOLS = ("read_file", "search", "Edit", "bash", "get_flight_status")


@st.composite
def runs(draw):
    steps = []
    for seq in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["tool_call"] * 7 + ["user", "assistant"]))
        step = Step(seq=seq, kind=kind, id=f"s{seq}")
        if kind == "tool_call":
            step.tool = draw(st.sampled_from(TOOLS))
            step.args = {"path": draw(st.sampled_from(["a.py", "b.py", "src/c.py", "missing"]))}
            step.status = draw(st.sampled_from(["ok", "ok", "error"]))
            step.result = draw(st.sampled_from(["", "same", "other", "Error: not found", "42"]))
            step.batch_id = draw(st.sampled_from([None, None, f"m{seq // 2}"]))
        else:
            step.text = draw(st.sampled_from(["go on", "I will retry", "done"]))
        steps.append(step)
    return steps


def _blank(steps, data, what):
    """Blank the arguments, the results or both of some of the run's calls; return them."""
    calls = [step for step in steps if step.kind == "tool_call"]
    blanked = data.draw(st.lists(st.sampled_from(calls), unique_by=id) if calls else st.just([]))
    for step in blanked:
        if what in ("args", "both"):
            step.args = None
        if what in ("result", "both"):
            step.result = None
    return blanked


def _loops(analysis):
    """The warn/stop findings by detector (info, such as a streak, is never a verdict)."""
    counts = {}
    for finding in analysis.findings:
        if RANK[finding.severity] >= RANK["warn"]:
            counts[finding.detector] = counts.get(finding.detector, 0) + 1
    return counts


@settings(max_examples=200, deadline=None)
@given(runs(), st.data(), st.sampled_from(["args", "result", "both"]))
def test_a_blanked_call_is_never_part_of_a_loop(steps, data, what):
    """Blanking arguments or results never makes a call one of a loop's calls.

    (A failure with unknown text still failed: the failure detectors may count it. Blanking
    may still change other findings: a call whose arguments are unknown breaks the cycle it
    was part of, and a repeat that the cycle claimed is then seen; see the test below.)
    """
    blanked = _blank(steps, data, what)
    unknown = {step.seq for step in blanked if step.status != "error"}
    unknown_args = {step.seq for step in blanked if step.args is None}
    for finding in analyze(steps).findings:
        if RANK[finding.severity] < RANK["warn"]:
            continue
        assert not unknown & set(finding.seqs), (what, finding)
        if finding.detector in ("repeat", "oscillation"):
            assert not unknown_args & set(finding.seqs), (what, finding)


def test_a_call_with_unknown_arguments_breaks_the_cycle_it_was_in():
    """read a, read b, read a, …: the cycle claims its calls, and the three reads of b that
    bring nothing new are a loop of the cycle's before it has three full cycles (it used to
    be "ok": the cycle claimed the repeat and was not yet a loop itself). With the arguments
    of one read of a unknown there is no cycle, and they are a repeat of their own: the same
    loop, named by another detector, never a new one."""
    spec = ["", "", "same", "", "same", ""]
    steps = [
        Step(seq, "tool_call", tool="read_file", args={"path": "ab"[seq % 2]}, result=text)
        for seq, text in enumerate(spec)
    ]
    (cycle,) = analyze(copy.deepcopy(steps)).findings
    assert (cycle.detector, cycle.severity, cycle.seqs) == ("oscillation", "warn", (1, 2, 3, 4, 5))
    assert "cycle of 2 calls" in cycle.message
    steps[2].args = None
    (finding,) = analyze(steps).findings
    assert (finding.detector, finding.seqs) == ("repeat", (1, 3, 5))


def _flagged(analysis):
    return [set(f.seqs) for f in analysis.findings if RANK[f.severity] >= RANK["warn"]]


# Derandomized, so that CI runs the same 400 examples every time: a random search runs
# outside CI (scripts of thousands of examples; the closing notes give how many found
# nothing, and at which commit). What such searches found is below, each now a test too.
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(runs(), st.data(), st.sampled_from(["args", "result", "both"]))
def test_blanking_arguments_or_results_never_adds_a_finding(steps, data, what):
    """Issue 23 part 2's property. Blanking never raises the verdict, and every loop (warn or
    stop finding) of the blanked run is one of the run's own loops: it shares a call with
    one. It may be named by another detector: calls that are no longer the same call are
    the blocker they also were, and the cycle a call with unknown arguments broke leaves
    the repeat it claimed (the test above).

    It found, and now holds because of: a failure with unknown text after a change "failing
    the same way" as the failure before it (detectors/repeat.py); an unknown failure not
    moving a blocker as any other error would (detectors/blocker.py); an unknown call of a
    mutating tool between two identical failures (engine.py); a blocker at stop kept quiet
    by a repeat at warn on the same step (Monitor.report); a cycle that claimed a repeat and
    was not yet a loop itself (detectors/patterns.py: ``escalate``); an oscillation
    finding whose seqs a later cycle of the same period overwrote; a call with unknown
    arguments the stall detector never saw, so it did not end a run of the same result
    (engine.py); and a failure with unknown arguments that no success on another target
    could re-arm, though it may have been on that target (detectors/blocker.py).
    """
    plain = analyze(copy.deepcopy(steps))
    _blank(steps, data, what)
    after = analyze(steps)
    assert RANK[after.verdict] <= RANK[plain.verdict], (what, after.findings)
    loops = _flagged(plain)
    for seqs in _flagged(after):
        assert any(seqs & loop for loop in loops), (what, seqs, plain.findings, after.findings)


def test_a_repeat_starts_at_the_first_call_that_returned_its_result_not_an_unknown_one():
    """The first call's result is not in the trace; the three after it return one result:
    a loop of three from the second call (found over the samples by
    tests/importers/test_sample_properties.py: it used to start at the unknown)."""
    for spec, seqs in (
        ([None, "same", "same", "same"], (1, 2, 3)),
        ([None, "same", None, "same", None, "same"], (1, 3, 5)),
    ):
        steps = [
            Step(seq, "tool_call", tool="read_file", args={"path": "a.py"}, result=text)
            for seq, text in enumerate(spec)
        ]
        loops = [f for f in analyze(steps).findings if f.severity in ("warn", "stop")]
        assert [(f.detector, f.count, f.seqs, f.started_at) for f in loops] == [
            ("repeat", 3, seqs, seqs[0])
        ]


def test_ten_distinct_calls_recorded_with_names_only_are_at_most_a_streak():
    """Google ADK's default spans: the tool name, no arguments, no result."""
    steps = [Step(seq, "tool_call", tool="read_file") for seq in range(10)]
    result = analyze(steps)
    assert result.verdict == "ok"
    assert {finding.detector for finding in result.findings} <= {"streak"}
    assert (result.unknown_args, result.unknown_results) == (10, 10)


def test_hook_records_without_results_are_no_result_stall():
    """Cursor hook records carry the call but no result: six reads of different files."""
    steps = [
        Step(seq, "tool_call", tool="read_file", args={"path": f"src/m{seq}.py"})
        for seq in range(6)
    ]
    result = analyze(steps)
    assert result.verdict == "ok", result.findings
    assert result.unknown_results == 6 and result.unknown_args == 0


def test_the_same_failing_call_with_unknown_results_is_still_a_repeat():
    """Failure status counts where it is present, even without the error's text."""
    steps = [
        Step(seq, "tool_call", tool="read_file", args={"path": "missing.txt"}, status="error")
        for seq in range(7)
    ]
    assert analyze(steps).verdict == "stop"


def test_failing_calls_with_unknown_arguments_are_never_the_same_call():
    steps = [
        Step(seq, "tool_call", tool="read_file", result="ok, 3 lines", status="ok")
        for seq in range(7)
    ]
    result = analyze(steps)
    assert result.verdict == "ok", result.findings


def test_a_call_with_unknown_arguments_ends_a_run_of_the_same_result():
    """Three reads of different files answer "Error: not found", but the read between them
    answered something else: no stall, whether or not its arguments are known (found by the
    property above: the stall detector was not even told of a call with unknown arguments,
    so the run of the same result went on past it)."""

    def run(middle_args):
        spec = [("a.py", "Error: not found"), ("c.py", "Error: not found")]
        spec += [(middle_args, ""), ("b.py", "Error: not found")]
        return [
            Step(seq, "tool_call", tool="read_file", args=path and {"path": path}, result=text)
            for seq, (path, text) in enumerate(spec)
        ]

    assert analyze(run("a.py")).verdict == "ok"
    assert analyze(run(None)).verdict == "ok", analyze(run(None)).findings
    stalled = [step for step in run("a.py") if step.seq != 2]
    assert [f.detector for f in analyze(stalled).findings] == ["result_stall"]


def test_a_failure_with_unknown_arguments_may_have_been_on_any_target():
    """Edit fails on c.py and on b.py, succeeds on a.py, fails on a.py: three failures of
    one error on targets the success did not touch, a blocker. With the first failure's
    arguments unknown it may have been on a.py, which the success fixed: no blocker (a
    blanked call never makes a loop the plain run does not have)."""

    def run(first):
        spec = [(first, "error"), ("b.py", "error"), ("a.py", "ok"), ("a.py", "error")]
        return [
            Step(
                seq, "tool_call", tool="Edit", args=path and {"path": path}, status=status,
                result="Error: not found" if status == "error" else "OK",
            )
            for seq, (path, status) in enumerate(spec)
        ]  # fmt: skip

    (blocker,) = analyze(run("c.py")).findings
    assert (blocker.detector, blocker.severity, blocker.seqs) == ("blocker", "warn", (0, 1, 3))
    assert analyze(run("a.py")).verdict == "ok"
    assert analyze(run(None)).verdict == "ok", analyze(run(None)).findings
