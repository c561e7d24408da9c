"""Choosing a file's format by evidence: every importer scores what the first records show.

The first bytes of a file (`HEAD_BYTES`, 64 KiB) are read once into a `Sample`: its layout
(JSONL, one JSON document, text) and its first records (up to `MAX_RECORDS`). Each importer's
`claim(sample)` answers with a `Claim`: a score from 0 to 1 and the reason, in words a user
can check against the file. The best score wins; ties go to the earlier importer in the
registry. A file no importer claims fails with every reason (see `explain`).

Scores, by convention:

- 0: the file does not fit; the reason says what is missing.
- up to 0.5: a general shape fits (a list of messages, a JSON object with a `tool` field).
- 0.5 to 0.9: records carry the fields this format writes.
- 0.9 and up: a marker that only this format writes (`trajectory_format: mini-swe-agent-1`).

Importers weigh what fraction of the records fit (`share`), after leaving out the metadata
records that tools put first or between turns (a Claude Code `file-history-snapshot`, a
Gemini metadata line), so a file is not judged by its first line alone.

A JSON document bigger than the head may keep its evidence for later (a tau2 `simulations`
list after hundreds of KB of `info`; a first message over 64 KiB). `deep_sample` streams the
whole document and keeps its outline: every key, the first members of each list, the start of
each string (`thin`), so the claims judge what comes late too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from .reading import BOM, HEAD_BYTES, PARSE_BYTES, DepthGuard, partial_json, skip_value

MAX_RECORDS = 200
GOOD_ENOUGH = 0.2  # a claim below this is not taken on its own
# The outline of a document past the head (deep_sample): what of it is kept
DEEP_SCAN_BYTES = 256 * 1024 * 1024  # read no further than this
DEEP_LIST_ITEMS = 5  # the first members of a list inside the document
DEEP_MAP_KEYS = 1000  # the first keys of one object
DEEP_STRING_CHARS = 4096  # the start of a string
DEEP_DEPTH = 64


@dataclass(frozen=True, slots=True)
class Claim:
    """How well a file fits one format, and why."""

    score: float
    reason: str

    @staticmethod
    def no(reason: str) -> Claim:
        return Claim(0.0, reason)


@dataclass(slots=True)
class Sample:
    """What the first bytes of a file show, read once for every importer."""

    head: bytes
    layout: str  # "jsonl", "json", "text" or "empty"
    records: list[Any] = field(default_factory=list)  # JSONL values, or the document's items
    document: Any = None  # "json": the (partly read) top-level value
    text: str = ""  # the head as text (BOM and leading white space stripped)
    complete: bool = True  # the head holds the whole file
    long_line: bool = False  # "json" whose first line runs past the head: may be JSONL too

    @property
    def top(self) -> Any:
        """The whole-file value: the document, or the one record of a one-line file."""
        if self.layout == "json":
            return self.document
        if self.layout == "jsonl" and len(self.records) == 1:
            return self.records[0]
        return None

    @property
    def maybe_jsonl(self) -> bool:
        """JSONL, or a first record so long that the head cannot tell JSONL from a document."""
        return self.layout == "jsonl" or self.long_line

    def objects(self) -> list[dict[str, Any]]:
        """The records that are JSON objects."""
        return [record for record in self.records if isinstance(record, dict)]


def sample_of(head: bytes, *, complete: bool | None = None) -> Sample:
    """Read the first bytes of a file into a Sample (never fails: bad input is "text")."""
    body = head.lstrip(BOM + b" \t\r\n")
    text = body[:HEAD_BYTES].decode("utf-8", "replace")
    whole = len(head) < HEAD_BYTES if complete is None else complete
    if not body:
        return Sample(head, "empty", text="", complete=whole)
    if body[:1] in (b"{", b"["):
        records = _jsonl_records(body, whole)
        if records is not None:
            return Sample(head, "jsonl", records=records, text=text, complete=whole)
        document = partial_json(body)
        if document is not None:
            items = document[:MAX_RECORDS] if isinstance(document, list) else [document]
            long_line = not whole and b"\n" not in body.rstrip()
            return Sample(head, "json", items, document, text, whole, long_line)
    return Sample(head, "text", text=text, complete=whole)


def deep_sample(stream: IO[bytes], head: bytes) -> Sample | None:
    """Read a whole JSON document (or a JSONL file whose first line runs past the head) and
    return a Sample of its outline (see `thin`), or None when it does not start with a JSON
    object or array. Reads no further than DEEP_SCAN_BYTES; a document cut there (or
    truncated, or invalid further on) keeps what was read before."""
    import ijson

    capped = cast(IO[bytes], _Capped(stream, DEEP_SCAN_BYTES))
    reader = DepthGuard(capped, source="", max_depth=DEEP_DEPTH + 16)
    events = ijson.basic_parse(reader, use_float=True, multiple_values=True, buf_size=PARSE_BYTES)
    events = _until_error(events)
    values: list[Any] = []
    for event, value in events:
        values.append(thin(event, value, events, 1, MAX_RECORDS))
        if len(values) >= MAX_RECORDS:
            break
    if not values or not isinstance(values[0], dict | list):
        return None
    text = head.lstrip(BOM + b" \t\r\n")[:HEAD_BYTES].decode("utf-8", "replace")
    if len(values) > 1:  # JSONL whose first record is longer than the head
        return Sample(head, "jsonl", records=values, text=text, complete=False)
    document = values[0]
    items = document[:MAX_RECORDS] if isinstance(document, list) else [document]
    return Sample(head, "json", items, document, text, complete=False)


def thin(event: str, value: Any, events: Iterator[tuple[str, Any]], depth: int, items: int) -> Any:
    """Build the outline of the JSON value that starts with this ijson event: objects keep
    their first DEEP_MAP_KEYS keys, lists their first `items` members (DEEP_LIST_ITEMS further
    in), strings their first DEEP_STRING_CHARS characters; deeper than DEEP_DEPTH is None."""
    if event == "string":
        return value[:DEEP_STRING_CHARS]
    if event not in ("start_map", "start_array"):
        return value
    if depth > DEEP_DEPTH:
        skip_value(event, events)
        return None
    if event == "start_map":
        built: dict[str, Any] = {}
        for event, key in events:
            if event == "end_map":
                break
            kind, value = next(events, (None, None))
            if kind is None:  # the document ends here (cut or truncated)
                break
            if len(built) < DEEP_MAP_KEYS:
                built[key] = thin(kind, value, events, depth + 1, DEEP_LIST_ITEMS)
            else:
                skip_value(kind, events)
        return built
    members: list[Any] = []
    for event, value in events:
        if event == "end_array":
            break
        if len(members) < items:
            members.append(thin(event, value, events, depth + 1, DEEP_LIST_ITEMS))
        else:
            skip_value(event, events)
    return members


def _until_error(events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The events until the parser stops (the end, a cut, a syntax or nesting error)."""
    try:
        yield from events
    except Exception:  # noqa: BLE001 - what was read before the error is the outline
        return


