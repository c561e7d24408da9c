"""What every importer shares: the error type, the limits, and small JSON helpers.

Plain Python: no Django import, so `loopboard scan` and benchmarks use it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

from detection.model import Run


class TraceError(ValueError):
    """A trace that cannot be read, with where it broke: file, line, field, reason."""

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.source = source
        self.line = line
        self.field = field

    def __str__(self) -> str:
        where = self.source or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": field {self.field!r}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on untrusted input; each breach gives a clear message."""

    max_bytes: int = 512 * 1024 * 1024  # whole (decompressed) file
    max_depth: int = 64  # JSON nesting
    max_steps: int = 2_000_000  # steps per run
    max_value_chars: int = 1_000_000  # one string value (longer ones are cut, with a marker)
    max_line_bytes: int = 64 * 1024 * 1024  # one JSONL line


DEFAULT_LIMITS = Limits()


class Importer(Protocol):
    """One trace format. Registered in runs/importers/__init__.py."""

    name: str  # short id used by --format, the upload field and the API, e.g. "native"
    label: str  # human name, e.g. "loopboard native JSONL"

    def sniff(self, head: bytes) -> bool:
        """Return True when the first bytes (up to 64 KiB, decompressed) look like this format."""

    def parse(self, stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield the runs in the stream, in the order they appear."""


def json_depth_ok(value: Any, max_depth: int) -> bool:
    """Return whether a parsed JSON value nests no deeper than max_depth."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def clip_strings(value: Any, max_chars: int) -> Any:
    """Return value with every string longer than max_chars cut, marking the cut."""
    if isinstance(value, str):
        if len(value) > max_chars:
            return value[:max_chars] + f"…[truncated {len(value) - max_chars} chars]"
        return value
    if isinstance(value, dict):
        return {k: clip_strings(v, max_chars) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_strings(v, max_chars) for v in value]
    return value


def loads_line(raw: bytes, *, source: str, line: int, limits: Limits) -> Any:
    """Parse one JSONL line, raising TraceError that names the line and the reason."""
    if len(raw) > limits.max_line_bytes:
        raise TraceError(f"line is {len(raw)} bytes, over the limit of {limits.max_line_bytes}",
                         source=source, line=line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"invalid UTF-8 at byte {exc.start}", source=source, line=line) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"invalid JSON: {exc.msg} (column {exc.colno})", source=source,
                         line=line) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", source=source, line=line) from None
    if not json_depth_ok(value, limits.max_depth):
        raise TraceError(f"JSON nested deeper than {limits.max_depth} levels", source=source,
                         line=line)
    return value


def parse_time(value: Any) -> float | None:
    """Return epoch seconds from ISO-8601 text, epoch seconds, or epoch ms/ns numbers."""
    from datetime import datetime, timezone

    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            return moment.timestamp()
    else:
        return None
    # Heuristic on magnitude: ns > 1e17, us > 1e14, ms > 1e11, else seconds.
    if number > 1e17:
        return number / 1e9
    if number > 1e14:
        return number / 1e6
    if number > 1e11:
        return number / 1e3
    return number
