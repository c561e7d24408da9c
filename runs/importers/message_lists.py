"""What the first records of a file show of message lists, read once for the three
message-list claims (chat, responses, anthropic), so each one's claim can name the fields
that decide between them; and `base_role`, the role a message speaks in."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_SAMPLE_MESSAGES = 400
SUBAGENT_ROLE = re.compile(r"^(?P<base>[a-z]+)[-_]sub-?agent[-_:](?P<child>.+)$", re.IGNORECASE)
# Keys that only other formats put beside a message list: a holder with one is not ours.
FOREIGN_KEYS = {
    "trajectory_format": "mini-swe-agent",
    "trajectory": "SWE-agent",
    "history": "SWE-agent/OpenHands",
    "projectHash": "Gemini CLI",
    "payload": "Codex rollout",
    "resourceSpans": "OTLP",
    "children": "tree JSON",
}
# Keys of other formats' records, named in a reason when no message list is found (a chat
# export may well carry a session id, so these decide nothing on their own).
HINT_KEYS = {
    **FOREIGN_KEYS,
    "sessionId": "Claude Code/Gemini CLI",
    "parentUuid": "Claude Code",
    "uuid": "Claude Code",
}
FOREIGN_INFO = {"exit_status", "mini_version", "submission", "model_stats"}
MESSAGE_BODY = ("content", "tool_calls", "function_call", "tool_call_id")


@dataclass(slots=True)
class Messages:
    """What a sample shows of message lists, read once for every message-list claim."""

    holders: list[dict] = field(default_factory=list)  # objects holding a message list
    messages: list[dict] = field(default_factory=list)  # objects with a `role`, in order
    records: int = 0  # top-level records looked at
    fitting: int = 0  # of those: a message, a message list, or an object holding one
    foreign: str = ""  # "`key` (format)": a holder carries another format's key
    hint: str = ""  # "`key` (format)": another record does (named when no list is found)

    @property
    def fit(self) -> float:
        """The share of records that are messages or conversations (metadata left out)."""
        return self.fitting / self.records if self.records else 0.0


def base_role(role: Any) -> tuple[str | None, str | None]:
    """Return (base role, sub-agent id) of a role string: `assistant-subagent-7` gives
    ("assistant", "7"), `user` gives ("user", None); a non-string gives (None, None)."""
    if not isinstance(role, str):
        return None, None
    text = role.strip()
    match = SUBAGENT_ROLE.match(text)
    if match:
        return match["base"].lower(), match["child"]
    return text.lower(), None


def _is_message(value: Any) -> bool:
    """An object with a `role` and what a message carries (`content`, `tool_calls`, ...), not
    a wrapper around one (Claude Code and Cursor records hold `{role?, message: {...}}`)."""
    return (
        isinstance(value, dict)
        and "role" in value
        and "message" not in value
        and any(key in value for key in MESSAGE_BODY)
    )


def _foreign(value: dict, keys: dict[str, str] = FOREIGN_KEYS) -> str:
    for key, what in keys.items():
        if key in value:
            return f"`{key}` ({what})"
    info = value.get("info")
    if isinstance(info, dict) and FOREIGN_INFO & set(info):
        return f"`info.{sorted(FOREIGN_INFO & set(info))[0]}` (mini-swe-agent)"
    return ""


def messages_in(sample: Any, keys: tuple[str, ...] = ("messages", "traj")) -> Messages:
    """Collect the messages a `detect.Sample` shows: records that are messages (objects with
    a `role` and a body, see `_is_message`), message arrays, and objects holding a message
    list under one of `keys` (also as the items of a top-level array or a JSONL line's
    array). Other records (metadata lines) only lower the share that fits."""
    found = Messages()

    def take(items: list) -> bool:
        got = [item for item in items if _is_message(item)]
        room = MAX_SAMPLE_MESSAGES - len(found.messages)
        found.messages.extend(got[: max(room, 0)])
        return bool(got)

    def holder(value: dict) -> bool:
        for key in keys:
            if isinstance(value.get(key), list):
                found.foreign = found.foreign or _foreign(value)
                found.holders.append(value)
                return take(value[key]) or not value[key]
        return False

    for record in sample.records:
        found.records += 1
        if isinstance(record, dict):
            if holder(record):
                found.fitting += 1
            elif _is_message(record):
                found.fitting += take([record])
            else:
                found.hint = found.hint or _foreign(record, HINT_KEYS)
        elif isinstance(record, list) and (
            take(record) or any(holder(item) for item in record if isinstance(item, dict))
        ):
            found.fitting += 1
    return found


def _parts(message: dict) -> list[dict]:
    content = message.get("content")
    return [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []


def _named(found: set[str], order: list[str]) -> list[str]:
    return [mark for mark in order if mark in found]


CHAT_PART_TYPES = ("image_url", "input_audio", "file")
CHAT_MARK_ORDER = [
    'role "tool"',
    '"tool_calls"',
    '"tool_call_id"',
    '"function_call"',
    'role "function"',
    'role "system"',
    'role "developer"',
    '"image_url" part',
    '"input_audio" part',
    '"file" part',
    '"reasoning_content"',
    "sub-agent roles",
    '"traj" (tau-bench)',
]


def chat_marks(found: Messages) -> list[str]:
    """The chat-only fields the sample shows, in CHAT_MARK_ORDER: things an Anthropic
    message list never holds (a `tool` role, `tool_calls`, a system role in the list, ...)."""
    marks: set[str] = set()
    for message in found.messages:
        role, child = base_role(message.get("role"))
        if role in ("tool", "function", "system", "developer"):
            marks.add(f'role "{role}"')
        if child is not None:
            marks.add("sub-agent roles")
        for key in ("tool_calls", "tool_call_id", "function_call", "reasoning_content"):
            if key in message and message[key] not in (None, []):
                marks.add(f'"{key}"')
        for part in _parts(message):
            if part.get("type") in CHAT_PART_TYPES:
                marks.add(f'"{part["type"]}" part')
    if any(isinstance(h.get("traj"), list) for h in found.holders):
        marks.add('"traj" (tau-bench)')
    return _named(marks, CHAT_MARK_ORDER)


ANTHROPIC_BLOCKS = (
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
)
ANTHROPIC_MARK_ORDER = [
    *(f'"{block}" block' for block in ANTHROPIC_BLOCKS),
    '"image" block with "source"',
    'top-level "system"',
    '"anthropic_version"',
    '"stop_reason"',
]


def anthropic_marks(found: Messages) -> list[str]:
    """The Anthropic-only things the sample shows, in ANTHROPIC_MARK_ORDER: content blocks
    (`tool_use`, `tool_result`, `thinking`, ...), a `system` beside `messages`, ..."""
    marks: set[str] = set()
    for message in found.messages:
        if "stop_reason" in message:
            marks.add('"stop_reason"')
        for part in _parts(message):
            kind = part.get("type")
            if kind in ANTHROPIC_BLOCKS:
                marks.add(f'"{kind}" block')
            elif kind == "image" and isinstance(part.get("source"), dict):
                marks.add('"image" block with "source"')
    for holder in found.holders:
        if "system" in holder and isinstance(holder.get("messages"), list):
            marks.add('top-level "system"')
        if "anthropic_version" in holder:
            marks.add('"anthropic_version"')
    return _named(marks, ANTHROPIC_MARK_ORDER)


def join(marks: list[str], most: int = 4) -> str:
    """Name the first few marks for a reason ("role "tool", "tool_calls" and 2 more")."""
    shown = ", ".join(marks[:most])
    return shown + (f" and {len(marks) - most} more" if len(marks) > most else "")


def no_list(found: Messages, keys: str) -> str:
    """The reason for a sample without messages, naming another format's key if one shows."""
    reason = f"no message list: no record has {keys} or is a message (`role` and `content`)"
    return reason + (f"; records have {found.hint}" if found.hint else "")
