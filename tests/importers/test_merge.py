"""One call is one step: the kit's merge (runs/importers/kit/merge.py) of the copies a source
writes of one call, through finish_run and through the importers that end in it."""

from __future__ import annotations

import json
from pathlib import Path

from detection.model import Run, Step
from runs.importers import iter_runs
from runs.importers.kit import finish_run

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def call(id, *, tool="Read", args=None, result=None, status="ok", batch=None, parent=None):
    return Step(seq=0, kind="tool_call", id=id, tool=tool, args=args, result=result,
                status=status, batch_id=batch, parent_id=parent)  # fmt: skip


def finished(*steps: Step, call_ids=None) -> Run:
    return finish_run(Run(id="r", format="test", steps=list(steps)), call_ids=call_ids)  # fmt: skip


def test_a_chat_export_with_every_call_written_twice_imports_one_step_per_call():
    (run,) = iter_runs(DATA / "chat_export_calls_twice.json")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.tool, s.args) for s in calls] == [
        ("toolu_01AbC", "Read", {"file_path": "src/app.py"}),
        ("toolu_02DeF", "Grep", {"pattern": "TODO", "path": "src"}),
        ("toolu_03GhI", "Bash", {"command": "ls notes"}),
        ("toolu_04JkL", "Read", {"file_path": "missing.txt"}),
        ("toolu_05MnO", "Bash", {"command": "pytest -q"}),
    ]
    assert [s.status for s in calls] == ["ok", "ok", "error", "error", "ok"]
    assert calls[0].result.startswith("1\timport sys") and calls[4].result is None
    assert calls[1].batch_id == calls[2].batch_id  # issued together, in one message


def test_the_fixture_really_writes_each_call_twice():
    messages = json.loads((DATA / "chat_export_calls_twice.json").read_text())["messages"]
    blocks = [p["tool_call_id"] for m in messages if m["role"] == "assistant"
              for p in m["content"] if p["type"] == "tool_call"]  # fmt: skip
    entries = [c["id"] for m in messages if m["role"] == "assistant" for c in m["tool_calls"]]
    assert blocks == entries and len(blocks) == 5


def test_a_copy_gives_the_kept_step_what_it_lacks_and_keeps_its_place():
    first = call("c1", args=None, batch="m1")
    copy = call("c1", args={"path": "a"}, result="text", batch="m1")
    child = Step(seq=0, kind="user", id="u", parent_id="c1")
    run = finished(first, Step(seq=0, kind="assistant", text="hm"), copy, child)
    assert [s.kind for s in run.steps] == ["tool_call", "assistant", "user"]
    assert (run.steps[0].args, run.steps[0].result) == ({"path": "a"}, "text")


def test_a_copy_without_a_result_never_overrides_the_one_with_it():
    run = finished(call("c1", result="boom", status="error", batch="m1"), call("c1", batch="m1"))
    assert [(s.result, s.status) for s in run.steps] == [("boom", "error")]


def test_the_result_of_a_later_copy_brings_its_status():
    run = finished(call("c1", batch="m1"), call("c1", result="Exit code 1", status="error"))
    assert [(s.result, s.status) for s in run.steps] == [("Exit code 1", "error")]


def test_two_answered_calls_that_reuse_an_id_stay_two_with_unique_ids():
    run = finished(call("c1", result="a"), call("c1", result="a"))
    assert [s.id for s in run.steps] == ["c1", "c1#2"]


def test_calls_of_different_messages_or_arguments_or_tools_are_not_copies():
    assert len(finished(call("c1", batch="m1"), call("c1", result="x", batch="m2")).steps) == 2
    assert (
        len(finished(call("c1", args={"p": 1}), call("c1", args={"p": 2}, result="x")).steps) == 2
    )
    assert len(finished(call("c1"), call("c1", tool="Bash", result="x")).steps) == 2


def test_two_unanswered_records_are_one_call_only_when_one_message_issued_both():
    assert len(finished(call("c1", batch="m1"), call("c1", batch="m1")).steps) == 1
    assert len(finished(call("c1"), call("c1")).steps) == 2