class _Capped:
    """A file-like view of a stream that ends after `limit` bytes."""

    def __init__(self, inner: IO[bytes], limit: int) -> None:
        self.inner, self.left = inner, limit

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.inner.read(size) if size > 0 else b""
        self.left -= len(data)
        return data


def _jsonl_records(body: bytes, whole: bool) -> list[Any] | None:
    """The values of the first lines, or None when the file is not line-delimited JSON.

    It is JSONL when its first line is a whole JSON value and, if there are more lines, the
    next non-blank line starts another value. A line holding two objects gives both.
    """
    lines = body.split(b"\n")
    if not whole and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut off by the head
    values: list[Any] = []
    decoder = json.JSONDecoder()
    for number, raw in enumerate(lines):
        raw = raw.strip()
        if not raw:
            continue
        found = _line_values(decoder, raw)
        if found is None:
            if number == 0:
                return None
            continue  # a bad line inside JSONL: the importer reports it
        values.extend(found)
        if len(values) >= MAX_RECORDS:
            break
    if len(values) == 1 and len(lines) == 1 and not whole:
        return None  # one line longer than the head: a document, read it as one
    return values or None


def _line_values(decoder: json.JSONDecoder, raw: bytes) -> list[Any] | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
    values, pos = [], 0
    try:
        while pos < len(text):
            value, pos = decoder.raw_decode(text, pos)
            values.append(value)
            while pos < len(text) and text[pos] in " \t\r":
                pos += 1
    except (ValueError, RecursionError):
        return None
    return values


# --- helpers for claims


def share(records: Iterable[Any], fits: Callable[[Any], bool]) -> float:
    """The fraction of records for which fits() holds (0 for no records)."""
    total = hits = 0
    for record in records:
        total += 1
        hits += bool(fits(record))
    return hits / total if total else 0.0


# --- choosing


@dataclass(frozen=True, slots=True)
class Verdict:
    """Every importer's claim on one file, best first."""

    claims: list[tuple[str, Claim]]

    @property
    def best(self) -> tuple[str, Claim] | None:
        top = self.claims[0] if self.claims else None
        return top if top is not None and top[1].score >= GOOD_ENOUGH else None

    def explain(self) -> str:
        """One line per format: the score and the reason, best first."""
        width = max((len(name) for name, _ in self.claims), default=0)
        return "\n".join(
            f"{name:<{width}}  {claim.score:4.2f}  {claim.reason}" for name, claim in self.claims
        )


def judge(sample: Sample, claimants: dict[str, Callable[[Sample], Claim]]) -> Verdict:
    """Score the sample with every claimant; best first, ties in registry order."""
    scored = []
    for order, (name, claim) in enumerate(claimants.items()):
        try:
            result = claim(sample)
        except Exception as exc:  # noqa: BLE001 - one claimant must never break detection
            result = Claim.no(f"could not judge ({type(exc).__name__})")
        scored.append((-result.score, order, name, result))
    scored.sort(key=lambda item: (item[0], item[1]))
    return Verdict([(name, result) for _, _, name, result in scored])


def from_sniff(sniff: Callable[[bytes], bool], what: str) -> Callable[[Sample], Claim]:
    """A claim for an importer that only has a yes/no sniffer: 0.5 when it says yes."""

    def claim(sample: Sample) -> Claim:
        if sniff(sample.head):
            return Claim(0.5, f"the first records look like {what}")
        return Claim.no(f"the first records do not look like {what}")

    return claim
