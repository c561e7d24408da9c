"""Reading untrusted trace bytes: the limits, the JSONL reader, the document reader, sniffing.

Every importer reads through this module, so one rule holds for all of them:

- a file, a line and a string value each have a size limit (`Limits`);
- a JSONL line or a whole document may nest `document_depth(limits)` levels (max_depth plus
  what a format's own wrappers add); deeper input is refused with the limit in the message;
- values inside (arguments, results) deeper than max_depth are cut with a marker by
  `clip_json`, strings longer than max_value_chars by `clip_strings`;
- a bad JSONL line is skipped and counted (`Skips`), a bad document fails with its line;
- text is UTF-8: a UTF-8 byte-order mark is dropped and UTF-16 with a byte-order mark is
  turned into UTF-8 as it is read (`as_utf8`); another encoding fails with what it is.

Plain Python: no Django import, so `loopboard scan` and the benchmarks use it too.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import IO, Any

from .errors import Skips, TraceError

HEAD_BYTES = 64 * 1024  # what sniffers see of a file
# ijson's read sizes. yajl scans a token that spans reads again on each read, so a long
# string costs (its length / read size) scans of itself; a bigger read holds more at once.
READ_BYTES = 256 * 1024  # reading a document
PARSE_BYTES = 1024 * 1024  # detection's outline of one (builds little)
WRAPPER_DEPTH = 16  # nesting a format's own wrappers may add on top of Limits.max_depth
DEEP_MARK = "…[nested deeper than {limit} levels, cut]"
BOM = b"\xef\xbb\xbf"
UTF16_BOMS = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}
UTF32_BOMS = (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on untrusted input; each breach gives a clear message."""

    # whole (decompressed) file: the formats stream, so a 1 GB file is read in bounded memory
    # (the server passes 20x LOOPBOARD_MAX_UPLOAD_BYTES, see services.ingest.import_limits)
    max_bytes: int = 2 * 1024 * 1024 * 1024
    max_depth: int = 64  # JSON nesting of a value
    max_steps: int = 2_000_000  # steps per run
    # Steps held at once across the runs of a file that are not finished yet (formats that
    # interleave runs keep them all until the end): bounds an importer's memory, ~0.5 KB each.
    max_held_steps: int = 1_000_000
    max_value_chars: int = 1_000_000  # one string value (longer ones are cut, with a marker)
    max_line_bytes: int = 64 * 1024 * 1024  # one JSONL line


DEFAULT_LIMITS = Limits()


def document_depth(limits: Limits) -> int:
    """Return the nesting a whole document (or JSONL record) may reach."""
    return limits.max_depth + WRAPPER_DEPTH


# --- depth and clipping


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


def clip_json(value: Any, limits: Limits, depth: int = 1) -> Any:
    """Return value with long strings cut and anything nested deeper than max_depth replaced.

    Both cuts leave a visible marker, so a clipped value is never mistaken for the original.
    Recursion stops at max_depth, so deep input cannot exhaust the stack.
    """
    if isinstance(value, str):
        return clip_strings(value, limits.max_value_chars)
    if isinstance(value, dict | list):
        if depth >= limits.max_depth:
            return DEEP_MARK.format(limit=limits.max_depth)
        if isinstance(value, dict):
            return {k: clip_json(v, limits, depth + 1) for k, v in value.items()}
        return [clip_json(v, limits, depth + 1) for v in value]
    return value


# --- JSONL


