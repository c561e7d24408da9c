"""LangSmith run exports: the batch-ingest sample and an agent trace export from the notes."""

from __future__ import annotations

import json
from pathlib import Path

from runs.importers import detect_format, iter_runs

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = DATA / "traces" / "langsmith" / "langsmith_py_wrap_openai_.json"
AGENT = DATA / "importers" / "langsmith_agent_runs.json"  # written from the notes §3.19


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_the_batch_ingest_sample():
    (run,) = iter_runs(SAMPLE)
    # the shared README: one post + one patch for a single llm run, no tool runs
    assert calls(run) == []
    user, answer = run.steps
    assert user.text == "howdy"
    assert answer.text == "Howdy! How can I assist you today?"  # from the patch's outputs
    assert (answer.tokens_in, answer.tokens_out) == (9, 9)  # usage_metadata
    assert answer.ended_at is not None  # end_time from the patch
    assert run.id == "d0d84d31-923d-4cb5-94a8-40a0a0087578"
    assert run.metadata["model"] == "gpt-4o-mini"


def test_the_agent_trace():
    first, second = iter_runs(AGENT)
    found = calls(first)
    assert [(s.tool, s.status) for s in found] == [
        ("calculator", "ok"),  # ToolMessage status success
        ("weather", "error"),  # raised: `error` set
        ("weather", "error"),  # ToolMessage status error
        ("search", "error"),  # "Exit code: 2" in the text
    ]
    assert found[0].result == "1024" and found[0].args == {"input": "2**10"}
    root_user = first.steps[0]
    assert root_user.kind == "user" and root_user.text.startswith("What is 2**10")
    assert all(s.parent_id == root_user.id for s in first.steps[1:])
    llm = first.steps[1]
    assert (llm.tokens_in, llm.tokens_out, llm.cost) == (100, 20, 0.0012)
    assert first.metadata["thread_id"] == "thread-42"
    # the second trace is linked by dotted_order only, listed child first
    assert second.id == "00000000-0000-4000-8000-000000000020"
    assert [s.kind for s in second.steps] == ["user", "tool_call"]
    assert second.steps[1].parent_id == second.steps[0].id


def test_jsonl_of_runs(tmp_path):
    runs = [
        {"id": "r1", "run_type": "chain", "name": "agent", "trace_id": "r1",
         "start_time": "2025-01-01T00:00:00", "inputs": {"input": "go"}},
        {"id": "t1", "run_type": "tool", "name": "ls", "trace_id": "r1", "parent_run_id": "r1",
         "start_time": "2025-01-01T00:00:01", "inputs": {"path": "."}, "outputs": {"output": "a"}},
    ]  # fmt: skip
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert detect_format(path.read_bytes()) == "langsmith"
    (run,) = iter_runs(path)
    (call,) = calls(run)
    assert call.result == "a" and call.status == "ok"
