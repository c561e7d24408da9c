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

from runs.importers import detect_format, iter_runs, mini_swe_agent
from runs.importers.detect import sample_of
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


# --- mini-swe-agent 1.1 (mini-swe-agent 2.x), fixtures written from the notes §3.2

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "importers"
TOOLCALLS = FIXTURES / "mini_swe_agent_1_1_toolcalls.traj.json"
TEXTBASED = FIXTURES / "mini_swe_agent_1_1_textbased.traj.json"


def calls_of(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_v1_1_native_tool_calls_fixture():
    # hand count from the file: 4 assistant turns with 1, 2, 1, 1 `extra.actions` = 5 bash
    # calls; 1 user message with `extra.interrupt_type: "FormatError"` = 1 invalid step;
    # returncodes 0, 0, 1, -1 (+ exception_info) -> 2 errors; the last call is answered by
    # the `exit` message (the submission), status ok
    (run,) = runs_of(TOOLCALLS.read_bytes())
    calls = calls_of(run)
    assert (run.id, len(calls), errors(run)) == ("demo__calc-1", 6, 2)
    assert [(c.tool, c.id, c.status) for c in calls] == [
        ("bash", "toolu_01", "ok"),
        ("(format error)", None, "invalid"),
        ("bash", "toolu_02", "ok"),
        ("bash", "toolu_03", "error"),
        ("bash", "toolu_04", "error"),
        ("bash", "toolu_05", "ok"),
    ]
    assert calls[1].args == {"actions": 0}  # "No tool calls found in the response"
    assert calls[2].batch_id == calls[3].batch_id  # two calls of one reply
    assert calls[-1].result.startswith("diff --git")
    assert run.metadata["trajectory_format"] == "mini-swe-agent-1.1"
    assert run.metadata["exit_status"] == "Submitted" and run.metadata["mini_version"] == "2.1.0"
    assert run.steps[1].tokens_in == 1001 and run.steps[1].cost == pytest.approx(0.002)


def test_v1_1_text_actions_fixture():
    # hand count: 4 assistant turns with one `extra.actions` command each = 4 bash calls;
    # the FormatError message has `n_actions: 2` = 1 invalid step; returncodes 0, 0, 2 and
    # the submit answered by `exit` -> 1 error
    (run,) = runs_of(TEXTBASED.read_bytes())
    calls = calls_of(run)
    assert [(c.tool, c.args, c.status) for c in calls] == [
        ("bash", {"command": "ls"}, "ok"),
        ("(format error)", {"actions": 2}, "invalid"),
        ("bash", {"command": "cat calc.py"}, "ok"),
        ("bash", {"command": "python run.py"}, "error"),
        ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}, "ok"),
    ]
    assert run.steps[1].text == "THOUGHT: look around."  # the action block is not thought


@pytest.mark.parametrize("path", [TOOLCALLS, TEXTBASED])
def test_v1_1_is_detected_even_when_the_marker_is_past_the_head(path):
    # 2.x writes `trajectory_format` last: a big file's first 64 KiB never shows it
    doc = json.loads(path.read_bytes())
    doc["messages"] += [{"role": "user", "content": "x" * 1000} for _ in range(100)]
    head = json.dumps(doc, indent=2).encode()[:65536]
    assert b"trajectory_format" not in head
    assert detect_format(head) == "mini-swe-agent"
    del doc["info"]["mini_version"]
    head = json.dumps(doc, indent=2).encode()[:65536]
    verdict = mini_swe_agent.claim(sample_of(head))
    assert verdict.score >= 0.75 and "extra" in verdict.reason
    assert detect_format(head) == "mini-swe-agent"


def test_claim_reasons():
    assert (
        mini_swe_agent.claim(sample_of(b'{"messages": [{"role": "user", "content": "x"}]}')).score
        == 0
    )
    assert mini_swe_agent.claim(sample_of(b"[1, 2]")).reason == "not one JSON object"
    swe = b'{"environment": "main", "trajectory": [{"action": "ls", "observation": ""}]}'
    assert mini_swe_agent.claim(sample_of(swe)).score == 0


def test_v1_1_responses_api_replies():
    # the litellm_response_toolcall model keeps Responses-API objects in `messages`
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "object": "response",
            "output": [
                {"type": "message", "content": [{"type": "output_text", "text": "look"}]},
                {"type": "function_call", "call_id": "fc1", "name": "bash",
                 "arguments": '{"command": "ls"}'},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 2},
            "extra": {"actions": [{"command": "ls", "tool_call_id": "fc1"}]},
        },
        {"type": "function_call_output", "call_id": "fc1", "output": "<returncode>1</returncode>",
         "extra": {"returncode": 1}},
    ]  # fmt: skip
    (run,) = runs_of(traj(messages, "mini-swe-agent-1.1"))
    assert [(s.kind, s.text, s.tool, s.status) for s in run.steps] == [
        ("user", "task", None, "ok"),
        ("assistant", "look", None, "ok"),
        ("tool_call", None, "bash", "error"),
    ]


def test_explicit_returncode_wins_over_the_text():
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "x", "extra": {"actions": [{"command": "a"}]}},
        {"role": "user", "content": "Traceback (most recent call last):", "extra": {"returncode": 0}},
        {"role": "assistant", "content": "x", "extra": {"actions": [{"command": "b"}]}},
        {"role": "user", "content": "fine", "extra": {"returncode": 3}},
        {"role": "assistant", "content": "x", "extra": {"actions": [{"command": "c"}]}},
        {"role": "user", "content": "Observation: bash: foo: command not found"},
    ]  # fmt: skip
    (run,) = runs_of(traj(messages, "mini-swe-agent-1.1"))
    assert [c.status for c in calls_of(run)] == ["ok", "error", "error"]


def test_a_bad_message_is_skipped_and_counted():
    messages = [{"role": "user", "content": "task"}, 42, {"role": "wizard", "content": "?"}]
    (run,) = runs_of(traj(messages))
    assert run.skipped == 2 and "messages[1]" in run.warnings[0]