class JsonlReader:
    """The JSON values of a JSONL stream, one per non-blank line, with their line numbers.

    A line over max_line_bytes, not UTF-8, not JSON, nested deeper than max_depth (default
    `document_depth`) or, with objects_only, not an object is skipped and counted in `skips`;
    so is a record the importer rejects after reading it (`reject`). `check_not_empty` fails
    a file without one usable record, with the first error.
    """

    def __init__(
        self,
        stream: IO[bytes],
        *,
        source: str,
        limits: Limits,
        skips: Skips | None = None,
        objects_only: bool = False,
        max_depth: int | None = None,
    ) -> None:
        self.stream, self.source, self.limits = stream, source, limits
        self.skips = Skips() if skips is None else skips
        self.objects_only = objects_only
        self.max_depth = document_depth(limits) if max_depth is None else max_depth
        self.valid = 0  # records read and not rejected

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        for number, raw in enumerate(self.stream, start=1):
            if not raw.strip():
                continue
            try:
                values = self._load(raw.rstrip(b"\r\n"), number)
            except TraceError as exc:
                self.skips.add(exc)
                continue
            for value in values:
                self.valid += 1
                yield number, value

    def reject(self, error: TraceError) -> None:
        """Skip the record just read: count and report it, and count it as not usable."""
        self.valid -= 1
        self.skips.add(error)

    def check_not_empty(self) -> None:
        """Fail when the file held no usable record at all."""
        if self.valid <= 0:
            raise self.skips.first or TraceError("empty file: no records", source=self.source)

    def _load(self, raw: bytes, line: int) -> list[Any]:
        def error(reason: str) -> TraceError:
            return TraceError(reason, source=self.source, line=line)

        if len(raw) > self.limits.max_line_bytes:
            limit = self.limits.max_line_bytes
            raise error(f"line is {len(raw)} bytes, over the limit of {limit}")
        try:
            text = raw.decode("utf-8")
            values = [json.loads(text)]
        except UnicodeDecodeError as exc:
            raise error(f"invalid UTF-8 at byte {exc.start}") from None
        except json.JSONDecodeError as exc:
            values = self._several(text, exc, error)
        except RecursionError:
            raise error("JSON nested too deeply") from None
        for value in values:
            if not json_depth_ok(value, self.max_depth):
                raise error(f"JSON nested deeper than {self.max_depth} levels")
            if self.objects_only and not isinstance(value, dict):
                raise error(f"expected a JSON object, got {type(value).__name__}")
        return values

    def _several(self, text: str, exc: json.JSONDecodeError, error: Any) -> list[Any]:
        """Read a line that holds several JSON values one after another (a writer that lost a
        newline): every value is kept, with a warning. Anything else is invalid JSON."""
        if exc.msg != "Extra data":
            raise error(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        decoder, values = json.JSONDecoder(), []
        pos = len(text) - len(text.lstrip())
        try:
            while pos < len(text):
                value, pos = decoder.raw_decode(text, pos)
                values.append(value)
                while pos < len(text) and text[pos] in " \t\r":
                    pos += 1
        except json.JSONDecodeError as bad:
            raise error(f"invalid JSON: {bad.msg} (column {bad.colno})") from None
        self.skips.note(
            str(error(f"{len(values)} JSON values on one line (a missing newline?); read each"))
        )
        return values


# --- whole JSON documents

# possessive: a string still open at the chunk's end fails in one pass, without backtracking
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


def _odd_backslashes_before(data: bytes, end: int, floor: int = 0) -> bool:
    start = end
    while start > floor and data[start - 1] == 0x5C:
        start -= 1
    return (end - start) % 2 == 1


def _string_end(data: bytes, pos: int) -> int:
    """Return where the string that runs on at pos ends (after its closing quote), or -1
    when it goes on past the chunk (found with bytes.find: a long string costs no regex)."""
    while True:
        quote = data.find(b'"', pos)
        if quote < 0:
            return -1
        if not _odd_backslashes_before(data, quote, pos):
            return quote + 1
        pos = quote + 1


def _last_unescaped_quote(data: bytes, start: int) -> int:
    pos = len(data)
    while True:
        pos = data.rfind(b'"', start, pos)
        if pos < 0 or not _odd_backslashes_before(data, pos):
            return pos


class DepthGuard:
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
        self.blank = True  # nothing but white space read so far

    def read(self, size: int = -1) -> bytes:
        self.line += self.last.count(b"\n")
        data = self.inner.read(size)
        self.last = data
        if data:
            self.blank = self.blank and not data.strip()
            self._check_depth(data)
        return data

    def _check_depth(self, data: bytes) -> None:
        pos = 0
        if self.in_string:
            pos = 1 if self.escape else 0
            end = _string_end(data, pos)
            if end < 0:  # the whole chunk is inside one string
                self.escape = _odd_backslashes_before(data, len(data), pos)
                return
            pos, self.in_string, self.escape = end, False, False
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
        if self.blank:
            return TraceError("empty file", source=self.source)
        message = exc.args[0] if exc.args else str(exc)
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        lines = str(message).split("\n")
        reason = lines[0].replace("parse error: ", "").replace("lexical error: ", "").strip()
        if "premature EOF" in reason or "Incomplete JSON" in reason:
            return TraceError(
                f"invalid JSON: {reason} (truncated file?)",
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


def iter_document(
    stream: IO[bytes],
    prefix: str,
    *,
    source: str,
    limits: Limits,
    max_depth: int | None = None,
    multiple_values: bool = False,
) -> Iterator[Any]:
    """Yield the values at prefix ("" for the whole document, "item" for the items of a
    top-level array) of a JSON document, read incrementally (ijson); errors name their line.

    The document may nest max_depth levels (default `document_depth`). An empty file, a
    truncated one and invalid JSON each fail with a TraceError that says so.
    """
    import ijson

    depth = document_depth(limits) if max_depth is None else max_depth
    reader = DepthGuard(stream, source=source, max_depth=depth)
    try:
        yield from ijson.items(
            reader, prefix, multiple_values=multiple_values, use_float=True, buf_size=READ_BYTES
        )
    except ijson.JSONError as exc:
        raise reader.error(exc) from None


def read_document(
    stream: IO[bytes], *, source: str, limits: Limits, max_depth: int | None = None
) -> Any:
    """Return the one JSON value of a whole-file format (see iter_document for the errors)."""
    for value in iter_document(stream, "", source=source, limits=limits, max_depth=max_depth):
        return value
    raise TraceError("empty file", source=source)


_OPEN = frozenset(("start_map", "start_array"))
_CLOSE = frozenset(("end_map", "end_array"))


def iter_members(
    stream: IO[bytes],
    *,
    source: str,
    limits: Limits,
    arrays: dict[str, Any] | None = None,
    keep: Any = None,
    max_depth: int | None = None,
) -> Iterator[tuple[str, int | None, Any]]:
    """Yield the members of a top-level JSON object in file order, streaming the big arrays.

    For a key in `arrays` whose value is an array, each item is yielded on its own as
    (key, index, item), so the array is never held whole; `arrays[key]` names the item keys
    to build (others are skipped unparsed), or is None for whole items. Every other member
    is yielded as (key, None, value) when `keep` is None or holds the key, else skipped.
    Members after a big array (an `info` after the `trajectory`) are read all the same.
    The errors are iter_document's; a document that is not an object fails with its type.
    """
    import ijson

    depth = document_depth(limits) if max_depth is None else max_depth
    reader = DepthGuard(stream, source=source, max_depth=depth)
    events = ijson.basic_parse(reader, use_float=True, buf_size=READ_BYTES)
    arrays = arrays or {}
    try:
        event, _ = next(events, (None, None))
        if event is None:
            raise TraceError("empty file", source=source)
        if event != "start_map":
            kind = "an array" if event == "start_array" else "a single value"
            raise TraceError(f"expected a JSON object, found {kind}", source=source, line=1)
        for event, key in events:
            if event == "end_map":
                break
            event, value = next(events)
            if key in arrays and event == "start_array":
                fields = arrays[key]
                # one pull per item (its first event): _build reads the rest of it
                for index, (event, value) in enumerate(events):
                    if event == "end_array":
                        break
                    yield key, index, build_value(event, value, events, fields)
            elif keep is None or key in keep:
                yield key, None, build_value(event, value, events, None)
            else:
                skip_value(event, events)
        for _ in events:  # trailing content after the object is an error
            pass
    except ijson.JSONError as exc:
        raise reader.error(exc) from None


def build_value(event: str, value: Any, events: Iterator[tuple[str, Any]], fields: Any) -> Any:
    """Build the JSON value that starts with this event; of an object, only `fields`."""
    import ijson

    if event not in _OPEN:
        return value
    if fields is not None and event == "start_map":
        built: dict[str, Any] = {}
        for event, key in events:
            if event == "end_map":
                return built
            event, value = next(events)
            if key in fields:
                built[key] = build_value(event, value, events, None)
            else:
                skip_value(event, events)
        return built
    builder = ijson.ObjectBuilder()
    builder.event(event, value)
    level = 1
    for event, value in events:
        builder.event(event, value)
        if event in _OPEN:
            level += 1
        elif event in _CLOSE:
            level -= 1
            if level == 0:
                break
    return builder.value


def skip_value(event: str, events: Iterator[tuple[str, Any]]) -> None:
    """Read past the JSON value that starts with this event without building it."""
    if event not in _OPEN:
        return
    level = 1
    for event, _ in events:
        if event in _OPEN:
            level += 1
        elif event in _CLOSE:
            level -= 1
            if level == 0:
                return


# --- text encodings


class ChunkReader(io.RawIOBase):
    """A raw stream over an iterator of byte chunks (wrap it in io.BufferedReader)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.pending = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        """Fill the buffer as far as the chunks go (so a peek sees a whole head)."""
        filled = 0
        while filled < len(buffer):
            if not self.pending:
                chunk = next(self.chunks, None)
                if chunk is None:
                    break
                self.pending = chunk
            size = min(len(buffer) - filled, len(self.pending))
            buffer[filled : filled + size] = self.pending[:size]
            self.pending = self.pending[size:]
            filled += size
        return filled


def utf16_as_utf8(stream: IO[bytes], encoding: str, *, source: str) -> Iterator[bytes]:
    """The text of a UTF-16 stream (its byte-order mark already read) as UTF-8, 64 KiB of
    input at a time. Bytes that are not UTF-16 (a lone surrogate, an odd byte at the end) fail
    with a TraceError that names the encoding and the byte offset."""
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    offset = 2  # bytes of the file decoded so far (after the byte-order mark)
    while True:
        data = stream.read(HEAD_BYTES)
        try:
            text = decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise TraceError(
                f"invalid {encoding.upper()} text at byte {offset + exc.start} ({exc.reason})",
                source=source,
            ) from None
        offset += len(data)
        if text:
            yield text.encode("utf-8")
        if not data:
            return


def as_utf8(stream: IO[bytes], *, source: str) -> IO[bytes]:
    """Return a peekable stream of the file's text as UTF-8 without a byte-order mark.

    A UTF-8 byte-order mark is read past; UTF-16 LE or BE with one is converted while it is
    read; UTF-32 (by its byte-order mark) fails with a TraceError that says so. Anything else
    is passed on as it is: UTF-8 is checked where it is parsed.
    """
    start = stream.peek(4)[:4]  # type: ignore[attr-defined]
    if start.startswith(UTF32_BOMS):
        raise TraceError(
            "the file is UTF-32 text (by its byte-order mark): save it as UTF-8", source=source
        )
    if start.startswith(BOM):
        stream.read(len(BOM))
        return stream
    encoding = UTF16_BOMS.get(start[:2])
    if encoding is None:
        return stream
    stream.read(2)
    return io.BufferedReader(
        ChunkReader(utf16_as_utf8(stream, encoding, source=source)), HEAD_BYTES
    )


def encoding_problem(head: bytes) -> str | None:
    """Say why the first bytes of a file are not readable text, or None when they are UTF-8.

    UTF-16 without a byte-order mark shows as NUL bytes between the characters; another
    8-bit encoding (Latin-1, Windows-1252) as a byte that is not UTF-8.
    """
    sample = head[:4096]
    if not sample:
        return None
    nul = sample.count(0)
    if nul * 4 >= len(sample):
        even, odd = sample[0::2].count(0), sample[1::2].count(0)
        order = "BE" if even > odd else "LE"
        return (
            f"the file looks like UTF-16 {order} without a byte-order mark (NUL bytes between "
            "the characters)"
        )
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 3:  # not only a character cut off by the sample's end
            byte = sample[exc.start]
            return (
                f"the file is not UTF-8: byte 0x{byte:02x} at offset {exc.start} is not valid "
                "UTF-8 (Latin-1 or Windows-1252 text?)"
            )
    return None


# --- sniffing: what the first bytes show


def stream_head(stream: IO[bytes]) -> bytes:
    """Return up to HEAD_BYTES from the start of a peekable stream without consuming it."""
    return stream.peek(HEAD_BYTES)[:HEAD_BYTES]  # type: ignore[attr-defined]


def first_byte(stream: IO[bytes]) -> bytes:
    """Return the first non-blank byte of a peekable stream without consuming it."""
    return stream_head(stream).lstrip(BOM + b" \t\r\n")[:1]


def looks_like_jsonl(head: bytes) -> bool:
    """Return whether the first line of head is one whole JSON object or array.

    A one-line JSON document counts too: read line by line it gives the same value. So does
    a first line that is whole JSON but for a byte that is not UTF-8, when more lines follow:
    that line is then skipped and counted, not the whole file refused.
    """
    first, newline, rest = head.lstrip(BOM + b" \t\r\n").partition(b"\n")
    first = first.strip()
    if first[:1] not in (b"{", b"["):
        return False
    if not rest and len(head) >= HEAD_BYTES:
        return False  # the first line may go on past the head
    try:
        json.loads(first)
    except UnicodeDecodeError:
        if not newline:
            return False
        try:
            json.loads(first.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return False
    except (ValueError, RecursionError):
        return False
    return True


def head_values(head: bytes, max_lines: int = 20) -> list[Any]:
    """Return what the head shows: the first JSONL values, or the partly read JSON document.

    JSONL values stop at the first line that does not parse (the last one may be cut off).
    For a single JSON document cut off by the head, the value holds everything up to the cut
    (containers still open at the cut are included as far as they got).
    """
    if looks_like_jsonl(head):
        values = []
        for raw in head.lstrip(BOM).splitlines():
            if raw.strip():
                try:
                    values.append(json.loads(raw))
                except (ValueError, RecursionError):
                    break
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
        for event, value in ijson.basic_parse(head.lstrip(BOM)):
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
