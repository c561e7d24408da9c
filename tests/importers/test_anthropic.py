"""Anthropic Messages importer (`anthropic`), on conversations built here from the API shape."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from runs.importers import detect_format, iter_runs

SHARED = Path(__file__).resolve().parents[1] / "data" / "traces" / "claude-code"

CONVERSATION = {
    "model": "claude-sonnet-4-5",
    "system": [{"type": "text", "text": "You are terse."}],
    "messages": [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "id": "msg_1",
            "usage": {"input_tokens": 12, "output_tokens": 7},
            "content": [
                {"type": "thinking", "thinking": "use ls", "signature": "x"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "no such file"}],
                },
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"},
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "stray"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": {"cmd": "pwd"}}
            ],
        },
    ],
}


def parse(data: bytes, source: str = "conv.json"):
    return list(iter_runs(data, source=source))


def test_blocks_map_to_steps_in_order():
    (run,) = parse(json.dumps(CONVERSATION).encode())
    assert run.format == "anthropic" and run.metadata["model"] == "claude-sonnet-4-5"
    assert [s.kind for s in run.steps] == [
        "system",
        "user",
        "reasoning",
        "assistant",
        "tool_call",
        "tool_call",
        "tool_call",
        "tool_call",
    ]
    assert run.steps[2].tokens_in == 12 and run.steps[2].tokens_out == 7


def test_results_pair_by_tool_use_id_and_errors_are_explicit():
    (run,) = parse(json.dumps(CONVERSATION).encode())
    bash, read, stray, last = (s for s in run.steps if s.is_tool_call)
    assert (bash.result, bash.status, bash.batch_id) == ("a b", "ok", "msg_1")
    assert (read.result, read.status, read.batch_id) == ("no such file", "error", "msg_1")
    assert (stray.tool, stray.result) == ("(unknown)", "stray")
    assert (last.tool, last.result) == ("Bash", None)  # a call without a result


def test_array_of_messages_and_gzip():
    data = gzip.compress(json.dumps(CONVERSATION["messages"]).encode())
    (run,) = parse(data)
    assert run.format == "anthropic" and run.tool_calls == 4


def test_plain_text_only_messages_are_left_to_chat():
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert detect_format(json.dumps(plain).encode()) == "chat"


def test_claude_code_sessions_are_not_claimed():
    from runs.importers import anthropic

    for path in SHARED.glob("*/transcript.jsonl"):
        assert not anthropic.sniff(path.read_bytes()[:65536])


def test_is_error_wins_and_results_without_it_are_judged_by_their_text():
    def result(use_id: str, text: str, **flag: bool) -> dict:
        return {"type": "tool_result", "tool_use_id": use_id, "content": text, **flag}

    uses = [
        {"type": "tool_use", "id": f"u{n}", "name": "Bash", "input": {"n": n}} for n in range(4)
    ]
    messages = [
        {"role": "assistant", "content": uses},
        {
            "role": "user",
            "content": [
                result("u0", "Exit code 1\nboom"),  # no flag: the common exit-code rule
                result("u1", "Exit code 1\nboom", is_error=False),  # the flag wins
                result("u2", "all fine", is_error=True),  # the flag wins
                result("u3", "Error: plain text"),  # no flag: the common "error line" rule
            ],
        },
    ]
    (run,) = parse(json.dumps({"system": "s", "messages": messages}).encode())
    assert [s.status for s in run.steps if s.is_tool_call] == ["error", "ok", "error", "error"]
