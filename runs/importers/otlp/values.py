"""What the values of a span's or a log event's attributes say, as the dialects write them:
a failure flag, a tool's arguments, a model's text, the parts of GenAI messages.

Both the span reader (`steps.py`) and the placement of log events and details
(`placement.py`) read attributes through these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..content import parse_json_text
from .dialects import Dialect, unwrap
from .frameworks import call_arguments


def first(attrs: dict[str, Any], *keys: str) -> Any:
    """Return the first of these attributes that is set (not None)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def failure(attrs: dict[str, Any], dialect: Dialect, result: Any = None) -> str | None:
    """Return why a span or event says it failed by the dialect's own flag, else None:
    Langfuse level ERROR, Claude Code `success: false` / `error`, a Google ADK result object
    {"error": ...} or {"status": "Failure"}."""
    if dialect.level and str(unwrap(attrs.get(dialect.level)) or "").upper() == "ERROR":
        return str(attrs.get(dialect.status_message) or "level ERROR")
    error = first(attrs, *dialect.error)
    if dialect.success and _is_false(attrs.get(dialect.success)):
        return str(error or "failed")
    if error not in (None, "") and not _is_false(error):
        return str(error)
    if dialect.result_errors:
        parsed = parse_json_text(result)
        if isinstance(parsed, dict):
            if parsed.get("error") not in (None, "", False):
                return str(parsed["error"])
            if str(parsed.get("status", "")).lower() in ("failure", "error", "failed"):
                return str(parsed.get("message") or parsed["status"])
    return None


def arguments(value: Any) -> Any:
    """Return a tool's arguments from what an attribute holds: JSON text parsed; a decorator's
    `{"args": [...], "kwargs": {...}}` (smolagents, Traceloop, AgentOps) unwrapped
    (`frameworks.call_arguments`)."""
    return call_arguments(parse_json_text(value))


_TEXT_KEYS = ("text", "content", "output", "completion", "response", "message", "messages",
              "choices", "parts", "candidates")  # fmt: skip


def text_of(value: Any, depth: int = 0) -> str | None:
    """Return the text in a model output as the dialects write it: text (or JSON text), an
    object with text/content/message/choices/parts, or a list of those."""
    if depth > 6 or value is None:
        return None
    if isinstance(value, str):
        parsed = parse_json_text(unwrap(value))
        if isinstance(parsed, str):
            return parsed if parsed.strip() else None
        return text_of(parsed, depth + 1)
    if isinstance(value, list):
        pieces = [t for item in value[:100] if (t := text_of(item, depth + 1))]
        return "\n".join(pieces) or None
    if isinstance(value, dict):
        if value.get("type") not in (None, "text", "output_text", "message"):
            return None  # a tool_call / function_call part
        for key in _TEXT_KEYS:
            if key in value and (text := text_of(value[key], depth + 1)):
                return text
    return None


def message_parts(messages: Any, kind: str) -> Iterator[dict[str, Any]]:
    """Yield the parts of this type in GenAI messages (`[{role, parts: [...]}]`, JSON text)."""
    messages = parse_json_text(messages)
    for message in messages if isinstance(messages, list) else ():
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and part.get("type") == kind:
                yield part
