"""Inspect AI eval logs (UK AISI `inspect_ai`), log versions 1–3, in both forms:

- `.json`: one `EvalLog` object `{version, status, eval, plan, results, stats, error?,
  samples: [EvalSample], …}`, read member by member (sample by sample);
- `.eval`: a zip with `header.json` (the log without samples), `_journal/start.json`,
  `summaries.json`, `reductions.json` and one `samples/<id>_epoch_<n>.json` per sample. The
  stream is spooled to a temporary file of at most `Limits.max_bytes`, then opened with
  `zipfile`; each member is parsed as a stream as it inflates (never held whole; its
  declared size is not trusted) and the members together inflate to at most
  `Limits.max_bytes` (zip bombs stop there, in bounded memory).

One run per sample (id = `<eval_id>/<sample id>/epoch-<n>`), steps from the sample's
`events` in order:

- `sample_init` -> `system`/`user` steps for the task's first messages (`state.messages`,
  else the sample `input`). When a log has none, the first `model` event's `input` gives
  them; in v3 logs that input is `[]` with `input_refs: [[start, end], …]`, ranges into the
  sample's `message_pool`, and is rebuilt from them.
- `model` -> the output message (`output.choices[0].message`): its reasoning parts a
  `reasoning` step, its text an `assistant` step (batch_id = the message id); tokens from
  `output.usage` (tokens_in = input_tokens + cache read + cache write, tokens_out =
  output_tokens) on the first step the event makes (the next call when it makes none).
  A model `error` -> a `system` step.
- `tool` -> one `tool_call` step holding call and result (id = the tool call id, tool =
  `function`, args = `arguments`, result = `result` as text, `ended_at` = `completed`).
  Status, explicit first: `error {type, message}` -> error ("parsing" -> "invalid": the
  model's call could not be parsed, nothing ran), `failed: true` -> error; otherwise the
  common text rules (`text_errors`) read the result (bash/python tools report stderr and
  exit codes only in text).
- Tree: a `tool` event's nested `events` (a sub-agent run as a tool) and the events inside a
  `span_begin` of type "agent" go under that tool's step (or a `system` step "agent <name>"
  for the span), in a lane of its own (the sub-agent's); main-line steps keep no parent.
  Span nesting comes from `span_begin {id, parent_id}` and each event's `span_id`.
- `error` events and `sample.error` -> `system` steps; `sample_limit` -> a `system` step
  "limit <type>: <message>"; `score` events and `sample.scores` -> metadata. `state`,
  `store`, `sandbox`, `logger`, `info`, `approval`, `input`, `span_end`, `step` -> skipped,
  counted in `metadata["skipped_events"]`.
- A sample without `events` (older logs) is read from its `messages`: assistant
  `tool_calls` -> calls, `tool` messages -> their results by `tool_call_id` (`error` ->
  error).
- Large strings are stored as `attachment://<hash>`; they are resolved from the sample's
  `attachments` wherever a step shows them.

Any length: a sample is read in two passes over its bytes, so one sample of any size is
read in bounded memory. Inspect writes `attachments` and `message_pool` after `events` (and
`messages` before them), so the first pass keeps the sample's small members (id, epoch,
error, scores), puts its attachments and pool in a private temporary SQLite database
(`_Store`) and notes whether it has events; the second streams its events (or, without any,
its messages) one at a time into a step spool (kit.spool). The `.eval` member is opened
twice (the second read is bounded by what the first inflated); a `.json` log is copied to a
temporary file first, as the zip is, and walked twice. One top-level event (with the events
nested in it) is built whole. An event makes finished steps, so nothing is held; in a sample
without events, a call waiting for its `tool` message is held. What the reader looks back at
is bounded: the newest MAX_SPANS spans (a span an event names moves to the newest place, so
an open agent span stays), MAX_AGENTS agent spans and sub-agent tools with the last step
under each, MAX_BATCHES tool call ids with the model message that asked for them, the ids
of the RECENT_IDS steps before (a repeated id among them is made unique), MAX_OPEN_CALLS calls
waiting for their tool message (an older one's result reads as a call of its own), and
MAX_COUNTED_KINDS skipped event types and MAX_SCORES `score` events.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import tempfile
import zipfile
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_time, token_sum
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import Recent, StepSpool
from .reading import (
    READ_BYTES,
    DepthGuard,
    Limits,
    build_value,
    document_depth,
    read_document,
    skip_value,
)

name = "inspect-ai"
label = "Inspect AI eval log (.json or .eval)"

ZIP_MAGIC = b"PK\x03\x04"
ZIP_NAMES = (b"_journal/start.json", b"header.json", b"samples/", b"summaries.json")
SAMPLE_MEMBER = re.compile(r"^samples/.+\.json$")
ATTACHMENT = "attachment://"
HEADER_KEYS = ("version", "status", "eval", "stats", "error", "results")
SMALL_MEMBERS = frozenset(("id", "epoch", "error", "scores"))  # of a sample, besides its events
ITEMS = ("events", "messages")  # a sample's lists the second pass reads (one of them)
# What the reader of one sample looks back at, bounded (see the module docstring)
MAX_SPANS = 16384  # spans an event may name (the newest, or the ones in use)
MAX_AGENTS = 4096  # agent spans and sub-agent tools, and the last step under each
MAX_BATCHES = 8192  # tool call ids whose model message is known (the newest)
MAX_OPEN_CALLS = 8192  # calls of a sample without events waiting for their tool message
RECENT_IDS = 50  # a step id repeated within this many steps is made unique
MAX_COUNTED_KINDS = 50  # skipped event types counted by name; the rest count as "(other)"
MAX_SCORES = 1000  # `score` events kept in metadata

Event = tuple[str, Any]  # one of ijson's parse events: (kind, value)


# --- detection


def claim(sample: Sample) -> Claim:
    """A `.json` log `{version, eval: {task, model, …}, samples|status}`, or a zip whose first
    members are Inspect's (`_journal/start.json`, `header.json`, `samples/…`)."""
    if sample.head.startswith(ZIP_MAGIC):
        names = [n.decode() for n in ZIP_NAMES if n in sample.head[:65536]]
        if names:
            return Claim(0.95, f"a zip with Inspect's members ({', '.join(names)})")
        return Claim(0.3, "a zip file; Inspect's member names are not in its first bytes")
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object or an Inspect `.eval` zip")
    spec = top.get("eval")
    if isinstance(spec, dict) and ("task" in spec and "model" in spec):
        if "samples" in top or "status" in top or "version" in top:
            return Claim(0.95, "an `eval` object with `task` and `model`, beside log fields")
        return Claim(0.7, "an `eval` object with `task` and `model`")
    return Claim.no("no `eval` object with `task` and `model`, and not a zip")


