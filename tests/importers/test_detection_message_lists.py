"""Detection between the message-list formats (chat, anthropic, responses): the ambiguous
pairs, which one wins, and that the reasons name the fields that decided (explain_format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import detect_format, explain_format

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
MINE = ("chat", "anthropic", "responses")


def scores(value: object, *, jsonl: bool = False) -> dict:
    if jsonl:
        data = "".join(json.dumps(line) + "\n" for line in value).encode()  # type: ignore[attr-defined]
    else:
        data = json.dumps(value).encode()
    verdict = explain_format(data)
    return {name: claim for name, claim in verdict.claims} | {"best": verdict.best[0]}


TOOL_USE = {"type": "tool_use", "id": "u1", "name": "bash", "input": {"cmd": "ls"}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "u1", "content": "a b"}


def test_blocks_with_chat_only_fields_go_to_chat():
    """The case that drove the change: a chat export whose contents are Anthropic blocks
    (converted) beside `role: "tool"` and `tool_calls`."""
    found = scores(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "list"}]},
                {"role": "assistant", "content": [TOOL_USE]},
                {"role": "user", "content": [TOOL_RESULT]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]},
            ]
        }
    )
    assert found["best"] == "chat"
    assert found["chat"].score > found["anthropic"].score > 0
    assert 'role "tool"' in found["chat"].reason and '"tool_calls"' in found["chat"].reason
    assert "decide for chat" in found["anthropic"].reason
    assert '"tool_use" block' in found["anthropic"].reason


def test_anthropic_blocks_with_only_user_assistant_roles_and_a_system_go_to_anthropic():
    found = scores(
        {
            "system": "be terse",
            "messages": [
                {"role": "user", "content": "list"},
                {"role": "assistant", "content": [TOOL_USE]},
                {"role": "user", "content": [TOOL_RESULT]},
            ],
        }
    )
    assert found["best"] == "anthropic" and found["anthropic"].score > found["chat"].score
    assert '"tool_use" block' in found["anthropic"].reason
    assert 'top-level "system"' in found["anthropic"].reason
    assert "no chat-only field" in found["chat"].reason


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "system", "content": "policy"}, 'role "system"'),
        ({"role": "developer", "content": "policy"}, 'role "developer"'),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            '"image_url" part',
        ),
        ({"role": "assistant", "content": "x", "reasoning_content": "r"}, '"reasoning_content"'),
        ({"role": "assistant-subagent-7", "content": "x"}, "sub-agent roles"),
        ({"role": "assistant", "content": None, "function_call": {"name": "f"}}, '"function_call"'),
    ],
)
def test_each_chat_only_field_decides_against_anthropic_blocks(message, field):
    found = scores(
        [message, {"role": "assistant", "content": [TOOL_USE]}, {"role": "user", "content": [TOOL_RESULT]}]
    )  # fmt: skip
    assert found["best"] == "chat"
    assert field in found["chat"].reason and field in found["anthropic"].reason


def test_plain_messages_go_to_chat():
    found = scores([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert found["best"] == "chat"
    assert (found["chat"].score, found["anthropic"].score, found["responses"].score) == (
        0.45,
        0.25,
        0.0,
    )


def test_typed_responses_items_go_to_responses():
    found = scores(
        [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
        ]
    )
    assert found["best"] == "responses"
    assert '"function_call" items' in found["responses"].reason
    assert found["chat"].score == 0 and "`type`" in found["chat"].reason


def test_untyped_messages_with_responses_parts_go_to_responses():
    found = scores(
        {
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
                {"role": "assistant", "content": [{"type": "output_text", "text": "y"}]},
            ]
        }
    )
    assert found["best"] == "responses" and found["responses"].score == 0.6
    assert "'input_text'" in found["responses"].reason


def test_responses_parts_beside_chat_only_fields_go_to_chat():
    found = scores(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
            {
                "role": "assistant",
                "content": [{"type": "output_text", "text": "y"}],
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]
    )
    assert found["best"] == "chat" and found["chat"].score > found["responses"].score
    assert (
        "decide for chat" in found["responses"].reason
        and '"tool_calls"' in found["responses"].reason
    )


def test_a_metadata_line_first_does_not_hide_a_chat_jsonl():
    lines = [
        {"export": "v2", "created": 1760000000},  # not a message: left out of the share
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c", "content": "x"},
    ]
    found = scores(lines, jsonl=True)
    assert found["best"] == "chat" and found["chat"].score == 0.8  # 3 of 4 records fit


def test_a_conversation_longer_than_the_head_is_still_detected():
    message = {"role": "tool", "tool_call_id": "c", "content": "z" * 1000}
    data = json.dumps({"messages": [{"role": "user", "content": "hi"}, *[message] * 200]})
    assert len(data) > 65536
    assert detect_format(data.encode()[:65536]) == "chat"


@pytest.mark.parametrize(
    ("path", "best"),
    [("chat_blocks_subagent.json", "chat"), ("chat_subagents_parallel.jsonl", "chat")],
)
def test_the_fixtures_are_detected_by_content(path, best):
    verdict = explain_format((DATA / path).read_bytes()[:65536])
    assert verdict.best[0] == best


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("claude_code_branches.jsonl", "`sessionId`"),
        ("codex_rollout.jsonl", "`payload`"),
        ("gemini_chat.json", "`projectHash`"),
    ],
)
def test_other_formats_get_no_claim_and_a_reason(path, key):
    claims = dict(explain_format((DATA / path).read_bytes()[:65536]).claims)
    assert all(claims[name].score == 0 for name in MINE)
    assert key in claims["chat"].reason


def test_records_that_wrap_a_message_are_not_messages():
    """Cursor/Claude Code records carry `role` beside a nested `message`: not a message list."""
    lines = [
        {"role": "user", "message": {"content": [{"type": "text", "text": "why?"}]}},
        {"role": "assistant", "message": {"content": [TOOL_USE]}},
    ]
    found = scores(lines, jsonl=True)
    assert all(found[name].score == 0 for name in MINE)
    assert "no message list" in found["chat"].reason


def test_a_session_id_beside_the_messages_does_not_make_it_another_format():
    """A chat export may carry `sessionId`/`uuid`: only keys no chat export writes beside
    its list (`trajectory_format`, `projectHash`, `payload`, ...) rule it out."""
    found = scores(
        {
            "sessionId": "s-1",
            "uuid": "u-1",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "c", "content": "x"},
            ],
        }
    )
    assert found["best"] == "chat" and found["chat"].score == 0.8
    mini = scores(
        {"trajectory_format": "mini-swe-agent-1", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert mini["chat"].score == 0 and "`trajectory_format`" in mini["chat"].reason
