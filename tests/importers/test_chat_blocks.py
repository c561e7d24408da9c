"""Chat exports with block arrays and inlined sub-agents (notes §3.26), on fixtures written from
the notes (tests/data/importers/README.md): content parts, converted Anthropic parts, legacy
function calls, text-only errors, and `<role>-subagent-<id>` messages as child branches."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from detection.engine import analyze
from runs.importers import iter_runs
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
BLOCKS = DATA / "chat_blocks_subagent.json"
PARALLEL = DATA / "chat_subagents_parallel.jsonl"


def one_run(data: bytes | Path, **kwargs):
    (run,) = iter_runs(data, source=kwargs.pop("source", "t.json"), **kwargs)
    return run


def call(call_id: str, tool: str, args: dict | str) -> dict:
    text = args if isinstance(args, str) else json.dumps(args)
    return {"id": call_id, "type": "function", "function": {"name": tool, "arguments": text}}


def calls(run) -> list:
    return [s for s in run.steps if s.is_tool_call]


# --- chat_blocks_subagent.json: 19 messages, one of them with the unknown role "critic"


def test_block_arrays_are_read_in_order():
    run = one_run(BLOCKS)
    assert (run.id, run.name, run.format) == ("sess-blocks-1", "fix the build", "chat")
    # 19 messages -> 16 steps: 3 assistant messages hold text + reasoning (2 steps each, one
    # also a call), the tool_result-only user messages add no user step, "critic" is skipped
    assert [s.kind for s in run.steps] == [
        "system",  # [text] part
        "system",  # developer
        "user",
        "reasoning",  # reasoning_content
        "assistant",
        "tool_call",  # bash make
        "tool_call",  # bash which gcc
        "reasoning",  # a converted `thinking` part
        "assistant",
        "tool_call",  # Task, a converted `tool_use` part
        "user",  # user-subagent-a1
        "tool_call",  # assistant-subagent-a1
        "assistant",  # assistant-subagent-a1
        "tool_call",  # legacy function_call
        "tool_call",  # edit, a converted `tool_use` part
        "assistant",  # refusal + output_text parts
    ]
    texts = {s.seq: s.text for s in run.steps if s.text is not None}
    assert texts[2] == "The build fails, fix it.\n[image_url]\nScreenshot attached."
    assert texts[3] == "Run the build first." and texts[7] == "Delegate the test search."
    assert texts[15] == "I cannot push to main.\nThe fix is in calc.py."
    assert (run.steps[3].tokens_in, run.steps[3].tokens_out) == (120, 15)  # the message's usage


def test_converted_anthropic_parts_are_calls_and_results_without_tool_calls():
    run = one_run(BLOCKS)
    task, edit = (s for s in calls(run) if s.id in ("toolu_1", "toolu_2"))
    assert (task.tool, task.args["prompt"], task.result, task.batch_id) == (
        "Task",
        "Find the failing test.",
        "test_add fails.",
        "m7",
    )
    assert (edit.tool, edit.result, edit.status) == ("edit", "Edited calc.py", "ok")


def test_exit_codes_in_result_text_are_errors():
    run = one_run(BLOCKS)
    status = {s.id: s.status for s in calls(run)}
    assert status["call_1"] == "error"  # "Exit code 127" (a tool message of [text] parts)
    assert status["call_2"] == "ok"  # "Exit code: 0"
    assert status["call_s1"] == "error"  # "Exit code: 1", in the sub-agent


def test_legacy_function_call_with_broken_json_arguments_is_invalid():
    run = one_run(BLOCKS)
    (read,) = (s for s in calls(run) if s.tool == "read_file")
    assert read.args == '{"path": "calc.py"'  # kept raw
    assert read.result == "Error: could not parse the arguments"  # the `function` result
    assert read.status == "invalid"


def test_subagent_messages_hang_under_the_task_call():
    run = one_run(BLOCKS)
    children = [s.seq for s in run.steps if s.parent_id == "toolu_1"]
    assert children == [10, 11, 12]  # user-, assistant- (call), assistant-subagent-a1
    assert all(s.parent_id is None for s in run.steps if s.seq not in children)
    assert run.metadata["subagents"] == 1


def test_an_unknown_role_is_skipped_counted_and_named():
    run = one_run(BLOCKS)
    assert run.skipped == 1
    (warning,) = run.warnings
    assert "messages[17]" in warning and "unknown role 'critic'" in warning


# --- chat_subagents_parallel.jsonl: 19 lines, two spawn_agent calls in one batch


def test_parallel_subagents_find_their_own_spawn_call():
    run = one_run(PARALLEL, source="par.jsonl")
    parents = {s.id: s.parent_id for s in calls(run)}
    # bbb comes first but its prompt "audit b.py" is t2's task; aaa has no prompt and takes
    # the one call left of that batch, t1
    assert parents == {
        "c1": None,
        "t1": None,
        "t2": None,
        "b1": "t2",
        "a1": "t1",
        "a2": "t1",
        "c2": None,
    }
    (a2,) = (s for s in calls(run) if s.id == "a2")
    assert a2.result == "a.py:1: TODO"  # a result without an id, by position in aaa's batch
    assert run.metadata["subagents"] == 2
    assert run.skipped == 1 and "unknown role 'reviewer-subagent-x'" in run.warnings[0]
    assert "par.jsonl:18" in run.warnings[0]


def test_child_calls_are_not_counted_as_parent_repeats():
    run = one_run(PARALLEL, source="par.jsonl")
    counts = {entry.seq: entry.count for entry in analyze(run).ledger}
    (c2,) = (s for s in calls(run) if s.id == "c2")
    # the parent's second grep is its 2nd (c1, c2): the three in the children do not count
    assert counts[c2.seq] == 2
    flat = copy.deepcopy(run)
    for step in flat.steps:
        step.parent_id = step.lane = None
    flat_counts = {entry.seq: entry.count for entry in analyze(flat).ledger}
    # read as one line, the same grep would be the 4th (b1 after a turn, a1, a2, c2)
    assert flat_counts[c2.seq] == 4


def test_a_child_without_a_spawn_call_hangs_from_the_first_step():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "ls", {})]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "assistant-subagent-q", "content": None, "tool_calls": [call("q1", "ls", {})]},
        {"role": "tool-subagent-q", "tool_call_id": "q1", "content": "a"},
    ]
    run = one_run(json.dumps({"messages": messages}).encode())
    assert [(s.id, s.parent_id) for s in run.steps] == [("m0", None), ("c1", None), ("q1", "m0")]


def test_a_nested_subagent_hangs_under_its_parents_spawn_call():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("T", "Agent", {"p": 1})]},
        {"role": "assistant-subagent-x", "content": None, "tool_calls": [call("X", "Task", {})]},
        {"role": "assistant-subagent-y", "content": "deep"},
        {"role": "tool-subagent-x", "tool_call_id": "X", "content": "y done"},
        {"role": "tool", "tool_call_id": "T", "content": "x done"},
    ]
    run = one_run(json.dumps({"messages": messages}).encode())
    assert [(s.id, s.parent_id, s.result) for s in run.steps] == [
        ("m0", None, None),
        ("T", None, "x done"),
        ("X", "T", "y done"),
        ("m3", "X", None),
    ]


# --- errors: explicit flags win, text rules otherwise


def test_an_explicit_flag_wins_over_the_text():
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call("a", "sh", {}), call("b", "sh", {"x": 1})]},
        {"role": "tool", "tool_call_id": "a", "is_error": False, "content": "Exit code 1"},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "is_error": True, "content": "fine"}
            ],
        },
    ]  # fmt: skip
    run = one_run(json.dumps(messages).encode())
    assert [s.status for s in run.steps] == ["ok", "error"]


def test_text_rules_common_and_tau_bench():
    results = [
        "bash: foo: command not found",  # common: command not found
        'Traceback (most recent call last):\n  File "x.py"\nValueError',  # common: traceback
        "error:no such user",  # tau-bench's own rule: starts with `Error:`
        "Exit code: 0\nall good",
        "the word error: in a file",  # not at the start, not an error line
    ]
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(str(n), "t", {"n": n}) for n in range(len(results))],
        },
        *({"role": "tool", "tool_call_id": str(n), "content": r} for n, r in enumerate(results)),
    ]
    run = one_run(json.dumps(messages).encode())
    assert [s.status for s in run.steps] == ["error", "error", "error", "ok", "ok"]


# --- other part shapes


def test_reasoning_fields_and_parts():
    messages = [
        {
            "role": "assistant",
            "reasoning": "field text",
            "content": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a summary"}]},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "output_text", "text": "answer"},
            ],
        },
        {"role": "user", "content": {"type": "text", "text": "one bare part"}},
    ]
    run = one_run(json.dumps(messages).encode(), format="chat")  # detection says anthropic
    assert [(s.kind, s.text) for s in run.steps] == [
        ("reasoning", "field text"),
        ("reasoning", "a summary"),
        ("assistant", "answer"),
        ("user", "one bare part"),
    ]


def test_a_bad_part_skips_its_message_only():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "content": [7]},
        {"role": "assistant", "content": "still read"},
    ]
    run = one_run(json.dumps(messages).encode())
    assert [s.text for s in run.steps] == ["ok", "still read"] and run.skipped == 1
    assert "messages[1]" in run.warnings[0]


def test_tool_use_parts_are_clipped_like_tool_calls():
    deep: object = "leaf"
    for _ in range(30):
        deep = {"a": deep}
    part = {"type": "tool_use", "id": "u", "name": "x" * 500, "input": {"v": "y" * 500, "d": deep}}
    data = json.dumps(
        [{"role": "system", "content": "s"}, {"role": "assistant", "content": [part]}]
    )
    run = one_run(data.encode(), limits=Limits(max_value_chars=100, max_depth=20))
    (step,) = calls(run)
    assert step.tool == "x" * 200 and step.args["v"] == "y" * 100 + "…[truncated 400 chars]"
    assert "nested deeper than 20 levels, cut" in repr(step.args["d"])


def test_other_apis_call_and_result_parts_and_object_results():
    messages = [
        {"role": "system", "content": "s"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool-call", "toolCallId": "k1", "toolName": "ls", "args": {"d": "."}},
                {"type": "function_call", "id": "fc_9", "call_id": "k2", "name": "cat",
                 "arguments": '{"f": "a"}'},
            ],
        },
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "k1", "result": {"n": 2}}]},
        {"role": "tool", "tool_call_id": "k2", "content": {"lines": 3}},
    ]  # fmt: skip
    run = one_run(json.dumps(messages).encode())
    assert [(s.id, s.tool, s.args, s.result) for s in calls(run)] == [
        ("k1", "ls", {"d": "."}, {"n": 2}),
        ("k2", "cat", {"f": "a"}, {"lines": 3}),
    ]