# --- reading


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per sample of an Inspect log (`.json` or `.eval`), each sample read in
    two passes (see the module docstring)."""
    head = stream.peek(4)[:4] if hasattr(stream, "peek") else b""  # type: ignore[attr-defined]
    with _Store() as store:
        if head == ZIP_MAGIC:
            yield from _parse_zip(stream, source=source, limits=limits, store=store)
        else:
            yield from _parse_json(stream, source=source, limits=limits, store=store)


def _parse_json(stream: IO[bytes], *, source: str, limits: Limits, store: _Store) -> Iterator[Run]:
    with _copy(stream, source) as copy:
        header, scanned = _scan_log(copy, source=source, limits=limits, store=store)
        if not header and not scanned:
            raise TraceError("not an Inspect log: no `eval` and no `samples`", source=source)
        if not scanned:
            raise TraceError(
                "the log holds no samples (written with log_samples off, or still running)",
                source=source,
                field="samples",
            )
        copy.seek(0)
        # one reader of the log for each list some sample wants, each sample's a slice of it
        wanted = {sample.wanted for sample in scanned} - {None}
        flat = {key: _items(_Pread(copy), f"samples.item.{key}.item") for key in wanted}
        for sample in scanned:
            items = {key: islice(flat[key], sample.counts[key]) for key in flat}
            where = f"samples[{sample.position}]"
            yield _sample_run(sample, items, store, source=source, limits=limits, where=where)
            store.forget(sample.index)


def _copy(stream: IO[bytes], source: str) -> IO[bytes]:
    """The stream in an unnamed temporary file (it stops at max_bytes), to be read twice."""
    copy = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    try:
        shutil.copyfileobj(stream, copy, 1024 * 1024)
    except OSError as exc:
        copy.close()
        raise TraceError(f"cannot read: {exc}", source=source) from None
    except BaseException:
        copy.close()
        raise
    copy.seek(0)
    return copy


def _parse_zip(stream: IO[bytes], *, source: str, limits: Limits, store: _Store) -> Iterator[Run]:
    with _copy(stream, source) as spool:
        try:
            archive = zipfile.ZipFile(spool)
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(f"not a readable zip ({exc}): truncated?", source=source) from None
        with archive:
            budget = _Budget(limits.max_bytes, source)
            members = {info.filename: info for info in archive.infolist()}
            header: dict[str, Any] = {}
            for member in ("header.json", "_journal/start.json"):
                if member in members:
                    value = _member(archive, members[member], budget, source, limits)
                    if isinstance(value, dict):
                        for key in HEADER_KEYS:
                            if key in value and key not in header:
                                header[key] = value[key]
            samples = [n for n in members if SAMPLE_MEMBER.match(n)]
            if not samples:
                raise TraceError(
                    "the .eval zip holds no samples/*.json (no samples logged, or still running)",
                    source=source,
                )
            for index, member in enumerate(samples):
                info = members[member]
                try:
                    sample, size = _scan_member(archive, info, budget, store, index, header, limits)
                except TraceError as exc:
                    if "inflate past" in exc.reason:  # the whole file is over the limit
                        raise
                    store.forget(index)
                    yield _broken_sample(member, header, exc)
                    continue
                where = f"{source}!{member}"
                # the second pass reads the bytes the first counted, and no more
                with _Budget(size, source).open(archive, info) as again:
                    wanted = [sample.wanted] if sample.wanted else []
                    items = {key: _items(again, f"{key}.item") for key in wanted}
                    run = _sample_run(
                        sample, items, store, source=where, limits=limits, where=member
                    )
                store.forget(index)
                yield run


def _scan_member(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    budget: _Budget,
    store: _Store,
    index: int,
    header: dict[str, Any],
    limits: Limits,
) -> tuple[_Scanned, int]:
    """The first pass over a sample member: what it holds besides its events, and the bytes
    it inflates to (counted against the budget)."""
    left = budget.left
    with budget.open(archive, info) as stream:
        events = _events(stream, source=f"{budget.source}!{info.filename}", limits=limits)
        sample = _scan_sample(next(events), events, store, index, header)
        _drain(events)
    return sample, left - budget.left


class _Budget:
    """What the zip's members may inflate to, together: each member is read as a stream
    through this count (its declared size is not trusted), so a member that inflates past
    what is left is refused after that many bytes, none of them held."""

    def __init__(self, total: int, source: str) -> None:
        self.left, self.total, self.source = total, total, source

    def open(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _MemberStream:
        try:
            return _MemberStream(archive.open(info), self, info.filename)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self.unreadable(info.filename, exc) from None

    def take(self, count: int, member: str) -> None:
        self.left -= count
        if self.left < 0:
            raise TraceError(
                f"zip members inflate past the limit of {self.total} bytes",
                source=self.source,
                field=member,
            )

    def unreadable(self, member: str, exc: BaseException) -> TraceError:
        return TraceError(f"cannot read zip member: {exc}", source=self.source, field=member)


class _MemberStream(io.RawIOBase):
    """A zip member read as it inflates, each chunk counted against the budget."""

    def __init__(self, raw: IO[bytes], budget: _Budget, member: str) -> None:
        self.raw, self.budget, self.member = raw, budget, member

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # read at most one byte past the budget: enough to know it is over
        want = max(0, min(len(buffer), self.budget.left + 1))
        try:
            data = self.raw.read(want) if want else b""
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self.budget.unreadable(self.member, exc) from None
        self.budget.take(len(data), self.member)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


def _member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, source: str, limits: Limits
) -> Any:
    with budget.open(archive, info) as stream:
        return read_document(stream, source=f"{source}!{info.filename}", limits=limits)


def _broken_sample(member: str, header: dict[str, Any], error: TraceError) -> Run:
    """A sample member that cannot be read: an empty run that says why (nothing is hidden)."""
    run = Run(id=f"{_eval_id(header)}/{member}", format=name, metadata=_meta(header))
    run.skipped = 1
    run.warnings.append(str(error))
    return run


def _eval_id(header: dict[str, Any]) -> str:
    spec = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    return str(spec.get("eval_id") or spec.get("run_id") or "eval")


def _meta(header: dict[str, Any]) -> dict[str, Any]:
    spec = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    meta: dict[str, Any] = {"agent": "inspect-ai"}
    for key in ("task", "model", "eval_id", "run_id", "created", "task_version"):
        value = spec.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            meta[key] = value
    packages = spec.get("packages")
    if isinstance(packages, dict) and isinstance(packages.get("inspect_ai"), str):
        meta["inspect_ai_version"] = packages["inspect_ai"]
    for key in ("version", "status"):
        if isinstance(header.get(key), str | int):
            meta[f"log_{key}"] = header[key]
    return meta


# --- the two passes over a sample


@dataclass
class _Scanned:
    """What the first pass over a sample learned: its small members (id, epoch, error,
    scores), whether it has events to read (else its messages are read), how many messages
    its pool holds (they and its attachments are in the _Store), and the header as it was
    when the sample began (a `.json` log's header members come before its samples)."""

    index: int
    position: int  # its place in its `samples` array (a `.json` log)
    header: dict[str, Any]
    small: dict[str, Any] = field(default_factory=dict)
    # what the second pass reads: "events", else "messages", else nothing (None)
    wanted: str | None = None
    # the items ijson's prefix `<key>.item` finds in the sample, for each key of ITEMS
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ITEMS, 0))
    pool: int = 0
    not_object: str | None = None  # the sample's type, when it is not an object


