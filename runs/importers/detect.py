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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .reading import BOM, HEAD_BYTES, partial_json

MAX_RECORDS = 200
GOOD_ENOUGH = 0.2  # a claim below this is not taken on its own


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


def keys_of(records: Iterable[Any]) -> set[str]:
    """Every key of every object record."""
    found: set[str] = set()
    for record in records:
        if isinstance(record, dict):
            found.update(record)
    return found


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
