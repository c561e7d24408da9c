"""Anthropic Messages API conversations: a message array or `{"messages": [...], "system"?}`.

Accepted shapes: the same as the chat format (a JSON array of messages, an object with
`messages` (plus optional `system`, `model`), an array of such objects = one run each, JSONL of
conversations = one run per line, JSONL of single messages = one run). Claude Code session
JSONL (records with `type`, `sessionId`, `uuid`, `message`) is *not* this format.

Mapping (a linear run: no parent ids):
- top-level `system` (text or text blocks) -> a system step first;
- user `content` text and `text` blocks -> a user step; `tool_result {tool_use_id, content,
  is_error}` blocks -> results, paired with calls as described in kit/conversation.py (earliest
  unanswered call with that id, then position, else a step with tool "(unknown)");
- assistant blocks in order: `thinking` -> reasoning step, consecutive `text` -> one assistant
  step (id = message id or `m<index>`), `tool_use {id, name, input}` (and `server_tool_use`)
  -> a tool_call step with args = input; calls of one message share its batch_id; `usage`
  gives tokens on the message's first step, `model` goes to metadata.
- Errors: a boolean `is_error` on the `tool_result` wins (true -> "error", false -> "ok");
  a result without one is judged by its text with text_errors' common rules (`Exit code 1`,
  "command not found", a traceback, ...), as tools that omit the flag still say so there.

Detection (`claim`): Anthropic-only blocks and fields decide it, but chat-only fields (a
`tool` role, `tool_calls`, a system role in the list) send a converted export to chat.
"""

from __future__ import annotations

from typing import Any

from detection.model import Run

from .content import content_text
from .detect import GOOD_ENOUGH, Claim, Sample, sample_of
from .errors import Skips, TraceError
from .kit import Conversation, conversations_parser, result_error
from .message_lists import anthropic_marks, chat_marks, join, messages_in, no_list
from .reading import Limits

name = "anthropic"
label = "Anthropic Messages API conversation"

CLAUDE_CODE_KEYS = {"sessionId", "uuid", "parentUuid", "message"}