def _events(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Event]:
    """ijson's events of one JSON document (a log, or a sample member), its depth guarded;
    a syntax error names its line (reading.DepthGuard)."""
    import ijson

    reader = DepthGuard(stream, source=source, max_depth=document_depth(limits))
    try:
        yield from ijson.basic_parse(reader, use_float=True, buf_size=READ_BYTES)
    except ijson.JSONError as exc:
        raise reader.error(exc) from None


def _drain(events: Iterator[Event]) -> None:
    """Read to the end: content after the document is an error."""
    for _ in events:
        pass


def _open_log(events: Iterator[Event], source: str) -> None:
    """Read the start of a `.json` log, which must be an object (the errors of
    reading.iter_members)."""
    event, _ = next(events, (None, None))
    if event is None:
        raise TraceError("empty file", source=source)
    if event != "start_map":
        kind = "an array" if event == "start_array" else "a single value"
        raise TraceError(f"expected a JSON object, found {kind}", source=source, line=1)


def _scan_log(
    stream: IO[bytes], *, source: str, limits: Limits, store: _Store
) -> tuple[dict[str, Any], list[_Scanned]]:
    """The first pass over a `.json` log: its header members and its samples' first pass."""
    events = _events(stream, source=source, limits=limits)
    _open_log(events, source)
    header: dict[str, Any] = {}
    scanned: list[_Scanned] = []
    for event, key in events:
        if event == "end_map":
            break
        event, value = next(events)
        if key == "samples" and event == "start_array":
            for position, first in enumerate(events):
                if first[0] == "end_array":
                    break
                sample = _scan_sample(first, events, store, len(scanned), header)
                sample.position = position
                scanned.append(sample)
        elif key in HEADER_KEYS:
            header[key] = build_value(event, value, events, None)
        else:
            skip_value(event, events)
    _drain(events)
    return header, scanned


