"""Gemini CLI importers (stream-json and chat recording), on hand-written fixtures.

No real sample ships; both fixtures follow the mapping in runs/importers/gemini.py.
Counted by hand from the files:
- gemini_stream.jsonl: 2 `init` lines -> 2 runs. Session 1: 3 `tool_use` (one answered
  `status: "error"`) -> 3 calls, 1 error. Session 2: 1 `tool_use` never answered + 1
  `tool_result` whose `tool_id` has no `tool_use` -> 2 tool_call steps, 0 errors.
- gemini_chat.json: 2 entries in `toolCalls` (one `status: "error"`) -> 2 calls, 1 error.

Both fixtures are written from the notes §3.6, not real files. The JSONL chat recordings
(§3.27) are tested in test_gemini_chat_jsonl.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, gemini, iter_runs
from runs.importers.detect import sample_of
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
STREAM = DATA / "gemini_stream.jsonl"
CHAT = DATA / "gemini_chat.json"


def runs_of(data: bytes, **kwargs):
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def errors(run) -> int:
    return sum(1 for step in run.steps if step.status == "error")


def test_stream_sessions_are_separate_runs():
    first, second = runs_of(STREAM.read_bytes())
    assert (first.format, second.format) == ("gemini-stream", "gemini-stream")
    assert first.id.endswith("0001") and second.id.endswith("0002")
    assert (first.tool_calls, errors(first)) == (3, 1)
    assert (second.tool_calls, errors(second)) == (2, 0)
    assert first.metadata["model"] == "gemini-2.5-pro"
    assert first.metadata["stats"]["total_tokens"] == 2100


def test_stream_harness_message_deltas_and_results():
    first, second = runs_of(STREAM.read_bytes())
    assert first.steps[0].kind == "system"  # the harness's message has no timestamp
    assert [s.kind for s in first.steps].count("user") == 1
    assert first.steps[2].text == "I'll list the files first."
    failed = next(s for s in first.steps if s.status == "error")
    assert failed.result == "File not found: /repo/READ.md"
    quiet = first.steps[5]
    assert quiet.tool == "read_file" and quiet.result is None and quiet.status == "ok"
    assert second.steps[1].tool == "(unknown)"
    last = second.steps[-1]
    assert last.tool == "run_shell_command" and last.result is None
    assert last.id == "run_shell_command-1757491223000-0c0c0c"


def test_chat_recording():
    (run,) = runs_of(CHAT.read_bytes())
    assert run.format == "gemini-chat" and run.id == "8d2f6c1e-2222-4ccc-8ddd-000000000003"
    assert (run.tool_calls, errors(run)) == (2, 1)
    assert [s.kind for s in run.steps] == [
        "user",
        "reasoning",
        "tool_call",
        "tool_call",
        "assistant",
        "system",
    ]
    make, read = run.steps[2], run.steps[3]
    assert make.args == {"command": "make"} and make.result.startswith("make: ***")
    assert read.status == "error" and read.result == "File not found: /p/Makefil"
    assert make.batch_id == read.batch_id == "m2"
    assert run.steps[1].tokens_in == 1200 and run.metadata["model"] == "gemini-2.5-pro"


@pytest.mark.parametrize(("path", "name"), [(STREAM, "gemini-stream"), (CHAT, "gemini-chat")])
def test_detected_by_content_and_through_gzip(path, name):
    data = path.read_bytes()
    assert detect_format(data[:65536]) == name
    assert runs_of(gzip.compress(data))[0].format == name


def test_stream_without_init_still_wins_over_native_for_harness_lines():
    lines = STREAM.read_bytes().splitlines(keepends=True)
    assert detect_format(b"".join(lines[:1] + lines[2:])) == "gemini-stream"


def test_native_message_lines_are_left_to_native():
    native = json.dumps({"type": "message", "role": "user", "content": "hi"}).encode() + b"\n"
    assert gemini.stream.claim(sample_of(native)).score == 0
    assert detect_format(native) == "native"
    assert gemini.chat.claim(sample_of(b'{"sessionId": "s", "messages": []}')).score == 0


def test_stream_shell_exit_code_and_unregistered_tool():
    lines = [
        {"type": "init", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"},
        {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "t1",
         "parameters": {"command": "make"}, "timestamp": "2026-01-01T00:00:01Z"},
        {"type": "tool_result", "tool_id": "t1", "status": "success",
         "output": "Command: make\nOutput: Stop.\nError: (none)\nExit Code: 2",
         "timestamp": "2026-01-01T00:00:02Z"},
        {"type": "tool_use", "tool_name": "run_tests", "tool_id": "t2", "parameters": {},
         "timestamp": "2026-01-01T00:00:03Z"},
        {"type": "tool_result", "tool_id": "t2", "status": "error",
         "error": {"type": "tool_not_registered", "message": "Tool \"run_tests\" is unknown"},
         "timestamp": "2026-01-01T00:00:04Z"},
    ]  # fmt: skip
    (run,) = runs_of(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    assert [s.status for s in run.steps] == ["error", "invalid"]
    assert run.steps[1].result == 'Tool "run_tests" is unknown'


def test_invalid_line_is_skipped_and_counted():
    lines = STREAM.read_bytes().splitlines(keepends=True)
    data = b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:])
    first, second = runs_of(data)
    assert first.skipped == 1 and first.warnings[0].startswith("x.txt:4:")
    assert second.skipped == 0 and not second.warnings  # each run: the lines skipped in it


@pytest.mark.parametrize(
    ("data", "fmt"),
    [(b"", "gemini-stream"), (b"", "gemini-chat"), (CHAT.read_bytes()[:300], "gemini-chat")],
)
def test_empty_or_truncated_fails(data, fmt):
    with pytest.raises(TraceError):
        runs_of(data, format=fmt)


def test_chat_json_edge_cases():
    data = CHAT.read_bytes()
    with pytest.raises(TraceError, match="UTF"):
        runs_of(data.replace(b'"Why', b'"\xffWhy', 1), format="gemini-chat")
    with pytest.raises(TraceError, match="nested deeper"):
        runs_of(b'{"sessionId": "s", "messages": ' + b"[" * 100_000, format="gemini-chat")
    with pytest.raises(TraceError) as info:
        runs_of(data[: len(data) - 40], format="gemini-chat")
    assert "truncated" in info.value.reason and info.value.line is not None
    with pytest.raises(TraceError, match="no `messages` array"):
        runs_of(b'{\n  "sessionId": "s"\n}', format="gemini-chat")
    (run,) = runs_of(data, format="gemini-chat", limits=Limits(max_value_chars=10))
    assert run.steps[0].text == "Why does t…[truncated 14 chars]"


def test_chat_json_message_without_id_or_object_is_kept_or_counted():
    doc = {"sessionId": "s", "projectHash": "h", "messages": [
        {"type": "user", "content": "hi"}, 7, {"id": "m2", "type": "gemini", "content": "ok"}]}  # fmt: skip
    (run,) = runs_of(json.dumps(doc, indent=2).encode())
    assert [s.id for s in run.steps] == ["#0", "m2"]
    assert run.skipped == 1 and "messages[1]" in run.warnings[0]


def test_chat_json_is_read_incrementally():
    """Peak Python memory while reading an ~8 MB recording stays far below its size: the
    messages are read one at a time and their UI-only copies (resultDisplay) are not kept."""
    import tracemalloc

    big = "x" * 20_000
    call = {"id": "c", "name": "read_file", "args": {"p": "a"}, "status": "success",
            "result": [{"functionResponse": {"response": {"output": "ok"}}}],
            "resultDisplay": {"originalContent": big, "newContent": big}}  # fmt: skip
    message = json.dumps({"id": "m", "type": "gemini", "content": "", "toolCalls": [call]})
    count = 8_000_000 // len(message)
    head = b'{"sessionId": "s", "projectHash": "h", "messages": [\n'
    data = head + b",\n".join([message.encode()] * count) + b"]}"
    tracemalloc.start()
    (run,) = runs_of(data, format="gemini-chat")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(run.steps) == 1  # one id written again and again: its last version
    assert peak < len(data) / 4, peak
