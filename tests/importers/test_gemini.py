"""Gemini CLI importers (stream-json and chat recording), on hand-written fixtures.

No real sample ships; both fixtures follow the mapping in runs/importers/gemini.py. Counted by hand from the files:
- gemini_stream.jsonl: 2 `init` lines -> 2 runs. Session 1: 3 `tool_use` (one answered
  `status: "error"`) -> 3 calls, 1 error. Session 2: 1 `tool_use` never answered + 1
  `tool_result` whose `tool_id` has no `tool_use` -> 2 tool_call steps, 0 errors.
- gemini_chat.json: 2 entries in `toolCalls` (one `status: "error"`) -> 2 calls, 1 error.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, gemini, iter_runs
from runs.importers.errors import TraceError

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
    assert not gemini.stream.sniff(native)
    assert not gemini.chat.sniff(b'{"sessionId": "s", "messages": []}')


def test_invalid_line_is_skipped_and_counted():
    lines = STREAM.read_bytes().splitlines(keepends=True)
    data = b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:])
    first, _ = runs_of(data)
    assert first.skipped == 1 and first.warnings[0].startswith("x.txt:4:")


@pytest.mark.parametrize(
    ("data", "fmt"),
    [(b"", "gemini-stream"), (b"", "gemini-chat"), (CHAT.read_bytes()[:300], "gemini-chat")],
)
def test_empty_or_truncated_fails(data, fmt):
    with pytest.raises(TraceError):
        runs_of(data, format=fmt)