def _scan_sample(
    first: Event, events: Iterator[Event], store: _Store, index: int, header: dict[str, Any]
) -> _Scanned:
    """The first pass over one sample (its first event read): the small members kept, the
    attachments and the message pool put in the store, the events and messages skipped."""
    sample = _Scanned(index, index, dict(header))
    event, value = first
    if event != "start_map":
        sample.not_object = "list" if event == "start_array" else type(value).__name__
        skip_value(event, events)
        return sample
    last: dict[str, tuple[bool, int]] = {}
    for event, key in events:
        if event == "end_map":
            break
        event, value = next(events)
        if key == "attachments" and event == "start_map":
            _keep_attachments(events, store, index)
        elif key == "message_pool" and event == "start_array":
            sample.pool = _keep_pool(events, store, index)
        elif key in ITEMS:
            items, is_list = _count_items(event, events)
            sample.counts[key] += items
            last[key] = (is_list, items)  # as in a dict, the last of a repeated key counts
        elif key in SMALL_MEMBERS:
            sample.small[key] = build_value(event, value, events, None)
        else:
            skip_value(event, events)
    store.commit()
    is_list, items = last.get("events", (False, 0))
    if is_list and items:
        sample.wanted = "events"
    elif last.get("messages", (False, 0))[0]:
        sample.wanted = "messages"
    return sample


def _keep_attachments(events: Iterator[Event], store: _Store, index: int) -> None:
    """Put a sample's attachments (hash -> string) in the store, one at a time; a value
    that is not a string is not one (a reference to it stays as it is)."""
    for event, key in events:
        if event == "end_map":
            return
        event, value = next(events)
        if event == "string":
            store.attach(index, key, value)
        else:
            skip_value(event, events)


