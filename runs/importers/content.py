"""Values inside records: message text, JSON held in a string, times and numbers.

One function per idea, used by every importer, so a value reads the same whichever format
carries it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from math import isfinite
from typing import Any

from detection.keys import json_in_text

TEXT_KEYS = ("text", "refusal")


def content_text(content: Any) -> str:
    """Return the text of a message content: a string, or a list of parts/blocks joined.

    None gives "". Parts that are strings, or carry a `text` (or `refusal`) string, give
    that text; a part holding `content` (a tool result block) gives the text of that; other
    typed parts (images, files, audio) show as `[type]`, so a result that is only an image
    is not mistaken for an empty one; untyped parts without text are left out.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return str(content)
    texts = (_part_text(part) for part in content)
    return "\n".join(text for text in texts if text is not None)


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    for key in TEXT_KEYS:
        if isinstance(part.get(key), str):
            return part[key]
    if isinstance(part.get("content"), str | list):
        return content_text(part["content"])
    return f"[{part['type']}]" if isinstance(part.get("type"), str) else None


def parse_json_text(value: Any) -> Any:
    """Return the JSON object or array held in a string, else the value unchanged.

    Arguments (and some results) often arrive as JSON text. The rule is
    `detection.keys.json_in_text`, the one the engine applies when it normalises arguments
    and results, so parsing here never changes a call signature: a call reads the same
    whether its format sends the arguments as an object or as JSON text.
    """
    if not isinstance(value, str):
        return value
    parsed = json_in_text(value)
    return value if parsed is None else parsed


def parse_time(value: Any) -> float | None:
    """Return epoch seconds from ISO-8601 text, epoch seconds, or epoch ms/us/ns numbers."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _epoch_seconds(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return _epoch_seconds(float(text))
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _epoch_seconds(number: float) -> float:
    """Scale an epoch number to seconds by its magnitude: ns > 1e17, us > 1e14, ms > 1e11."""
    if number > 1e17:
        return number / 1e9
    if number > 1e14:
        return number / 1e6
    if number > 1e11:
        return number / 1e3
    return number


def number(value: Any) -> int | None:
    """Return an int for a finite JSON number (not bool), else None (1e400 parses as inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
        return None
    return int(value)


def fnumber(value: Any) -> float | None:
    """Return a float for a finite JSON number (not bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
        return None
    return float(value)


def token_sum(usage: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The sum of the token counts a usage object gives under these keys (input tokens that
    a provider splits into fresh, cache-read and cache-written), None when it gives none."""
    parts = [number(usage.get(key)) for key in keys]
    if all(part is None for part in parts):
        return None
    return sum(part or 0 for part in parts)
