"""The importer registry: every trace format loopboard reads, detected by content.

Importers are plain modules (no Django import) shared by the web ingest, the API and
`loopboard scan`. To add a format, write a module with `name`, `label`, `claim(sample)` and
`parse(stream, source=, limits=)`, and add it to IMPORTERS below. Detection scores every
importer's claim on the first records (detect.py) and takes the best; on a tie the earlier
importer wins, so specific formats come before general ones. An importer with only a
`sniff(head)` yes/no still works: a yes counts as 0.5.

`generic` (the heuristic reader for unknown files) is never chosen by detection: it is
offered by name, and an unknown file's error says when it would find tool calls.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Protocol

from detection.model import Run

from . import (
    agents_sdk,
    aider,
    anthropic,
    atif,
    chat,
    claude_code,
    codex,
    copilot_cli,
    cursor,
    envelopes,
    gemini,
    generic,
    hook_logs,
    inspect_ai,
    langsmith,
    managed_agents,
    mini_swe_agent,
    native,
    opencode,
    openhands,
    otlp,
    pi,
    responses,
    swe_agent,
    tau2,
    tree_json,
)
from .detect import Claim, Sample, Verdict, deep_sample, from_sniff, judge, sample_of
from .errors import TraceError
from .lanes import assign_lanes
from .reading import DEFAULT_LIMITS, HEAD_BYTES, Limits, as_utf8, encoding_problem

__all__ = [
    "IMPORTERS",
    "Limits",
    "TraceError",
    "detect_format",
    "explain_format",
    "iter_runs",
    "open_trace",
]

GZIP_MAGIC = b"\x1f\x8b"


class Importer(Protocol):
    """One trace format: a module (or object) with these four names, listed in IMPORTERS."""

    name: str  # short id used by --format, the upload field and the API, e.g. "native"
    label: str  # human name, e.g. "loopboard native JSONL"

    def claim(self, sample: Sample) -> Claim:
        """Score how well the first records (up to 64 KiB, decompressed) fit this format."""

    def parse(self, stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield the runs in the stream, in the order they appear."""


IMPORTERS: dict[str, Importer] = {
    module.name: module  # type: ignore[misc]
    for module in (
        # agent-harness formats: precise sniffers, before the general ones
        claude_code,
        codex,
        gemini.stream,
        gemini.chat,
        pi,
        atif,
        managed_agents,
        inspect_ai,
        langsmith,
        aider,
        mini_swe_agent,
        swe_agent,
        openhands,
        agents_sdk,
        copilot_cli,
        opencode,
        hook_logs.claude_code_hooks,
        cursor,
        tau2,
        otlp,
        tree_json,
        # message-list formats: anthropic needs Anthropic-only blocks, chat takes the rest
        responses,
        anthropic,
        chat,
        native,
        generic,  # heuristic: offered by name only (HEURISTIC below)
    )
}


class _LimitedReader(io.RawIOBase):
    """Read through to `inner`, failing once more than `limit` bytes came out."""

    def __init__(self, inner: IO[bytes], limit: int, source: str) -> None:
        self.inner, self.limit, self.source, self.count = inner, limit, source, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self.inner.read(len(buffer))
        self.count += len(data)
        if self.count > self.limit:
            raise TraceError(
                f"file is larger than the limit of {self.limit} bytes", source=self.source
            )
        buffer[: len(data)] = data
        return len(data)