def _keep_pool(events: Iterator[Event], store: _Store, index: int) -> int:
    """Put a sample's message pool in the store, one message at a time; return its size."""
    count = 0
    for event, value in events:
        if event == "end_array":
            return count
        store.pool_put(index, count, build_value(event, value, events, None))
        count += 1
    return count


def _count_items(event: str, events: Iterator[Event]) -> tuple[int, bool]:
    """Read past the value that starts with `event`; return how many items ijson's prefix
    `<key>.item` finds in it (an array's items, or a map's members named "item") and
    whether it is an array."""
    count = 0
    if event == "start_array":
        for event, _ in events:
            if event == "end_array":
                break
            skip_value(event, events)
            count += 1
        return count, True
    if event == "start_map":
        for event, key in events:
            if event == "end_map":
                break
            count += key == "item"
            skip_value(next(events)[0], events)
    return count, False


def _items(stream: IO[bytes], prefix: str) -> Iterator[Any]:
    """The values at `prefix`, built by ijson's C backend: the second pass, over bytes the
    first pass has read (their syntax and depth are known good)."""
    import ijson

    return ijson.items(stream, prefix, use_float=True, buf_size=READ_BYTES)


class _Pread(io.RawIOBase):
    """A file read from an offset of its own (os.pread), so several readers of one file
    each keep their place."""

    def __init__(self, file: IO[bytes]) -> None:
        self.fd, self.offset = file.fileno(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = os.pread(self.fd, len(buffer), self.offset)
        self.offset += len(data)
        buffer[: len(data)] = data
        return len(data)


class _Store:
    """The samples' attachments and message pools, in a private temporary SQLite database
    (on disk, with a page cache of a few MB): Inspect writes a sample's `attachments` (its
    long strings, most of a big sample's bytes) and `message_pool` after its `events`, so
    the first pass puts them here and the second looks them up. Strings are stored as UTF-8
    bytes, lone surrogates kept (`surrogatepass`), so any JSON string goes in and comes out
    as it was; a sample's rows go once its run is read (`forget`)."""

    def __init__(self) -> None:
        self.db = sqlite3.connect("")  # "": a private database in a temporary file
        for statement in (
            "PRAGMA journal_mode = OFF",
            "PRAGMA synchronous = OFF",
            "PRAGMA cache_size = -4096",
            "CREATE TABLE attachment (sample INTEGER, key BLOB, value BLOB,"
            " PRIMARY KEY (sample, key))",
            "CREATE TABLE pool (sample INTEGER, place INTEGER, message TEXT,"
            " PRIMARY KEY (sample, place))",
        ):
            self.db.execute(statement)

    def __enter__(self) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    def attach(self, sample: int, key: str, value: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO attachment VALUES (?, ?, ?)",
            (sample, _bytes(key), _bytes(value)),
        )

    def attachment(self, sample: int, key: str) -> str | None:
        row = self.db.execute(
            "SELECT value FROM attachment WHERE sample = ? AND key = ?", (sample, _bytes(key))
        ).fetchone()
        return None if row is None else row[0].decode("utf-8", "surrogatepass")

    def pool_put(self, sample: int, place: int, message: Any) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO pool VALUES (?, ?, ?)", (sample, place, json.dumps(message))
        )

    def pool(self, sample: int, start: int, end: int) -> list[Any]:
        """The pool's messages start..end-1 (a list slice's bounds, both >= 0)."""
        rows = self.db.execute(
            "SELECT message FROM pool WHERE sample = ? AND place >= ? AND place < ? ORDER BY place",
            (sample, start, end),
        )
        return [json.loads(message) for (message,) in rows]

    def commit(self) -> None:
        self.db.commit()

    def forget(self, sample: int) -> None:
        for table in ("attachment", "pool"):
            self.db.execute(f"DELETE FROM {table} WHERE sample = ?", (sample,))  # noqa: S608
        self.db.commit()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# --- one sample's run


def _recent(bound: str, *, refresh: bool = True) -> Any:
    """A `Recent` look-back bounded by the module constant named `bound`, read when the
    sample's reading starts."""
    return field(default_factory=lambda: Recent(globals()[bound], refresh=refresh))


