"""SWE-agent `.traj` importer, checked against the real samples in tests/data/traces.

Counts were taken by hand from the files, independently of the importer:
- eps.traj: `jq '.trajectory|length'` -> 14 tool calls; errors: `jq '[.trajectory[] |
  select(.observation | test("Wrong flag!|No such file or directory"))] | length'` -> 6
  (trajectory[8..12] "Wrong flag!" x5, trajectory[0] "cannot open … (No such file or
  directory)"); no other observation matches a rule of text_errors.SWE_AGENT.
- 6e44b9…traj: `jq '.trajectory|length'` -> 5, no observation matching a rule -> 0 errors;
  `jq '[.history[] | select(.tool_calls)] | length'` -> 4 assistant tool calls (submit has none).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, iter_runs, swe_agent
from runs.importers.detect import sample_of
from runs.importers.errors import TraceError

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "swe-agent"
EPS = TRACES / "eps.traj"
FC = TRACES / "6e44b9__sweagenttestrepo-1c2844.traj"


def runs_of(data: bytes | Path, **kwargs):
    if isinstance(data, Path):
        data = data.read_bytes()
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def errors(run) -> int:
    return sum(1 for step in run.steps if step.status == "error")


@pytest.mark.parametrize(("path", "calls", "failed"), [(EPS, 14, 6), (FC, 5, 0)])
def test_samples_give_one_run_with_hand_counted_calls_and_errors(path, calls, failed):
    (run,) = runs_of(path)
    assert run.format == "swe-agent"
    assert (run.tool_calls, errors(run)) == (calls, failed)
    assert [step.seq for step in run.steps] == list(range(len(run.steps)))
    assert all(step.parent_id is None for step in run.steps)


def test_eps_repeats_the_same_wrong_flag_with_identical_args():
    (run,) = runs_of(EPS)
    calls = [step for step in run.steps if step.kind == "tool_call"]
    repeated = calls[9:13]
    assert {step.tool for step in repeated} == {"submit"}
    assert len({json.dumps(step.args, sort_keys=True) for step in repeated}) == 1
    assert repeated[0].args == {"command": "submit flag{People always make the best exploits.}"}
    assert all(step.status == "error" and step.result == "Wrong flag!" for step in repeated)
    assert calls[13].status == "ok"


def test_eps_starts_with_the_task_and_keeps_thoughts_as_assistant_steps():
    (run,) = runs_of(EPS)
    assert run.steps[0].kind == "user" and "CTF challenge" in run.steps[0].text
    assert run.steps[1].kind == "assistant" and run.steps[2].kind == "tool_call"
    assert run.metadata["exit_status"] == "submitted" and run.metadata["submitted"] is True


def test_function_calling_run_takes_tool_and_args_from_history():
    (run,) = runs_of(FC)
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [c.tool for c in calls] == ["find_file", "open", "edit", "bash", "submit"]
    assert calls[0].args == {"file_name": "missing_colon.py"}
    assert calls[0].id == "call_fJuazlMUN5fQDQ73G6XSpYpx"
    assert calls[4].args == {"command": "submit"}  # no tool_calls in history: text action
    assert run.metadata["model"] == "gpt-4o"
    assert run.metadata["cost"] == pytest.approx(0.01952)


@pytest.mark.parametrize("path", [EPS, FC])
def test_samples_are_detected_by_content_and_through_gzip(path):
    data = path.read_bytes()
    assert detect_format(data[:65536]) == "swe-agent"
    (plain,) = runs_of(data)
    (zipped,) = runs_of(gzip.compress(data), source="x.txt")
    assert zipped.tool_calls == plain.tool_calls


def traj(history, trajectory, info=None) -> bytes:
    return json.dumps(
        {"environment": "main", "trajectory": trajectory, "history": history, "info": info or {}}
    ).encode()


def test_demonstration_messages_are_left_out_and_do_not_shift_matching():
    demo = {
        "role": "assistant",
        "content": "demo",
        "action": "ls",
        "is_demo": True,
        "tool_calls": [{"id": "d1", "function": {"name": "demo_tool", "arguments": "{}"}}],
    }
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "demo task", "is_demo": True},
        demo,
        {"role": "user", "content": "real task"},
        {
            "role": "assistant",
            "content": "t",
            "action": "ls",
            "tool_calls": [
                {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        },
    ]
    step = {
        "action": "ls",
        "observation": "bash: lss: command not found",
        "thought": "t",
        "response": "t",
        "state": "{'open_file': 'n/a'}",
    }
    (run,) = runs_of(traj(history, [step]))
    assert run.steps[0].text == "real task"
    (call,) = [s for s in run.steps if s.kind == "tool_call"]
    assert (call.tool, call.args, call.id, call.status) == (
        "bash",
        {"command": "ls"},
        "c1",
        "error",
    )


@pytest.mark.parametrize(
    ("observation", "status"),
    [
        ("Your proposed edit has introduced new syntax error(s). Please read", "error"),
        ("Traceback (most recent call last):\n  File x", "error"),
        ("Error: File 'x.py' not found", "error"),
        ("File x.py not found", "error"),
        ("[File: /a.py (10 lines total)]\n1:import os", "ok"),
        ("", "ok"),
    ],
)
def test_text_error_rules(observation, status):
    step = {"action": "open x.py", "observation": observation, "thought": ""}
    (run,) = runs_of(traj([], [step]))
    assert run.steps[-1].status == status
    assert run.steps[-1].tool == "open"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"  \n", "empty file"),
        (EPS.read_bytes()[:5000], "invalid JSON"),
        (b'{"environment": "main", "trajectory": {}}', "no `trajectory` array"),
    ],
)
def test_bad_files_fail_with_a_clear_error(data, message):
    with pytest.raises(TraceError, match=message):
        runs_of(data, format="swe-agent")


def test_truncated_head_is_still_claimed():
    verdict = swe_agent.claim(sample_of(EPS.read_bytes()[:3000]))
    assert verdict.score >= 0.6, verdict.reason
    assert detect_format(EPS.read_bytes()[:3000]) == "swe-agent"


@pytest.mark.parametrize(
    "observation",
    [
        "Your output was not formatted correctly. You must always include one discussion and "
        "one command as part of your response.",
        "Your last output did not use any tool calls!\nPlease make sure your output includes "
        "exactly _ONE_ function call!",
        "Your last output included multiple tool calls!\nPlease make sure your output includes "
        "a thought and exactly _ONE_ function call.",
        "Your action could not be parsed properly: Unexpected argument(s): pattern.",
    ],
)
def test_format_errors_are_invalid_steps_not_calls(observation):
    # status "invalid" (detection/step.py): the reply held no valid action and nothing ran,
    # so the step is neither a call of the reply's first word nor a plain error
    step = {"action": "I think we should", "observation": observation, "thought": ""}
    (run,) = runs_of(traj([], [step]))
    (call,) = (s for s in run.steps if s.kind == "tool_call")
    assert (call.tool, call.args, call.status) == (
        "(format error)",
        {"action": "I think we should"},
        "invalid",
    )
    assert call.result == observation


def test_a_step_that_is_not_an_object_is_skipped_and_counted():
    good = {"action": "ls", "observation": "a", "thought": ""}
    (run,) = runs_of(traj([], [good, "oops", good]))
    assert run.tool_calls == 2 and run.skipped == 1
    assert "field 'trajectory[1]'" in run.warnings[0]


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"[1]", "not one JSON object"),
        (b'{"messages": []}', "no top-level `trajectory` array"),
        (b'{"trajectory": [{"a": 1}]}', "`trajectory` items have no `action`"),
        (
            b'{"trajectory_format": "mini-swe-agent-1", "trajectory": [{"action": "ls"}]}',
            "marked as mini-swe-agent",
        ),
    ],
)
def test_claim_says_why_not(head, reason):
    verdict = swe_agent.claim(sample_of(head))
    assert verdict.score == 0 and verdict.reason.startswith(reason)


def test_claim_is_high_for_whole_steps_and_beats_the_chat_reader():
    data = traj([{"role": "user", "content": "t"}], [{"action": "ls", "observation": "a"}])
    verdict = swe_agent.claim(sample_of(data))
    assert verdict.score >= 0.9
    assert detect_format(data) == "swe-agent"
