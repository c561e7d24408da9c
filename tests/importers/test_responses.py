"""OpenAI Responses API importer (`responses`), on items built here from the API shape."""

from __future__ import annotations

import gzip
import json

from runs.importers import iter_runs

ITEMS = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look"}]},
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "xx"},
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'},
    {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": '{"cmd": "x"}'},
    {"type": "function_call_output", "call_id": "c2", "output": "Exit code: 127\nnot found"},
    {"type": "function_call_output", "call_id": "c1", "output": "a b"},
    {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin"},
    {
        "type": "custom_tool_call_output",
        "call_id": "c3",
        "output": '{"output": "bad", "metadata": {"exit_code": 1}}',
    },
    {"type": "function_call_output", "call_id": "c9", "output": "Error: stray"},
    {"type": "function_call", "call_id": "c4", "name": "shell", "arguments": "{}"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "content": [{"type": "output_text", "text": "done"}],
    },
]


def parse(data: bytes, source: str = "items.json"):
    return list(iter_runs(data, source=source))


def test_items_map_to_steps():
    (run,) = parse(json.dumps(ITEMS).encode())
    assert run.format == "responses"
    assert [s.kind for s in run.steps] == [
        "user",
        "reasoning",
        "tool_call",
        "tool_call",
        "tool_call",
        "tool_call",
        "tool_call",
        "assistant",
    ]


def test_results_pair_by_call_id_and_errors_come_from_text():
    (run,) = parse(json.dumps(ITEMS).encode())
    c1, c2, c3, stray, c4 = (s for s in run.steps if s.is_tool_call)
    assert (c1.args, c1.result, c1.status) == ({"cmd": "ls"}, "a b", "ok")
    assert (c2.status, c3.status, c3.args) == ("error", "error", "*** Begin")
    assert c1.batch_id == c2.batch_id != c3.batch_id
    assert (stray.tool, stray.status) == ("(unknown)", "error")
    assert c4.result is None


def test_response_object_and_jsonl_and_gzip():
    response = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5",
        "usage": {"input_tokens": 5, "output_tokens": 2},
        "output": ITEMS[1:],
    }
    (run,) = parse(json.dumps(response, indent=2).encode())
    assert (run.id, run.metadata["model"], run.metadata["tokens_in"]) == ("resp_1", "gpt-5", 5)
    jsonl = "\n".join(json.dumps(item) for item in ITEMS).encode()
    (again,) = parse(gzip.compress(jsonl), source="items.jsonl")
    assert again.tool_calls == 5


def test_request_body_with_instructions():
    body = {"model": "gpt-5", "instructions": "be brief", "input": "hello"}
    from runs.importers import responses

    assert not responses.sniff(json.dumps(body).encode())  # no typed item shows the format
    (run,) = list(iter_runs(json.dumps(body).encode(), source="r.json", format="responses"))
    assert [(s.kind, s.text) for s in run.steps] == [("system", "be brief"), ("user", "hello")]


def test_codex_rollout_and_native_are_not_claimed():
    from runs.importers import responses

    codex = {"timestamp": "t", "type": "response_item", "payload": ITEMS[3]}
    native = {"type": "message", "role": "user", "content": "hi"}
    assert not responses.sniff(json.dumps(codex).encode() + b"\n")
    assert not responses.sniff(json.dumps(native).encode() + b"\n")


def test_outputs_are_judged_by_the_common_text_rules_unless_an_exit_code_field_says():
    outputs = [
        "Exit code 127\nsh: rg: not found",  # common exit-code rule, no colon
        "Process exited with code 2",  # common exit-code rule
        '{"output": "Traceback (most recent call last):", "metadata": {"exit_code": 0}}',
        '{"output": "ok", "metadata": {"exit_code": 1}}',
        "all good",
    ]
    items = []
    for n, output in enumerate(outputs):
        items.append({"type": "function_call", "call_id": f"c{n}", "name": "sh", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": output})
    (run,) = parse(json.dumps(items).encode())
    assert [s.status for s in run.steps] == ["error", "error", "ok", "error", "ok"]


def test_arguments_that_are_not_json_make_an_invalid_call():
    items = [
        {"type": "function_call", "call_id": "c", "name": "sh", "arguments": '{"cmd": "ls"'},
        {"type": "function_call_output", "call_id": "c", "output": "ran"},
    ]
    (run,) = parse(json.dumps(items).encode())
    (step,) = run.steps
    assert (step.args, step.status) == ('{"cmd": "ls"', "invalid")