def _message_list(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return value["messages"]
    return None


def _is_message(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("role") in ("user", "assistant")
        and "content" in value
        and not CLAUDE_CODE_KEYS & set(value)
        and "messages" not in value
    )


def claim(sample: Sample) -> Claim:
    """Score a file as Anthropic messages: Anthropic-only blocks, and no chat-only field.

    0.85: content blocks or fields only the Messages API writes (`tool_use`, `tool_result`,
    `thinking`, ... blocks; `system` beside `messages`; `anthropic_version`; `stop_reason`)
    and nothing chat-only; 0.35: such blocks, but also chat-only fields (a `tool` role,
    `tool_calls`, a system role in the list, ...): a converted chat export, which chat takes;
    0.25: plain user/assistant messages (chat takes those); 0 with chat-only fields alone.
    """
    found = messages_in(sample, ("messages",))
    if found.foreign:
        return Claim.no(f"a record has {found.foreign}: another format's file")
    if not found.messages:
        return Claim.no(no_list(found, "`messages`"))
    if not any(m.get("type", "message") == "message" for m in found.messages):
        return Claim.no('every record with a `role` has a `type` other than "message"')
    marks, chat = anthropic_marks(found), chat_marks(found)
    if marks and chat:
        score = 0.35
        reason = (
            f"Anthropic blocks {join(marks, 3)}, but chat-only fields {join(chat, 3)} "
            "decide for chat (a converted export)"
        )
    elif chat:
        return Claim.no(f"chat-only fields {join(chat, 3)} and no Anthropic block")
    elif marks:
        score = 0.85
        reason = f"Anthropic-only blocks and fields: {join(marks)}; roles only user/assistant"
    else:
        score = 0.25
        reason = (
            "plain user/assistant messages: no Anthropic-only block (tool_use, tool_result, "
            "thinking) or top-level system"
        )
    if found.fit < 0.5:
        score *= found.fit * 2
        reason += f"; only {found.fitting} of {found.records} records are messages"
    return Claim(round(score, 3), reason)


def sniff(head: bytes) -> bool:
    """Whether `claim` takes these first bytes on its own (kept for callers of the old API)."""
    return claim(sample_of(head)).score >= GOOD_ENOUGH


def _add_user(conversation: Conversation, message: dict, index: int) -> None:
    content = message.get("content")
    if isinstance(content, str):
        conversation.message("user", content, id=f"m{index}")
        return
    texts = []
    for block in content:
        if not isinstance(block, dict):
            raise TraceError("a content block must be an object", field="content")
        if block.get("type") in ("tool_result", "web_search_tool_result"):
            result = block.get("content")  # optional: no content is no result
            text = None if result is None else content_text(result)
            conversation.result(
                text,
                call_id=block.get("tool_use_id"),
                error=result_error(text, block.get("is_error"), extra=()),
                where=f"message {index}: ",
            )
        else:
            texts.append(content_text([block]))
    if texts:
        conversation.message("user", "\n".join(texts), id=f"m{index}")


def _add_assistant(conversation: Conversation, message: dict, index: int) -> None:
    content = message.get("content")
    message_id = str(message.get("id") or f"m{index}")
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    first = len(conversation.run.steps)
    texts: list[str] = []

    def flush() -> None:
        if texts:
            conversation.message("assistant", "\n".join(texts), id=message_id)
            texts.clear()

    for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
        if not isinstance(block, dict):
            raise TraceError("a content block must be an object", field="content")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking":
            flush()
            conversation.message("reasoning", block.get("thinking") or "")
        elif kind in ("tool_use", "server_tool_use"):
            flush()
            conversation.call(
                block.get("name"), block.get("input"), call_id=block.get("id"), batch_id=message_id
            )
    flush()
    if len(conversation.run.steps) > first:
        step = conversation.run.steps[first]
        step.tokens_in = _int(usage.get("input_tokens"))
        step.tokens_out = _int(usage.get("output_tokens"))
    if isinstance(message.get("model"), str):
        conversation.run.metadata.setdefault("model", message["model"])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def add_message(conversation: Conversation, message: Any, index: int) -> None:
    """Add one Anthropic message to the run (raises TraceError on a bad message)."""
    if not isinstance(message, dict):
        raise TraceError(f"a message must be an object, not {type(message).__name__}")
    content = message.get("content")
    if not isinstance(content, str | list):
        raise TraceError("content must be text or a list of blocks", field="content")
    role = message.get("role")
    if role == "user":
        _add_user(conversation, message, index)
    elif role == "assistant":
        _add_assistant(conversation, message, index)
    elif role == "system":
        conversation.message("system", content_text(content), id=f"m{index}")
    else:
        raise TraceError(f"unknown role {role!r}", field="role")


def _run_from_object(
    obj: Any, *, default_id: str, source: str, limits: Limits, skips: Skips
) -> Run:
    messages = _message_list(obj)
    if messages is None:
        raise TraceError("expected a message array or an object with `messages`", source=source)
    meta: dict[str, Any] = {}
    run_id = default_id
    if isinstance(obj, dict):
        if isinstance(obj.get("model"), str):
            meta["model"] = obj["model"]
        if isinstance(obj.get("id"), str | int) and not isinstance(obj.get("id"), bool):
            run_id = str(obj["id"])
    run = Run(id=run_id, format=name, metadata=meta)
    conversation = Conversation(run, limits=limits, skips=skips, source=source)
    system = obj.get("system") if isinstance(obj, dict) else None
    if system:
        conversation.message("system", content_text(system), id="system")
    conversation.add_each(
        messages, lambda message, index: add_message(conversation, message, index),
        field="messages",
    )  # fmt: skip
    return run


parse = conversations_parser(
    name, is_message=_is_message, add_message=add_message, run_from_object=_run_from_object
)