def open_trace(
    data: bytes | IO[bytes] | str | os.PathLike,
    *,
    source: str = "",
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[io.BufferedReader, bytes]:
    """Return a buffered binary stream over the (gunzipped) trace, as UTF-8 without a
    byte-order mark (`reading.as_utf8`), and its first bytes."""
    if isinstance(data, bytes):
        raw: IO[bytes] = io.BytesIO(data)
    elif isinstance(data, str | os.PathLike):
        raw = open(data, "rb")  # noqa: SIM115 - closed with the stream
    else:
        raw = data
    stream = io.BufferedReader(raw) if not hasattr(raw, "peek") else raw  # type: ignore[arg-type]
    if stream.peek(2)[:2] == GZIP_MAGIC:
        stream = io.BufferedReader(gzip.GzipFile(fileobj=stream, mode="rb"))  # type: ignore[arg-type]
    limited = io.BufferedReader(_LimitedReader(stream, limits.max_bytes, source), HEAD_BYTES)
    try:
        text = as_utf8(limited, source=source)
        head = text.peek(HEAD_BYTES)[:HEAD_BYTES]  # type: ignore[attr-defined]
    except (OSError, EOFError) as exc:  # bad gzip
        raise TraceError(f"cannot decompress: {exc}", source=source) from None
    return text, head  # type: ignore[return-value]


def _claimant(importer: Importer):  # type: ignore[no-untyped-def]
    claim = getattr(importer, "claim", None)
    return claim if claim is not None else from_sniff(importer.sniff, importer.label)  # type: ignore[attr-defined]


CLAIMANTS = {name: _claimant(importer) for name, importer in IMPORTERS.items()}
HEURISTIC = {"generic"}  # offered by name only, never chosen by detection
# A claim below this is only a general shape: a big document is judged past its head too,
# and records wrapped by another tool are unwrapped, when either claims more.
DEEP_BELOW = 0.5


def explain_format(head: bytes) -> Verdict:
    """Every importer's score and reason on these first bytes, best first."""
    sample = sample_of(head)
    return judge(sample, {k: v for k, v in CLAIMANTS.items() if k not in HEURISTIC})


def detect_format(head: bytes, *, source: str = "") -> str:
    """Return the name of the importer whose claim on these first bytes scores best."""
    sample = sample_of(head)
    if sample.layout == "empty":
        raise TraceError("empty file", source=source)
    verdict = judge(sample, {k: v for k, v in CLAIMANTS.items() if k not in HEURISTIC})
    if verdict.best is not None:
        return verdict.best[0]
    reasons = "; ".join(f"{name}: {claim.reason}" for name, claim in verdict.claims)
    hint = "pass a format to force one"
    if "generic" in CLAIMANTS:
        generic = CLAIMANTS["generic"](sample)
        if generic.score > 0:
            hint = f"--format generic would read it heuristically ({generic.reason})"
        else:
            hint += f"; --format generic cannot read it either ({generic.reason})"
    problem = encoding_problem(head)
    if problem is not None:
        raise TraceError(f"{problem}: save it as UTF-8", source=source)
    raise TraceError(f"unknown trace format. Tried {reasons}. {hint}", source=source, line=1)


class _Unclosed(io.RawIOBase):
    """The caller's stream, read through a view whose closing leaves it open (a buffered
    reader over it closes its view when it goes)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self.inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


Source = bytes | IO[bytes] | str | os.PathLike  # what a trace is read from


def _second_pass(data: Source) -> tuple[Source, Callable[[], Source] | None]:
    """Return what to open the trace from, and a function that gives it again from its
    start for a second pass (None when a stream that does not seek cannot be read twice).
    A caller's stream is read through views that leave it open."""
    if isinstance(data, bytes | str | os.PathLike):
        return data, lambda: data
    if not data.seekable():
        return data, None
    start = data.tell()

    def again() -> Source:
        data.seek(start)
        return _Unclosed(data)  # type: ignore[return-value]

    return _Unclosed(data), again  # type: ignore[return-value]


def choose_format(
    stream: io.BufferedReader,
    head: bytes,
    *,
    source: str,
    limits: Limits = DEFAULT_LIMITS,
    reopen: Callable[[], Source] | None = None,
    owned: bool = True,
) -> tuple[str, io.BufferedReader]:
    """Return the format of a trace and the stream its importer reads.

    The head decides unless it holds only part of a JSON document and no format claims more
    than a general shape (DEEP_BELOW). Then the document's outline is judged too
    (`detect.deep_sample`, a second pass through `reopen()`, the trace from its start; when
    not `owned`, that pass moved the caller's stream and the import reads it again), and the
    better claim wins. When still no format claims more than a general shape, records
    another tool wrapped are unwrapped (`envelopes`) and what is inside is detected; when it
    claims more, its importer reads the unwrapped stream. A file nothing claims fails with
    `detect_format`'s error.
    """
    sample = sample_of(head)
    if sample.layout == "empty":
        raise TraceError("empty file", source=source)
    claimants = {k: v for k, v in CLAIMANTS.items() if k not in HEURISTIC}
    best = judge(sample, claimants).best
    shallow = best is None or best[1].score < DEEP_BELOW
    if shallow and not sample.complete and sample.layout == "json" and reopen is not None:
        again, _ = open_trace(reopen(), source=source, limits=limits)
        try:
            deep = deep_sample(again, head)
        finally:
            if owned:
                again.close()
        if deep is not None:
            deeper = judge(deep, claimants).best
            if deeper is not None and (best is None or deeper[1].score > best[1].score):
                best, sample = deeper, deep
            elif best is None:
                sample = deep
        if not owned:
            stream, _ = open_trace(reopen(), source=source, limits=limits)
    envelope = envelopes.find(sample) if best is None or best[1].score < DEEP_BELOW else None
    inner = envelope.inner_sample(sample) if envelope is not None else None
    if envelope is not None and inner is not None:
        found = judge(inner, claimants).best
        if found is not None and (best is None or found[1].score > best[1].score):
            return found[0], envelope.open(stream, source=source, limits=limits)
    if best is not None:
        return best[0], stream
    return detect_format(head, source=source), stream


# A run its trace names only by an opaque id, a session UUID (Codex, Gemini CLI, a Claude Code
# session with no title or slug), is listed under the name of the file it came in, with the
# id's first eight characters to tell a file's runs apart ("fix-auth.jsonl · 019c2b10"; just
# the file's name when that already holds them). Its id stays what it was. OTLP runs are
# named by the OTLP importer (agent or root span and a short trace id), and a file sent with
# no name ("upload") names nothing.
OPAQUE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
NAMELESS_FILES = frozenset({"", "upload", "-"})


def file_named(run: Run, source: str) -> Run:
    """Name `run` after its file `source` when the trace gives it no better name."""
    base = os.path.basename(source or "")
    if run.format == "otlp" or base in NAMELESS_FILES or (run.name and run.name != run.id):
        return run
    if OPAQUE_ID.fullmatch(run.id or ""):
        short = run.id[:8]
        run.name = base if short.lower() in base.lower() else f"{base} · {short}"
    return run


def iter_runs(
    data: bytes | IO[bytes] | str | os.PathLike,
    *,
    source: str = "",
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Iterator[Run]:
    """Yield the runs of one trace file, detecting its format unless one is given."""
    if not source and isinstance(data, str | os.PathLike):
        source = os.fspath(data)
    opened, reopen = _second_pass(data)
    stream, head = open_trace(opened, source=source, limits=limits)
    if format is None:
        owned = isinstance(data, bytes | str | os.PathLike)
        format, stream = choose_format(
            stream, head, source=source, limits=limits, reopen=reopen, owned=owned
        )
    elif format not in IMPORTERS:
        raise TraceError(f"unknown format {format!r}; known: {', '.join(IMPORTERS)}", source=source)
    try:
        for run in IMPORTERS[format].parse(stream, source=source, limits=limits):
            yield assign_lanes(file_named(run, source))
    except (OSError, EOFError) as exc:
        raise TraceError(f"cannot read: {exc}", source=source) from None
