"""Streaming and limits for the chat, responses, anthropic, otlp and tree importers.

Each limit fails (or clips) with a message that says which limit and where.
"""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.importers import iter_runs
from runs.importers.errors import TraceError
from runs.importers.reading import DepthGuard, Limits


def doc(format: str, args: object = None, tool: str = "f") -> object:
    """Return a one-call document of the format, with these arguments."""
    args = {} if args is None else args
    text = json.dumps(args)
    if format == "chat":
        call = {"id": "c", "type": "function", "function": {"name": tool, "arguments": text}}
        return [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]
    if format == "responses":
        return [
            {"type": "function_call", "call_id": "c", "name": tool, "arguments": text},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
        ]
    if format == "anthropic":
        return {
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c", "name": tool, "input": args}],
                }
            ]
        }
    if format == "tree":
        return {"type": "tool", "name": tool, "args": args, "children": []}
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": text,
    }
    span = {
        "traceId": "1" * 32,
        "spanId": "2" * 16,
        "name": f"execute_tool {tool}",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


DOCS = {name: doc(name) for name in ("chat", "responses", "anthropic", "tree", "otlp")}
FORMATS = sorted(DOCS)


def runs(data: bytes, format: str, **kwargs):
    return list(iter_runs(data, source="t.json", format=format, **kwargs))


@pytest.mark.parametrize("format", FORMATS)
def test_empty_file(format):
    with pytest.raises(TraceError, match="empty"):
        runs(b"", format)


@pytest.mark.parametrize("format", FORMATS)
def test_truncated_json_names_a_line(format):
    data = json.dumps(DOCS[format], indent=1).encode()
    with pytest.raises(TraceError) as info:
        runs(data[: len(data) - 8], format)
    assert info.value.line is not None and "truncated" in info.value.reason


@pytest.mark.parametrize("format", FORMATS)
def test_wrong_types_fail_clearly(format):
    with pytest.raises(TraceError):
        runs(b'"just a string"', format)
    with pytest.raises(TraceError):
        runs(json.dumps([1, 2, 3]).encode(), format)


@pytest.mark.parametrize("format", FORMATS)
def test_invalid_utf8_is_reported(format):
    data = json.dumps(DOCS[format], indent=1).encode().replace(b'f"', b'\xff"', 1)
    with pytest.raises(TraceError, match="UTF"):
        runs(data, format)


@pytest.mark.parametrize("format", FORMATS)
def test_deep_nesting_is_refused_with_the_limit(format):
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(TraceError, match="nested deeper"):
        runs(deep, format)


@pytest.mark.parametrize("format", FORMATS)
def test_huge_strings_are_clipped_with_a_marker(format):
    data = json.dumps(doc(format, {"v": "y" * 5000}, tool="x" * 500)).encode()
    (run,) = runs(data, format, limits=Limits(max_value_chars=100))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.args == {"v": "y" * 100 + "…[truncated 4900 chars]"}
    assert call.tool == "x" * 200  # tool names are capped at 200 characters


@pytest.mark.parametrize("format", FORMATS)
def test_deep_values_are_cut_with_a_marker(format):
    value: object = "leaf"
    for _ in range(30):
        value = {"a": value}
    (run,) = runs(json.dumps(doc(format, value)).encode(), format, limits=Limits(max_depth=20))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert "nested deeper than 20 levels, cut" in repr(call.args)


@pytest.mark.parametrize("format", FORMATS)
def test_steps_per_run_limit(format):
    with pytest.raises(TraceError, match="more than 0 steps|more than 0 spans"):
        runs(json.dumps(DOCS[format]).encode(), format, limits=Limits(max_steps=0))


def test_file_size_limit():
    with pytest.raises(TraceError, match="larger than the limit"):
        runs(json.dumps(DOCS["chat"]).encode() * 10, "chat", limits=Limits(max_bytes=100))


def test_invalid_jsonl_line_is_skipped_and_counted():
    line = json.dumps({"messages": DOCS["chat"]})
    data = f"{line}\n{{broken\n{line}\n".encode()
    found = runs(data, "chat")
    assert len(found) == 2 and sum(r.skipped for r in found) == 1
    assert "t.json:2: invalid JSON" in found[0].warnings[0]


def test_big_json_array_is_read_incrementally():
    """Peak Python memory while reading a 20 MB array stays far below the file size."""
    conversation = {"messages": [*DOCS["chat"], {"role": "user", "content": "z" * 2000}]}
    item = json.dumps(conversation).encode()
    count = 20_000_000 // len(item)
    data = b"[" + b",\n".join([item] * count) + b"]"

    def consume() -> int:
        return sum(len(run.steps) for run in iter_runs(io.BytesIO(data), source="big.json"))

    tracemalloc.start()
    total = consume()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == 3 * count and peak < len(data) / 4


JSON_VALUES = st.recursive(
    st.text(alphabet='ab\\"[]{}\n', max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=20,
)


def nesting(value: object) -> int:
    if isinstance(value, dict | list):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((nesting(item) for item in items), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES, st.integers(1, 9))
def test_depth_guard_counts_brackets_outside_strings_across_chunks(value, chunk):
    """Brackets and escaped quotes inside strings never count, wherever a chunk ends."""
    data = json.dumps(value).encode()

    class Chunks(io.BytesIO):
        def read(self, size: int = -1) -> bytes:
            return super().read(chunk)

    depth = nesting(value)
    reader = DepthGuard(Chunks(data), source="s", max_depth=depth)
    while reader.read(chunk):
        pass
    assert reader.depth == 0 and not reader.in_string
    if depth:
        reader = DepthGuard(Chunks(data), source="s", max_depth=depth - 1)
        with pytest.raises(TraceError, match="nested deeper"):
            while reader.read(chunk):
                pass


def interleaved(runs: int, steps: int) -> bytes:
    lines = [
        json.dumps({"run_id": f"r{i % runs}", "type": "tool_call", "tool": "t", "args": {"i": i}})
        for i in range(runs * steps)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_steps_held_across_open_runs_are_bounded():
    limits = Limits(max_held_steps=100, max_steps=1000)
    data = interleaved(runs=20, steps=6)  # 120 steps, no run near its own limit
    with pytest.raises(TraceError, match="more than 100 steps across runs that are still open"):
        list(iter_runs(data, source="big.jsonl", limits=limits))
    assert (
        len(list(iter_runs(interleaved(runs=20, steps=5), source="ok.jsonl", limits=limits))) == 20
    )


def test_otlp_spans_held_across_traces_are_bounded():
    def span(trace: int, n: int) -> dict:
        return {"traceId": f"{trace + 1:032x}", "spanId": f"{n + 1:016x}", "name": "execute_tool t",
                "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}}]}  # fmt: skip

    spans = [span(t, n) for t in range(20) for n in range(6)]
    data = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    with pytest.raises(TraceError, match="more than 100 steps across runs"):
        list(iter_runs(data, source="spans.json", limits=Limits(max_held_steps=100)))


# --- the formats of issue 14 with real samples: pi, ATIF, Managed Agents, Inspect, LangSmith


def one_call(format: str, args: object = None, tool: str = "f") -> bytes:
    """A one-call file of the format (written from the notes, §3.12–3.19)."""
    args = {} if args is None else args

    def jsonl(*records: object) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in records).encode()

    if format == "pi":
        block = {"type": "toolCall", "id": "t1", "name": tool, "arguments": args}
        return jsonl(
            {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00Z",
             "cwd": "/"},
            {"type": "message", "id": "a1", "parentId": None, "timestamp": "2025-01-01T00:00:01Z",
             "message": {"role": "assistant", "content": [block], "stopReason": "toolUse"}},
        )  # fmt: skip
    if format == "managed-agents":
        return jsonl(
            {"id": "sevt_1", "type": "agent.tool_use", "name": tool, "input": args,
             "processed_at": "2026-01-01T00:00:00Z"},
            {"id": "sevt_2", "type": "agent.tool_result", "tool_use_id": "sevt_1",
             "content": [{"type": "text", "text": "ok"}], "processed_at": "2026-01-01T00:00:01Z"},
        )  # fmt: skip
    if format == "atif":
        call = {"tool_call_id": "c1", "function_name": tool, "arguments": args}
        step = {"step_id": 1, "source": "agent", "message": "", "tool_calls": [call],
                "observation": {"results": [{"source_call_id": "c1", "content": "ok"}]}}  # fmt: skip
        value: object = {"schema_version": "ATIF-v1.4", "session_id": "s",
                         "agent": {"name": "a", "version": "1"}, "steps": [step]}  # fmt: skip
    elif format == "inspect-ai":
        event = {"event": "tool", "id": "c1", "function": tool, "arguments": args,
                 "result": "ok", "timestamp": "2025-01-01T00:00:00+00:00"}  # fmt: skip
        value = {"version": 2, "status": "success", "eval": {"task": "t", "model": "m"},
                 "samples": [{"id": 1, "epoch": 1, "events": [event]}]}  # fmt: skip
    else:  # langsmith
        value = [{"id": "r1", "run_type": "tool", "name": tool, "trace_id": "r1",
                  "start_time": "2025-01-01T00:00:00", "inputs": args,
                  "outputs": {"output": "ok"}}]  # fmt: skip
    return json.dumps(value, indent=1).encode()


NEW_FORMATS = ["pi", "managed-agents", "atif", "inspect-ai", "langsmith"]
NEW_JSONL = {"pi", "managed-agents"}


@pytest.mark.parametrize("format", NEW_FORMATS + ["aider"])
def test_new_formats_refuse_an_empty_file(format):
    with pytest.raises(TraceError, match="empty"):
        runs(b"", format)
    with pytest.raises(TraceError, match="empty"):
        runs(b" \n\n", format)


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_read_their_one_call(format):
    (run,) = runs(one_call(format, {"x": 1}), format)
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.tool == "f" and call.args == {"x": 1}


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_handle_a_truncated_file(format):
    data = one_call(format)
    if format in NEW_JSONL:  # the cut last line is skipped and counted; the rest is read
        (run,) = runs(data[: len(data) - 8], format)
        assert run.skipped == 1 and "invalid JSON" in run.warnings[0]
        return
    with pytest.raises(TraceError) as info:
        runs(data[: len(data) - 8], format)
    assert info.value.line is not None and "truncated" in info.value.reason


def refused_or_skipped(data: bytes, format: str, match: str) -> None:
    """A whole document fails with the reason; a JSONL line is skipped and counted."""
    try:
        found = runs(data, format)
    except TraceError as exc:
        assert match in str(exc)
        return
    assert format in NEW_JSONL, "only a JSONL format may skip the bad part"
    assert sum(run.skipped for run in found) == 1 and match in found[0].warnings[0]


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_report_invalid_utf8(format):
    data = one_call(format).replace(b'"f"', b'"\xff"', 1)
    refused_or_skipped(data, format, "UTF")


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_refuse_deep_nesting(format):
    deep = one_call(format).replace(b"{}", b"[" * 100_000 + b"]" * 100_000, 1)
    refused_or_skipped(deep, format, "nested")


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_clip_huge_strings_and_deep_values(format):
    data = one_call(format, {"v": "y" * 5000}, tool="x" * 500)
    (run,) = runs(data, format, limits=Limits(max_value_chars=100))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.args == {"v": "y" * 100 + "…[truncated 4900 chars]"}
    assert call.tool == "x" * 200
    value: object = "leaf"
    for _ in range(30):
        value = {"a": value}
    (run,) = runs(one_call(format, value), format, limits=Limits(max_depth=20))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert "nested deeper than 20 levels, cut" in repr(call.args)


@pytest.mark.parametrize("format", NEW_FORMATS)
def test_new_formats_keep_the_step_limit(format):
    with pytest.raises(TraceError, match="more than 0 steps"):
        runs(one_call(format), format, limits=Limits(max_steps=0))


def test_aider_clips_a_huge_edit_block():
    reply = "a.py\n```\n<<<<<<< SEARCH\n" + "y" * 5000 + "\n=======\nz\n>>>>>>> REPLACE\n```\n"
    data = f"# aider chat started at 2025-01-01 00:00:00\n\n#### go\n\n{reply}".encode()
    (run,) = runs(data, "aider", limits=Limits(max_value_chars=100))
    (call,) = (s for s in run.steps if s.is_tool_call)
    assert call.args["search"] == "y" * 100 + "…[truncated 4900 chars]"