def test_a_call_id_named_by_the_importer_joins_steps_whose_ids_differ():
    span = call("span-1", args={"q": "x"}, parent="agent")
    event = call("toolu_9", result="found")
    run = finished(span, event, call_ids={id(span): "toolu_9"})
    assert [(s.id, s.args, s.result, s.parent_id) for s in run.steps] == [
        ("span-1", {"q": "x"}, "found", "agent")
    ]


def test_a_tau_bench_id_reused_in_a_later_turn_is_a_second_call():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: no"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: no"},
    ]  # fmt: skip
    (run,) = iter_runs(json.dumps({"messages": messages}).encode(), source="t.json")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.result, s.status) for s in calls] == [
        ("call_1", "Error: no", "error"),
        ("call_1#2", "Error: no", "error"),
    ]


def _codex_rollout(*calls: dict) -> bytes:
    """A Codex rollout of one response holding these items (function calls, outputs)."""
    meta = {"id": "s-1", "timestamp": "2026-02-11T08:00:00.000Z", "cli_version": "0.128.0"}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    lines = [{"type": "session_meta", "payload": meta}, {"type": "response_item", "payload": user}]
    lines += [{"type": "response_item", "payload": item} for item in calls]
    stamp = "2026-02-11T08:00:01.000Z"
    return "".join(json.dumps({"timestamp": stamp, **line}) + "\n" for line in lines).encode()


def test_a_codex_call_written_twice_is_one_step_with_its_result_through_the_kit():
    ls = {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}'}
    answer = {"type": "function_call_output", "call_id": "call_1", "output": "a b"}
    data = _codex_rollout({**ls, "call_id": "call_1"}, {**ls, "call_id": "call_1"}, answer)
    (run,) = iter_runs(data, source="rollout.jsonl")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.tool, s.args, s.result) for s in calls] == [
        ("call_1", "shell", {"command": ["ls"]}, "a b"),
    ]
    # two answered calls that reuse the id stay two, the second with a unique id
    data = _codex_rollout({**ls, "call_id": "call_1"}, answer, {**ls, "call_id": "call_1"}, answer)
    (run,) = iter_runs(data, source="rollout.jsonl")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.result) for s in calls] == [("call_1", "a b"), ("call_1#2", "a b")]


def _claude_code_session(*records: dict) -> bytes:
    lines = [{"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": "s-1",
              "timestamp": "2026-02-11T08:00:00Z", "message": {"role": "user", "content": "go"}}]  # fmt: skip
    parent = "u0"
    for record in records:
        lines.append({"parentUuid": parent, "sessionId": "s-1",
                      "timestamp": "2026-02-11T08:00:01Z", **record})  # fmt: skip
        parent = record["uuid"]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _use(uuid: str, message: str, call_id: str, path: str) -> dict:
    block = {"type": "tool_use", "id": call_id, "name": "Read", "input": {"file_path": path}}
    return {"type": "assistant", "uuid": uuid,
            "message": {"id": message, "role": "assistant", "content": [block]}}  # fmt: skip


def _answer(uuid: str, call_id: str, text: str) -> dict:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"type": "user", "uuid": uuid, "message": {"role": "user", "content": [block]}}


def test_a_claude_code_call_written_twice_is_one_step_with_its_result_through_the_kit():
    """The same tool_use block in two records (new uuids) of one message, one result."""
    data = _claude_code_session(
        _use("a1", "m1", "toolu_1", "/x"), _use("a2", "m1", "toolu_1", "/x"),
        _answer("u1", "toolu_1", "hello"),
    )  # fmt: skip
    (run,) = iter_runs(data, source="session.jsonl")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.args, s.result) for s in calls] == [("toolu_1", {"file_path": "/x"}, "hello")]
    # an id reused by a call of a later message, both answered: two steps, unique ids
    data = _claude_code_session(
        _use("a1", "m1", "toolu_1", "/x"), _answer("u1", "toolu_1", "hello"),
        _use("a2", "m2", "toolu_1", "/y"), _answer("u2", "toolu_1", "other"),
    )  # fmt: skip
    (run,) = iter_runs(data, source="session.jsonl")
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(s.id, s.args, s.result) for s in calls] == [
        ("toolu_1", {"file_path": "/x"}, "hello"),
        ("toolu_1#2", {"file_path": "/y"}, "other"),
    ]
