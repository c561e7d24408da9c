"""What every importer shares: the error type, the limits, and small JSON helpers.

Plain Python: no Django import, so `loopboard scan` and benchmarks use it too.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from itertools import accumulate
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
        raise TraceError(
            f"line is {len(raw)} bytes, over the limit of {limits.max_line_bytes}",
            source=source,
            line=line,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"invalid UTF-8 at byte {exc.start}", source=source, line=line) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", source=source, line=line
        ) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", source=source, line=line) from None
    if not json_depth_ok(value, limits.max_depth):
        raise TraceError(
            f"JSON nested deeper than {limits.max_depth} levels", source=source, line=line
        )
    return value


def parse_time(value: Any) -> float | None:
    """Return epoch seconds from ISO-8601 text, epoch seconds, or epoch ms/ns numbers."""
    from datetime import datetime

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
                moment = moment.replace(tzinfo=UTC)
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


# --- Shared helpers for the JSON-document importers (chat, responses, anthropic, otlp, tree).

ERROR_MARK = "…[nested deeper than {limit} levels, cut]"


def clip_json(value: Any, limits: Limits, depth: int = 1) -> Any:
    """Return value with long strings cut and anything nested deeper than max_depth replaced.

    Both cuts leave a visible marker, so a clipped value is never mistaken for the original.
    Recursion stops at max_depth, so deep input cannot exhaust the stack.
    """
    if isinstance(value, str):
        return clip_strings(value, limits.max_value_chars)
    if isinstance(value, dict | list):
        if depth >= limits.max_depth:
            return ERROR_MARK.format(limit=limits.max_depth)
        if isinstance(value, dict):
            return {k: clip_json(v, limits, depth + 1) for k, v in value.items()}
        return [clip_json(v, limits, depth + 1) for v in value]
    return value


def parse_json_text(text: Any) -> Any:
    """Return the JSON value inside a string (arguments are often JSON in a string), else text."""
    if not isinstance(text, str):
        return text
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return text
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return text


class TooManySteps(TraceError):
    """A run over Limits.max_steps: the whole file fails (a run is stored whole or not at all)."""


class Skips:
    """Invalid records skipped while reading one file: a count and the first 100 messages."""

    def __init__(self) -> None:
        self.count = 0
        self.warnings: list[str] = []
        self.first: TraceError | None = None

    def add(self, error: TraceError) -> None:
        self.count += 1
        self.first = self.first or error
        if len(self.warnings) < 100:
            self.warnings.append(str(error))

    def note(self, message: str) -> None:
        """Record a warning that is not a skipped record (a clipped value, an orphan result)."""
        if len(self.warnings) < 100:
            self.warnings.append(message)

    def apply(self, run: Run) -> Run:
        run.skipped += self.count
        run.warnings.extend(self.warnings)
        return run


WRAPPER_DEPTH = 16  # nesting a format's own wrappers may add on top of Limits.max_depth


def document_depth(limits: Limits) -> int:
    """Return the nesting a whole document (or JSONL record) may reach.

    Values inside (arguments, results) deeper than max_depth are cut with a marker by
    clip_json; a document deeper than this is refused.
    """
    return limits.max_depth + WRAPPER_DEPTH


def iter_jsonl(
    stream: IO[bytes], *, source: str, limits: Limits, skips: Skips
) -> Iterator[tuple[int, Any]]:
    """Yield (line number, value) per valid JSONL line; invalid lines go to skips."""
    from dataclasses import replace

    limits = replace(limits, max_depth=document_depth(limits))
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            yield number, loads_line(raw.rstrip(b"\r\n"), source=source, line=number, limits=limits)
        except TraceError as exc:
            skips.add(exc)


def _first_line(head: bytes) -> tuple[bytes, bytes]:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    first, _, rest = text.partition(b"\n")
    return first.strip(), rest


def looks_like_jsonl(head: bytes) -> bool:
    """Return whether the first line of head is one whole JSON object or array.

    A one-line JSON document counts too: read line by line it gives the same value.
    """
    first, rest = _first_line(head)
    if first[:1] not in (b"{", b"["):
        return False
    if not rest and len(head) >= 64 * 1024:
        return False  # the first line may go on past the head
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return False
    return True


def head_values(head: bytes, max_lines: int = 20) -> list[Any]:
    """Return what the head shows: the first JSONL values, or the partly read JSON document.

    For a single JSON document cut off by the 64 KiB head, the value holds everything up to the
    cut (containers still open at the cut are included as far as they got).
    """
    if looks_like_jsonl(head):
        values = []
        for raw in head.lstrip(b"\xef\xbb\xbf").splitlines():
            if raw.strip():
                try:
                    values.append(json.loads(raw))
                except (ValueError, RecursionError):
                    break  # the last line may be cut off
            if len(values) >= max_lines:
                break
        return values
    value = partial_json(head)
    return [] if value is None else [value]


def partial_json(head: bytes, max_depth: int = 64) -> Any:
    """Return the JSON value at the start of head, as far as it can be read."""
    import ijson

    builder = ijson.ObjectBuilder()
    depth = 0
    try:
        for event, value in ijson.basic_parse(head.lstrip(b"\xef\xbb\xbf")):
            depth += event in ("start_map", "start_array")
            depth -= event in ("end_map", "end_array")
            if depth > max_depth:
                break
            builder.event(event, value)
            if depth == 0:
                break
    except Exception:  # noqa: BLE001 - a cut-off head ends in a syntax error by design
        pass
    return getattr(builder, "value", None)


def first_byte(stream: IO[bytes]) -> bytes:
    """Return the first non-blank byte of a peekable stream without consuming it."""
    head = stream.peek(64 * 1024)[: 64 * 1024]  # type: ignore[attr-defined]
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text[:1]


def stream_head(stream: IO[bytes]) -> bytes:
    """Return up to 64 KiB from the start of a peekable stream without consuming it."""
    return stream.peek(64 * 1024)[: 64 * 1024]  # type: ignore[attr-defined]


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _odd_backslashes_before(data: bytes, end: int, floor: int = 0) -> bool:
    start = end
    while start > floor and data[start - 1] == 0x5C:
        start -= 1
    return (end - start) % 2 == 1


def _last_unescaped_quote(data: bytes, start: int) -> int:
    pos = len(data)
    while True:
        pos = data.rfind(b'"', start, pos)
        if pos < 0 or not _odd_backslashes_before(data, pos):
            return pos


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


class JsonReader:
    """A file-like wrapper for ijson that counts lines and refuses deep nesting early.

    ijson keeps a prefix string per open level, so a file of a million `[` would take
    quadratic memory: the nesting depth is checked here, on the raw bytes (strings skipped),
    before ijson sees them. Lines are counted so a syntax error can name its line.
    """

    def __init__(self, inner: IO[bytes], *, source: str, max_depth: int) -> None:
        self.inner, self.source, self.max_depth = inner, source, max_depth
        self.line = 1  # line number at the start of the last chunk
        self.last = b""
        self.depth = 0
        self.in_string = False
        self.escape = False

    def read(self, size: int = -1) -> bytes:
        self.line += self.last.count(b"\n")
        data = self.inner.read(size)
        self.last = data
        if data:
            self._check_depth(data)
        return data

    def _check_depth(self, data: bytes) -> None:
        pos = 0
        if self.in_string:
            pos = 1 if self.escape else 0
            match = _STRING_REST.match(data, pos)
            if match is None:  # the whole chunk is inside one string
                self.escape = _odd_backslashes_before(data, len(data), pos)
                return
            pos, self.in_string, self.escape = match.end(), False, False
        outside = _STRING.sub(b"", data[pos:] if pos else data)
        quote = outside.find(b'"')
        if quote >= 0:  # a string runs on into the next chunk
            outside = outside[:quote]
            self.in_string = True
            opener = _last_unescaped_quote(data, pos)
            self.escape = _odd_backslashes_before(data, len(data), opener + 1)
        steps = outside.translate(None, _NOT_BRACKETS).translate(_BRACKET_STEPS)
        if not steps:
            return
        deepest = max(accumulate(array("b", steps), initial=self.depth))
        if deepest > self.max_depth:
            raise TraceError(
                f"JSON nested deeper than {self.max_depth} levels",
                source=self.source,
                line=self.line,
            )
        self.depth += sum(array("b", steps))

    def error(self, exc: Exception) -> TraceError:
        """Return a TraceError for an ijson error, naming the line where parsing stopped."""
        message = exc.args[0] if exc.args else str(exc)
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        lines = str(message).split("\n")
        reason = lines[0].replace("parse error: ", "").replace("lexical error: ", "").strip()
        if "premature EOF" in reason or "Incomplete JSON" in reason:
            return TraceError(
                f"truncated JSON: {reason}",
                source=self.source,
                line=self.line + self.last.count(b"\n"),
            )
        return TraceError(
            f"invalid JSON: {reason}", source=self.source, line=self._error_line(lines)
        )

    def _error_line(self, lines: list[str]) -> int:
        # yajl shows up to 30 bytes either side of the error, the error byte at column 40,
        # newlines shown as spaces: find that snippet in the last chunk read.
        if len(lines) < 2 or len(lines[1]) < 40:
            return self.line
        before, after = lines[1][10:40].lstrip(" "), lines[1][40:]
        text = self.last.replace(b"\n", b" ").replace(b"\r", b" ").decode("utf-8", "replace")
        found = text.find(before + after)
        if found < 0:
            return self.line
        offset = len(text[: found + len(before)].encode("utf-8"))
        return self.line + self.last[:offset].count(b"\n")


def iter_json(
    stream: IO[bytes],
    prefix: str,
    *,
    source: str,
    limits: Limits,
    max_depth: int | None = None,
    multiple_values: bool = False,
) -> Iterator[Any]:
    """Yield the values at prefix of a JSON document (ijson), errors naming their line."""
    import ijson

    reader = JsonReader(stream, source=source, max_depth=max_depth or document_depth(limits))
    try:
        yield from ijson.items(reader, prefix, multiple_values=multiple_values, use_float=True)
    except ijson.JSONError as exc:
        raise reader.error(exc) from None
