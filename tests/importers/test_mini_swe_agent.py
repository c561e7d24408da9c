"""mini-swe-agent `.traj.json` importer, checked against the real sample in tests/data/traces.

Counts taken by hand from matplotlib__matplotlib-23314.traj.json, independently of the
importer: `jq '[.messages[]|select(.role=="assistant")]|length'` -> 21 model calls, each with
exactly one bash block (`jq -r '.messages[]|select(.role=="assistant")|.content' | grep -c
'^```bash'` -> 21) = 21 tool calls; `grep -o '<returncode>[0-9]*</returncode>'` on the user
messages -> 18x 0, 1x 1, 1x 2 = 2 errors (the last reply is the submitted diff, no code).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, iter_runs
from runs.importers.errors import TraceError

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "traces"
    / "mini-swe-agent"
    / "matplotlib__matplotlib-23314.traj.json"
)
FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks, found 2 "
    "actions.\n\nPlease format your action in triple backticks"
)


def runs_of(data: bytes, **kwargs):
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def errors(run) -> int:
    return sum(1 for step in run.steps if step.status == "error")


def traj(messages, fmt="mini-swe-agent-1") -> bytes:
    return json.dumps(
        {
            "info": {
                "exit_status": "Submitted",
                "submission": "",
                "model_stats": {"instance_cost": 0.1, "api_calls": 3},
                "mini_version": "1.15.0",
            },
            "messages": messages,
            "trajectory_format": fmt,
        }
    ).encode()


def test_sample_gives_21_calls_and_2_errors():
    (run,) = runs_of(SAMPLE.read_bytes())
    assert run.format == "mini-swe-agent"
    assert run.id == "matplotlib__matplotlib-23314"
    assert (run.tool_calls, errors(run)) == (21, 2)
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert {c.tool for c in calls} == {"bash"}
    assert calls[0].args == {"command": "ls -F"}
    assert calls[-1].args["command"].startswith("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    assert calls[-1].status == "ok" and calls[-1].result.startswith("diff --git")
    assert run.metadata["model"] == "google/gemini-3-pro-preview"
    assert run.metadata["exit_status"] == "Submitted"


def test_sample_tokens_and_cost_come_from_each_response_usage():
    (run,) = runs_of(SAMPLE.read_bytes())
    assert run.steps[1].tokens_in == 1624 and run.steps[1].tokens_out == 80
    assert sum(step.cost or 0 for step in run.steps) == pytest.approx(0.1156054)


def test_sample_is_detected_by_content_and_through_gzip():
    data = SAMPLE.read_bytes()
    assert detect_format(data[:65536]) == "mini-swe-agent"
    (run,) = runs_of(gzip.compress(data))
    assert run.tool_calls == 21


def test_format_error_is_an_invalid_step_not_silence_and_not_a_call():
    # status "invalid" (detection/step.py: the agent produced no valid action), not "error":
    # nothing ran, so the step is not a failed bash call
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "two\n```bash\nls\n```\n```bash\npwd\n```"},
        {"role": "user", "content": FORMAT_ERROR},
        {"role": "assistant", "content": "none at all"},
        {"role": "user", "content": FORMAT_ERROR.replace("found 2", "found 0")},
        {"role": "assistant", "content": "ok\n```bash\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
    ]
    (run,) = runs_of(traj(messages))
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.tool, c.status) for c in calls] == [
        ("(format error)", "invalid"),
        ("(format error)", "invalid"),
        ("bash", "ok"),
    ]
    assert calls[0].args == {"actions": 2} and calls[1].args == {"actions": 0}
    assert calls[0].batch_id == run.steps[calls[0].seq - 1].batch_id  # the reply it answers
    assert calls[0].result.startswith("Please always provide EXACTLY ONE action")


def test_timeout_is_an_error():
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\nsleep 999\n```"},
        {
            "role": "user",
            "content": "The last command <command>sleep 999</command> timed out "
            "and has been killed.\nThe output of the command was:",
        },
    ]
    (run,) = runs_of(traj(messages))
    assert run.steps[-1].status == "error"


def test_native_tool_calls_of_v1_1():
    messages = [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "look",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": "<returncode>2</returncode>\n<output>no</output>",
        },
        {"role": "tool", "tool_call_id": "zz", "content": "<returncode>0</returncode>"},
    ]
    (run,) = runs_of(traj(messages, "mini-swe-agent-1.1"))
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.tool, c.id, c.args, c.status) for c in calls] == [
        ("bash", "t1", {"command": "ls"}, "error"),
        ("(unknown)", None, {}, "ok"),
    ]


def test_call_without_result_keeps_result_none():
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\nls\n```"},
    ]
    (run,) = runs_of(traj(messages))
    assert run.steps[-1].kind == "tool_call" and run.steps[-1].result is None


@pytest.mark.parametrize(
    ("data", "message"), [(b"", "empty file"), (SAMPLE.read_bytes()[:2000], "invalid JSON")]
)
def test_bad_files_fail_with_a_clear_error(data, message):
    with pytest.raises(TraceError, match=message):
        runs_of(data, format="mini-swe-agent")
