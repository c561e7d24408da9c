"""The property tests of issue 23 parts 1 and 2, over every sample in tests/data (the
generated runs of tests/importers/test_lanes.py and tests/detection/test_unknowns.py cover
shapes no sample has; these cover what the importers really make of each format):

- wrapping steps in extra spans, at any depth, never changes a finding or the verdict;
- a call whose arguments or result are blanked (unknown) is never part of a loop (a failed
  or invalid call still failed: the failure detectors may count it);
- blanking never adds a loop: the verdict never rises, and each warn/stop finding of the
  blanked run shares a call with one of the run's own (tests/detection/test_unknowns.py
  says why it may be named by another detector).

Part 3's invariant over the same files is tests/importers/test_invariants.py.

Written with the gap they found (detection/detectors/repeat.py): a repeat's count started at
the first call with its signature whatever its result, so a first call whose result was
unknown was the first of the loop's seqs (codex_0_1xx_stuck_poll.jsonl, results blanked;
tests/detection/test_unknowns.py has the 4-call case).
"""

from __future__ import annotations

import copy

import pytest

from detection import analyze
from detection.model import Run, Step
from runs.importers import iter_runs
from runs.importers.lanes import assign_lanes
from tests.importers.test_invariants import NOT_TRACES, SAMPLES, name_of

RANK = {"ok": 0, "info": 1, "warn": 2, "stop": 3}
TRACES = [path for path in SAMPLES if name_of(path) not in NOT_TRACES]


def _shape(findings, origin=None):
    def at(seq):
        return origin[seq] if origin is not None else seq

    return sorted(
        (f.detector, f.severity, f.tool, f.signature, f.count, tuple(at(s) for s in f.seqs))
        for f in findings
    )


def _wrapped(run: Run) -> tuple[Run, dict[int, int]]:
    """The run with step i under i % 4 spans of its own (in the step's lane, between the step
    and its parent), as an instrumentation that puts each step under a turn span would."""
    steps: list[Step] = []
    origin: dict[int, int] = {}  # new seq -> old seq
    for index, step in enumerate(run.steps):
        parent = step.parent_id
        for level in range(index % 4):
            span = Step(seq=len(steps), kind="system", id=f"wrap{index}.{level}")
            span.parent_id, span.lane, span.text = parent, step.lane, f"turn {index}"
            steps.append(span)
            parent = span.id
        moved = copy.copy(step)
        moved.seq, moved.parent_id = len(steps), parent
        origin[moved.seq] = step.seq
        steps.append(moved)
    return Run(id=run.id, format=run.format, steps=steps), origin


@pytest.mark.parametrize("path", TRACES, ids=name_of)
def test_wrapping_any_sample_s_steps_in_spans_never_changes_a_finding(path):
    for run in iter_runs(path):
        run.steps = list(run.steps)
        plain = analyze(copy.deepcopy(run))
        wrapped_run, origin = _wrapped(run)
        wrapped = analyze(assign_lanes(wrapped_run))
        assert wrapped.verdict == plain.verdict, (name_of(path), run.id)
        assert _shape(wrapped.findings, origin) == _shape(plain.findings), (name_of(path), run.id)


@pytest.mark.parametrize("what", ["args", "result", "both"])
@pytest.mark.parametrize("path", TRACES, ids=name_of)
def test_a_blanked_call_of_any_sample_is_never_part_of_a_loop(path, what):
    for run in iter_runs(path):
        run.steps = list(run.steps)
        calls = [step for step in run.steps if step.kind == "tool_call"]
        blanked = calls[1::2]  # every other call
        for step in blanked:
            if what in ("args", "both"):
                step.args = None
            if what in ("result", "both"):
                step.result = None
        unknown = {step.seq for step in blanked if step.status not in ("error", "invalid")}
        unknown_args = {step.seq for step in blanked if step.args is None}
        for finding in analyze(run).findings:
            if RANK[finding.severity] < RANK["warn"]:
                continue
            assert not unknown & set(finding.seqs), (name_of(path), run.id, finding)
            if finding.detector in ("repeat", "oscillation"):
                assert not unknown_args & set(finding.seqs), (name_of(path), run.id, finding)


@pytest.mark.parametrize("what", ["args", "result", "both"])
@pytest.mark.parametrize("path", TRACES, ids=name_of)
def test_blanking_any_sample_s_calls_never_adds_a_loop(path, what):
    """(It found a trap case, trap_build_fix_cycle.jsonl, judged stop with the results of
    its failing `make` runs blanked: each unknown failure after an edit "failed the same
    way" as the one before it.)"""
    for run in iter_runs(path):
        run.steps = list(run.steps)
        plain = analyze(copy.deepcopy(run))
        loops = [set(f.seqs) for f in plain.findings if RANK[f.severity] >= RANK["warn"]]
        calls = [index for index, step in enumerate(run.steps) if step.kind == "tool_call"]
        for chosen in (calls[1::2], calls[0::2]):
            blanked = copy.deepcopy(run)
            for index in chosen:
                if what in ("args", "both"):
                    blanked.steps[index].args = None
                if what in ("result", "both"):
                    blanked.steps[index].result = None
            after = analyze(blanked)
            assert RANK[after.verdict] <= RANK[plain.verdict], (name_of(path), run.id)
            for finding in after.findings:
                if RANK[finding.severity] >= RANK["warn"]:
                    assert any(set(finding.seqs) & loop for loop in loops), (run.id, finding)