@dataclass
class _State:
    source: str
    limits: Limits
    skips: Skips
    store: _Store
    sample: int  # the sample's index in the store
    pool: int  # messages in its pool
    run: Run
    # What the reader looks back at, bounded (see the module docstring)
    spans: Recent[str, tuple[Any, str]] = _recent("MAX_SPANS")  # span id -> (parent, type)
    agents: Recent[str, Step] = _recent("MAX_AGENTS")  # agent span id -> its opener step
    last: Recent[str, str] = _recent("MAX_AGENTS")  # opener id -> the last step under it
    batches: Recent[str, str] = _recent("MAX_BATCHES")  # tool call id -> model message id
    calls: Recent[str, Step] = _recent("MAX_OPEN_CALLS", refresh=False)  # waiting (messages)
    recent_ids: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_IDS))
    pending_usage: dict[str, Any] | None = None
    opened: bool = False  # the task's first messages are in
    skipped: Counter = field(default_factory=Counter)
    scores: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> StepSpool:
        return self.run.steps  # type: ignore[return-value]

    def add(self, step: Step, under: Step | None) -> Step:
        add_step(self.run, step, limits=self.limits, source=self.source)
        step.id = step.id or f"s{len(self.steps)}"
        if step.id in self.recent_ids:  # the id of one of the steps just before: made unique
            step.id = f"{step.id}#{len(self.steps)}"
        self.recent_ids.append(step.id)
        if under is not None:
            step.parent_id = self.last.get(under.id, under.id)
            step.lane = f"agent:{under.id}"
            self.last.put(under.id, step.id)
        if self.pending_usage is not None and step.kind in ("assistant", "tool_call"):
            _usage(step, self.pending_usage)
            self.pending_usage = None
        return step

    def holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change: a call of a sample
        without events, waiting for its tool message (events make finished steps)."""
        return step.kind == "tool_call" and step.id is not None and self.calls.get(step.id) is step

    def skip(self, kind: str) -> None:
        """Count a skipped event by its type (MAX_COUNTED_KINDS types, the rest "(other)")."""
        if kind not in self.skipped and len(self.skipped) >= MAX_COUNTED_KINDS:
            kind = "(other)"
        self.skipped[kind] += 1

    def resolve(self, value: Any) -> Any:
        """Replace `attachment://<hash>` strings by the attachment they name."""
        if isinstance(value, str):
            if value.startswith(ATTACHMENT):
                found = self.store.attachment(self.sample, value[len(ATTACHMENT) :])
                return value if found is None else found
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value


def _sample_run(
    sample: _Scanned,
    items: dict[str, Iterator[Any]],
    store: _Store,
    *,
    source: str,
    limits: Limits,
    where: str,
) -> Run:
    """The run of one sample: its small members from the first pass, and its events (or
    messages) from the second: `items[sample.wanted]`. Every iterator of `items` is read to
    its end (a `.json` log's are slices of one iterator over all the samples)."""
    import ijson

    skips = Skips()
    header = sample.header
    if sample.not_object is not None:
        _read_past(items)
        reason = f"expected a sample object, got {sample.not_object}"
        skips.add(TraceError(reason, source=source, field=where))
        run = Run(id=f"{_eval_id(header)}/{where}", format=name, metadata=_meta(header))
        return skips.apply(run)
    small = sample.small
    run_id = f"{_eval_id(header)}/{small.get('id')}/epoch-{small.get('epoch', 1)}"
    spool = StepSpool()
    run = Run(id=run_id, format=name, steps=spool)  # type: ignore[arg-type]
    state = _State(source, limits, skips, store, sample.index, sample.pool, run)
    spool.hold = state.holds
    try:
        if sample.wanted == "events":
            for index, event in enumerate(items["events"]):
                _event_safely(state, event, None, f"{where}.events[{index}]")
        elif sample.wanted == "messages":
            for message in items["messages"]:
                _from_message(state, message)
        _read_past(items)
    except ijson.JSONError as exc:  # the first pass read these bytes: not expected
        raise TraceError(f"invalid JSON on the second read: {exc}", source=source) from None
    spool.hold = None  # read: no step changes any more
    if isinstance(small.get("error"), dict):
        message = small["error"].get("message")
        state.add(text_step("system", f"sample error: {message}", limits=limits), None)
    meta = _meta(header)
    meta["sample_id"] = small.get("id")
    meta["epoch"] = small.get("epoch")
    if isinstance(small.get("scores"), dict):
        meta["scores"] = {
            k: v.get("value") for k, v in small["scores"].items() if isinstance(v, dict)
        }
    elif state.scores:
        meta["scores"] = state.scores
    if state.skipped:
        meta["skipped_events"] = dict(state.skipped)
    task = meta.get("task", "eval")
    run.metadata = meta
    run.name = f"{task} · sample {small.get('id')} · epoch {small.get('epoch', 1)}"
    return finish_run(skips.apply(run))


def _read_past(items: dict[str, Iterator[Any]]) -> None:
    for values in items.values():
        for _ in values:
            pass


def _event_safely(state: _State, event: Any, under: Step | None, where: str) -> None:
    try:
        _event(state, event, under, where)
    except TooManySteps:
        raise
    except TraceError as exc:
        state.skips.add(TraceError(exc.reason, source=state.source, field=where))


def _agent_of(state: _State, span: Any) -> Step | None:
    """The opener step of the nearest enclosing agent span, if any. The spans walked are
    in use: they move to the newest place of their look-back (`Recent`)."""
    hops = 0
    while isinstance(span, str) and hops < 200:
        if span in state.agents:
            state.agents.move_to_end(span)
            return state.agents[span]
        found = state.spans.get(span)
        if found is None:
            return None
        state.spans.move_to_end(span)
        span = found[0]
        hops += 1
    return None


def _event(state: _State, event: Any, under: Step | None, where: str) -> None:
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise TraceError("an event without an `event` type", source=state.source)
    kind = event["event"]
    limits = state.limits
    when = parse_time(event.get("timestamp"))
    under = under or _agent_of(state, event.get("span_id"))
    if kind == "span_begin":
        span_id = event.get("id")
        if isinstance(span_id, str):
            state.spans.put(span_id, (event.get("parent_id"), str(event.get("type"))))
            if event.get("type") == "agent":
                text = f"agent {event.get('name') or ''}".strip()
                opener = state.add(text_step("system", text, limits=limits, started_at=when), under)
                state.agents.put(span_id, opener)
    elif kind == "sample_init":
        _opening(state, event, under, when)
    elif kind == "model":
        _model(state, event, under, when)
    elif kind == "tool":
        _tool(state, event, under, when, where)
    elif kind == "error":
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        text = f"error: {error.get('message', '')}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    elif kind == "sample_limit":
        text = f"limit {event.get('type')}: {event.get('message', '')}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    elif kind == "score":
        score = event.get("score")
        if isinstance(score, dict) and len(state.scores) < MAX_SCORES:
            state.scores[str(len(state.scores))] = score.get("value")
    elif kind == "subtask":
        for index, inner in enumerate(event.get("events") or []):
            _event_safely(state, inner, under, f"{where}.events[{index}]")
    else:
        state.skip(kind)


def _opening(state: _State, event: dict[str, Any], under: Step | None, when: float | None) -> None:
    initial = event.get("state") if isinstance(event.get("state"), dict) else {}
    messages = initial.get("messages")
    if not isinstance(messages, list):
        sample = event.get("sample") if isinstance(event.get("sample"), dict) else {}
        messages = sample.get("input")
        messages = (
            [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        )
    _messages_as_text(state, messages, under, when)


def _messages_as_text(state: _State, messages: Any, under: Step | None, when: float | None) -> None:
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") in ("system", "user"):
            text = content_text(state.resolve(message.get("content")))
            step = text_step(message["role"], text, limits=state.limits, started_at=when)
            state.add(step, under)
            state.opened = True


def _model_input(state: _State, event: dict[str, Any]) -> list[Any]:
    refs = event.get("input_refs")
    if isinstance(refs, list) and state.pool:
        rebuilt: list[Any] = []
        for ref in refs:
            if isinstance(ref, list) and len(ref) == 2:
                start, end = number(ref[0]), number(ref[1])
                if start is not None and end is not None:
                    rebuilt.extend(state.store.pool(state.sample, max(start, 0), max(end, 0)))
        return rebuilt
    inputs = event.get("input")
    return inputs if isinstance(inputs, list) else []


def _model(state: _State, event: dict[str, Any], under: Step | None, when: float | None) -> None:
    limits = state.limits
    if not state.opened:
        _messages_as_text(state, _model_input(state, event), under, when)
        state.opened = True
    if event.get("error"):
        text = f"model error: {content_text(event.get('error'))}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    output = event.get("output") if isinstance(event.get("output"), dict) else {}
    choices = output.get("choices")
    message = (
        choices[0].get("message")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    made = []
    if isinstance(message, dict):
        content = state.resolve(message.get("content"))
        parts = content if isinstance(content, list) else [content]
        reasoning = [
            p.get("reasoning")
            for p in parts
            if isinstance(p, dict) and p.get("type") == "reasoning"
        ]
        reasoning = [r for r in reasoning if isinstance(r, str) and r.strip()]
        text = content_text(
            [p for p in parts if not (isinstance(p, dict) and p.get("type") == "reasoning")]
        )
        batch = message.get("id") if isinstance(message.get("id"), str) else None
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("id"), str) and batch:
                state.batches.put(call["id"], batch)
        if reasoning:
            made.append(text_step("reasoning", "\n".join(reasoning), limits=limits, batch_id=batch))
        if text.strip():
            made.append(text_step("assistant", text, limits=limits, batch_id=batch))
    usage = output.get("usage") if isinstance(output.get("usage"), dict) else None
    for step in made:
        step.started_at = when
        step.ended_at = parse_time(event.get("completed"))
        state.add(step, under)
    if usage is not None:
        if made:
            _usage(made[0], usage)
        else:
            state.pending_usage = usage


def _usage(step: Step, usage: dict[str, Any]) -> None:
    tokens_in = token_sum(
        usage, ("input_tokens", "input_tokens_cache_read", "input_tokens_cache_write")
    )
    if tokens_in is not None:
        step.tokens_in = tokens_in
    step.tokens_out = number(usage.get("output_tokens"))


def _tool(
    state: _State, event: dict[str, Any], under: Step | None, when: float | None, where: str
) -> None:
    limits = state.limits
    step = tool_step(
        tool=str(event.get("function") or ""),
        args=state.resolve(event.get("arguments")),
        limits=limits,
    )
    step.id = str(event["id"]) if isinstance(event.get("id"), str | int) else None
    step.batch_id = state.batches.get(step.id or "")
    step.started_at = when
    state.add(step, under)
    result = state.resolve(event.get("result"))
    text = result if isinstance(result, str) else content_text(result)
    error = event.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        text = f"{text}\n{message}".strip() if isinstance(message, str) else text
        set_result(
            step, text, error=True, limits=limits, ended_at=parse_time(event.get("completed"))
        )
        if error.get("type") == "parsing":
            step.status = "invalid"
    else:
        failed = event.get("failed") is True
        set_result(
            step,
            text,
            error=failed or text_errors.is_error(text),
            limits=limits,
            ended_at=parse_time(event.get("completed")),
        )
    inner = event.get("events")
    if isinstance(inner, list) and inner:
        if f"tool:{step.id}" not in state.agents:  # a sub-agent run as a tool
            state.agents.put(f"tool:{step.id}", step)
        for index, nested in enumerate(inner):
            _event_safely(state, nested, step, f"{where}.events[{index}]")


def _from_message(state: _State, message: Any) -> None:
    """One message of a sample without events: calls from assistant `tool_calls`, results
    from `tool` messages by `tool_call_id` (among the newest MAX_OPEN_CALLS calls waiting)."""
    limits = state.limits
    if not isinstance(message, dict):
        return
    role = message.get("role")
    text = content_text(state.resolve(message.get("content")))
    if role in ("system", "user"):
        state.add(text_step(role, text, limits=limits), None)
    elif role == "assistant":
        batch = message.get("id") if isinstance(message.get("id"), str) else None
        if text.strip():
            state.add(text_step("assistant", text, limits=limits, batch_id=batch), None)
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                step = tool_step(
                    tool=str(call.get("function") or ""), args=call.get("arguments"), limits=limits
                )
                step.batch_id = batch
                step.id = str(call["id"]) if isinstance(call.get("id"), str) else None
                state.add(step, None)
                if step.id:
                    state.calls.put(step.id, step)  # past MAX_OPEN_CALLS the oldest waits no more
    elif role == "tool":
        _tool_message(state, message, text)


def _tool_message(state: _State, message: dict[str, Any], text: str) -> None:
    """A tool message: the result of the call it names, else a call of its own."""
    limits = state.limits
    step = state.calls.pop(str(message.get("tool_call_id")), None)
    if step is None:
        state.skips.note(
            f"{state.source}: a tool message matches no call; kept as a call of its own"
        )
        step = state.add(
            tool_step(tool=str(message.get("function") or ""), args=None, limits=limits), None
        )
        step.args = None
    error = message.get("error")
    if isinstance(error, dict):
        set_result(step, f"{text}\n{error.get('message', '')}".strip(), error=True, limits=limits)
        if error.get("type") == "parsing":
            step.status = "invalid"
    else:
        set_result(step, text, error=text_errors.is_error(text), limits=limits)
