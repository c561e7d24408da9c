"""OpenAI Chat Completions importer (`chat`), on tau-bench-shaped data built here."""

from __future__ import annotations

import gzip
import json

import pytest

from runs.importers import detect_format, iter_runs
from runs.importers.errors import TraceError


def call(call_id: str, tool: str, args: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": tool, "arguments": args}}


def tau_run(task_id: int) -> dict:
    return {
        "task_id": task_id,
        "trial": 0,
        "reward": 0.0,
        "info": {
            "task": {"user_id": "u1", "instruction": "change my flight"},
            "source": "user",
            "user_cost": 0.01,
        },
        "traj": [
            {"role": "system", "content": "airline policy"},
            {"role": "user", "content": "hi, change my flight"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    call("c1", "get_user", '{"user_id": "u1"}'),
                    call("c2", "get_reservation", "not json"),
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "get_user", "content": '{"n": 1}'},
            {
                "role": "tool",
                "tool_call_id": "c2",
                "name": "get_reservation",
                "content": "Error: reservation not found",
            },
            {
                "role": "assistant",
                "content": "again",
                "tool_calls": [call("c1", "book", '{"f": 1}')],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "book", "content": "ok"},
            {"role": "user", "content": "thanks ###STOP###"},
        ],
    }


def runs_of(data: bytes, source: str = "trace.json", **kwargs):
    return list(iter_runs(data, source=source, **kwargs))


def test_tau_bench_array_gives_one_run_per_element_with_metadata():
    data = json.dumps([tau_run(3), tau_run(4)], indent=2).encode()
    assert detect_format(data[:65536]) == "chat"
    first, second = runs_of(data)
    assert (first.id, first.name, second.name) == (
        "task-3-trial-0",
        "task 3 trial 0",
        "task 4 trial 0",
    )
    assert first.metadata == {
        "task_id": 3,
        "trial": 0,
        "reward": 0.0,
        "task": "change my flight",
        "ended_by": "user",
        "user_cost": 0.01,
    }
    assert [s.kind for s in first.steps] == [
        "system",
        "user",
        "tool_call",
        "tool_call",
        "assistant",
        "tool_call",
        "user",
    ]


def test_arguments_are_parsed_and_kept_raw_when_not_json():
    (run,) = runs_of(json.dumps([tau_run(1)]).encode())
    calls = [s for s in run.steps if s.is_tool_call]
    assert calls[0].args == {"user_id": "u1"}
    assert calls[1].args == "not json"


def test_calls_of_one_message_share_a_batch_and_error_comes_from_text():
    (run,) = runs_of(json.dumps([tau_run(1)]).encode())
    first, second, third = (s for s in run.steps if s.is_tool_call)
    assert first.batch_id == second.batch_id == "m2" and third.batch_id == "m5"
    # get_reservation's arguments are "not json": the model wrote no valid call, so the call
    # is "invalid" (a failed call) whatever its result says
    assert (first.status, second.status, third.status) == ("ok", "invalid", "ok")
    assert second.result == "Error: reservation not found"


def test_repeated_call_ids_go_to_the_earliest_unanswered_call():
    (run,) = runs_of(json.dumps([tau_run(1)]).encode())
    calls = [s for s in run.steps if s.is_tool_call]
    assert [(c.tool, c.result) for c in calls] == [
        ("get_user", '{"n": 1}'),
        ("get_reservation", "Error: reservation not found"),
        ("book", "ok"),
    ]
    assert len({c.id for c in calls}) == 3  # the repeated id is made unique


def test_result_without_call_becomes_an_unknown_step_and_call_without_result_keeps_none():
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call("a", "ls", "{}")]},
        {"role": "tool", "tool_call_id": "zzz", "content": "stray"},
    ]
    (run,) = runs_of(json.dumps({"messages": messages}).encode())
    ls, stray = run.steps
    assert (ls.tool, ls.result, ls.status) == ("ls", None, "ok")
    assert (stray.tool, stray.result, stray.args) == ("(unknown)", "stray", None)
    assert "matches no earlier call" in run.warnings[0]


def test_result_without_id_falls_back_to_position_in_the_batch():
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("a", "ls", "{}"), call("b", "cat", "{}")],
        },
        {"role": "tool", "content": "one"},
        {"role": "tool", "content": "two"},
    ]
    (run,) = runs_of(json.dumps(messages).encode())
    assert [s.result for s in run.steps] == ["one", "two"]


def test_jsonl_of_conversations_gives_one_run_per_line_and_skips_bad_lines():
    lines = [
        json.dumps({"messages": tau_run(1)["traj"]}),
        "{not json",
        json.dumps(tau_run(2)["traj"]),
    ]
    runs = runs_of("\n".join(lines).encode(), source="convs.jsonl")
    assert [r.id for r in runs] == ["convs.jsonl:1", "convs.jsonl:3"]
    assert sum(r.skipped for r in runs) == 1
    assert any("convs.jsonl:2" in w for r in runs for w in r.warnings)


def test_gzip_input_reads_the_same():
    data = json.dumps([tau_run(1)]).encode()
    assert runs_of(gzip.compress(data))[0].steps == runs_of(data)[0].steps


def test_a_bad_message_is_skipped_and_counted():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "robot", "content": "?"},
        5,
        {"role": "user", "content": {"not": "text"}},
    ]
    (run,) = runs_of(json.dumps({"messages": messages}).encode())
    assert len(run.steps) == 1 and run.skipped == 3


def test_truncated_array_reports_the_line():
    data = json.dumps([tau_run(1), tau_run(2)], indent=1).encode()
    cut = data[: len(data) // 2]
    with pytest.raises(TraceError) as info:
        runs_of(cut)
    assert "truncated" in str(info.value) and info.value.line == cut.count(b"\n") + 1


def test_syntax_error_names_its_line():
    data = b'[\n {"messages": [\n  {"role": "user", "content": "hi"}\n ]},\n {"messages" [] }\n]'
    with pytest.raises(TraceError) as info:
        runs_of(data, format="chat")
    assert info.value.line == 5


def test_anthropic_and_native_files_are_not_claimed():
    anthropic = {
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
            }
        ]
    }
    native = b'{"type": "message", "role": "user", "content": "hi"}\n'
    assert detect_format(json.dumps(anthropic).encode()) == "anthropic"
    assert detect_format(native) == "native"
