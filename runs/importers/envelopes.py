"""Records another tool wrapped: the one rule that unwraps them, for every format.

Some tools store a format's records inside their own envelope:

- each record under one key of a wrapper object, `raw`, `event`, `data`, `payload` or
  `record` (`{"role": "", "content": "", "timestamp": "...", "raw": {<a Copilot CLI event>}}`
  per line), in JSONL or in a JSON array;
- a document whose records sit in a list under `traces`, `runs`, `items` or `data`
  (`{"traces": [<OpenAI Agents SDK records>], "timestamp": ..., "count": N}`), or whose one
  payload object sits under one of the record keys.

`find` sees an envelope in a file's Sample; `Envelope.open` gives a stream of what is inside
(the unwrapped records as JSONL, or the payload as a document), read from the file as it
goes, so the inner format is detected and imported like any file. Detection tries an
envelope only when no format claims the file as it is, so a format that has these keys of
its own is never unwrapped.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from .detect import Sample, sample_of
from .reading import (
    ChunkReader,
    DepthGuard,
    Limits,
    build_value,
    document_depth,
    skip_value,
)

RECORD_KEYS = ("raw", "event", "data", "payload", "record")
LIST_KEYS = ("traces", "runs", "items", "data")
MOST = 0.5  # share of the records that must be wrapped the same way


@dataclass(frozen=True, slots=True)
class Envelope:
    """Where the records sit: `key` of each record ("records"), the list under `key` of the
    document ("list"), or the document's payload under `key` ("document")."""

    kind: str
    key: str
    jsonl: bool = True  # "records": the file is JSONL (else a JSON array)

    def describe(self) -> str:
        if self.kind == "records":
            return f"records wrapped under `{self.key}`"
        if self.kind == "list":
            return f"records in the document's `{self.key}` list"
        return f"a document wrapped under `{self.key}`"

    def inner_sample(self, sample: Sample) -> Sample | None:
        """The Sample of what is inside, from the outer file's Sample (None: nothing)."""
        if self.kind == "document":
            payload = sample.top.get(self.key) if isinstance(sample.top, dict) else None
            return _sample([payload], jsonl=False) if isinstance(payload, dict) else None
        if self.kind == "list":
            records = sample.top.get(self.key) if isinstance(sample.top, dict) else None
        else:
            records = [_unwrapped(record, self.key) for record in sample.records]
        return _sample(records, jsonl=True) if records else None

    def open(self, stream: IO[bytes], *, source: str, limits: Limits) -> io.BufferedReader:
        """A peekable stream of what is inside, read from `stream` as it is consumed."""
        if self.kind == "records" and self.jsonl:
            chunks = _unwrap_lines(stream, self.key, limits)
        else:
            chunks = _unwrap_document(self, stream, source=source, limits=limits)
        return io.BufferedReader(ChunkReader(chunks), 64 * 1024)


def find(sample: Sample) -> Envelope | None:
    """The envelope the file's records sit in, or None when they are not wrapped."""
    top = sample.top
    if isinstance(top, dict):
        for key in LIST_KEYS:
            value = top.get(key)
            if isinstance(value, list) and _mostly(value, lambda record: True):
                return Envelope("list", key)
        for key in RECORD_KEYS:
            if isinstance(top.get(key), dict) and len(top) <= 8:
                return Envelope("document", key)
        if sample.layout == "json":
            return None
    records = sample.objects()
    if len(records) < len(sample.records) * MOST or not records:
        return None
    for key in RECORD_KEYS:
        if _mostly(records, lambda record, key=key: isinstance(record.get(key), dict)):
            return Envelope("records", key, jsonl=sample.layout == "jsonl")
    return None


def _mostly(records: list[Any], wrapped: Any) -> bool:
    objects = [record for record in records if isinstance(record, dict)]
    return bool(objects) and sum(bool(wrapped(r)) for r in objects) >= len(records) * MOST


def _unwrapped(record: Any, key: str) -> Any:
    if isinstance(record, dict) and isinstance(record.get(key), dict):
        return record[key]
    return record


def _sample(records: list[Any], *, jsonl: bool) -> Sample:
    if jsonl:
        text = "".join(json.dumps(record) + "\n" for record in records)
    else:
        text = json.dumps(records[0])
    return sample_of(text.encode(), complete=False)


# --- the unwrapped stream


def _unwrap_lines(stream: IO[bytes], key: str, limits: Limits) -> Iterator[bytes]:
    """Each JSONL line as its payload under `key`; other lines (and bad ones, for the importer
    to report) as they are, so line numbers stay the file's."""
    for raw in stream:
        line = raw.rstrip(b"\r\n")
        if line.strip() and len(line) <= limits.max_line_bytes:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                record = None
            if isinstance(record, dict) and isinstance(record.get(key), dict):
                line = json.dumps(record[key]).encode()
        yield line + b"\n"


def _unwrap_document(
    envelope: Envelope, stream: IO[bytes], *, source: str, limits: Limits
) -> Iterator[bytes]:
    """The records of a wrapping document as JSONL (one per line), or its payload."""
    import ijson

    reader = DepthGuard(stream, source=source, max_depth=document_depth(limits))
    events = ijson.basic_parse(reader, use_float=True)
    try:
        event, _ = next(events, (None, None))
        if envelope.kind == "records":  # a JSON array of wrapped records
            for event, value in events:
                if event == "end_array":
                    return
                record = build_value(event, value, events, None)
                yield json.dumps(_unwrapped(record, envelope.key)).encode() + b"\n"
            return
        for event, key in events:
            if event == "end_map":
                return
            event, value = next(events)
            if key != envelope.key:
                skip_value(event, events)
            elif envelope.kind == "document":
                yield from _serialized(event, value, events)
            elif event == "start_array":
                for event, value in events:
                    if event == "end_array":
                        break
                    yield from _serialized(event, value, events)
                    yield b"\n"
    except ijson.JSONError as exc:
        raise reader.error(exc) from None


def _serialized(event: str, value: Any, events: Iterator[tuple[str, Any]]) -> Iterator[bytes]:
    """The JSON text of the value that starts with this event, written as it is parsed (a
    payload is never held whole)."""
    level = 0
    first = True  # no comma before the next value or key
    while True:
        if event in ("end_map", "end_array"):
            yield b"}" if event == "end_map" else b"]"
            level -= 1
            first = False
        else:
            comma = b"" if first else b","
            if event == "map_key":
                yield comma + json.dumps(value).encode() + b":"
                first = True
            elif event in ("start_map", "start_array"):
                yield comma + (b"{" if event == "start_map" else b"[")
                level += 1
                first = True
            else:
                yield comma + json.dumps(value).encode()
                first = False
        if level == 0:
            return
        event, value = next(events)
