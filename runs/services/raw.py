"""A trace's raw bytes on their way in and out, a chunk at a time.

In (`receive`, `pack`, `write`): an upload (a request body, an uploaded file, a file on
disk) is read CHUNK bytes at a time into a temporary file while it is hashed, and refused
one byte past the limit; it is compressed from that file into another, the way
`models.pack_raw` packs bytes; and the packed bytes go into `Trace.raw` a WRITE_CHUNK slice
at a time (or to the raw store as a file). So a 200 MB upload costs the web process a few
chunks and the compressor's window, never the file.

Out (`packed_chunks`, `chunks`, `open_raw`): `Trace.raw` is read from PostgreSQL in
RAW_CHUNK slices (an object outside the database likewise), unpacked as it is read; the
worker reads a temporary file of the received bytes and a download streams them.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import psycopg
import zstandard
from django.db import connection

from .. import rawstore
from ..models import ZSTD_LEVEL, Trace

CHUNK = 1024 * 1024  # bytes read from an upload at a time
SPOOL_MEMORY = 4 * 1024 * 1024  # a received or packed file past this goes to disk
WRITE_CHUNK = 8 * 1024 * 1024  # bytes of packed raw sent to PostgreSQL in one statement
RAW_IN_MEMORY = 8 * 1024 * 1024  # a bigger trace is unpacked into a temporary file
RAW_CHUNK = 4 * 1024 * 1024  # bytes of `Trace.raw` read from PostgreSQL at a time


@dataclass(slots=True)
class Received:
    """An upload read to its end: a file positioned at its start, its size and SHA-256;
    `owned`: the file is a copy made here, closed by close()."""

    file: IO[bytes]
    size: int
    sha256: str
    owned: bool = False

    def close(self) -> None:
        if self.owned:
            self.file.close()


@dataclass(slots=True)
class Packed:
    """The bytes as `Trace.raw` stores them (`raw_encoding`), in a file at its start."""

    file: IO[bytes]
    size: int
    encoding: str


def receive(source: Any, limit: int) -> Received | None:
    """Read an upload to its end (`source` has read(n); an uploaded file, a file on disk, a
    request), hashing it; None, with nothing more read, once it grows past `limit` bytes.

    A source that can seek (a file on disk, Django's uploaded files) is hashed where it is
    and rewound; any other is copied into a temporary file as it is read.
    """
    digest = hashlib.sha256()
    size = 0
    seekable = callable(getattr(source, "seekable", None)) and source.seekable()
    out = source if seekable else tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
    start = source.tell() if seekable else 0
    while chunk := source.read(min(CHUNK, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            if not seekable:
                out.close()
            return None
        digest.update(chunk)
        if not seekable:
            out.write(chunk)
    out.seek(start)
    return Received(out, size, digest.hexdigest(), owned=not seekable)


def pack(received: Received) -> Packed:
    """Compress a received file as `models.pack_raw` does (zstd at ZSTD_LEVEL, its size in
    the frame), into a temporary file; the received file itself when that saves nothing."""
    start = received.file.tell()
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115 - the caller's
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    _, written = compressor.copy_stream(
        received.file, out, size=received.size, read_size=CHUNK, write_size=CHUNK
    )
    if written < received.size:
        out.seek(0)
        return Packed(out, written, "zstd")  # type: ignore[arg-type]
    out.close()
    received.file.seek(start)
    return Packed(received.file, received.size, "")


def write(trace_id: int, packed: Packed) -> None:
    """Put packed bytes into the (empty) `Trace.raw` of a row inserted in the current
    transaction, WRITE_CHUNK bytes a statement.

    The statements bind the bytes as binary parameters on a cursor of their own (Django's
    cursor quotes parameters into the query text, which would double them as hex). A trace
    over WRITE_CHUNK takes one statement more per slice, each appending to the column.
    """
    table = Trace._meta.db_table
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # server-side binding
        first = True
        while chunk := packed.file.read(WRITE_CHUNK):
            value = "%b" if first else f"{table}.raw || %b"
            cursor.execute(f"UPDATE {table} SET raw = {value} WHERE id = %s", [chunk, trace_id])
            first = False


def packed_chunks(trace: Trace) -> Iterator[bytes]:
    """Yield the trace's bytes as stored (compressed or not), a slice at a time: from
    `Trace.raw` in RAW_CHUNK slices, or from its object outside the database."""
    if trace.raw_key:
        with rawstore.reader(trace.raw_key) as stored:
            while chunk := stored.read(RAW_CHUNK):
                yield chunk
        return
    table = Trace._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT octet_length(raw) FROM {table} WHERE id = %s", [trace.pk])
        row = cursor.fetchone()
        size = (row[0] or 0) if row else 0
        for start in range(0, size, RAW_CHUNK):
            cursor.execute(
                f"SELECT substring(raw FROM %s FOR %s) FROM {table} WHERE id = %s",
                [start + 1, RAW_CHUNK, trace.pk],
            )
            yield bytes(cursor.fetchone()[0])


def chunks(trace: Trace) -> Iterator[bytes]:
    """Yield the bytes exactly as received, unpacked as they are read (`Trace.raw_bytes`
    without holding them whole)."""
    if trace.raw_encoding not in ("", "zstd"):
        raise ValueError(f"unknown raw encoding {trace.raw_encoding!r}")
    if trace.raw_encoding == "":
        yield from packed_chunks(trace)
        return
    # A reader's output, CHUNK at a time, is bounded however well the bytes compressed.
    packed = io.BufferedReader(_IterReader(packed_chunks(trace)), CHUNK)
    with zstandard.ZstdDecompressor().stream_reader(packed, read_size=CHUNK) as unpacked:
        while chunk := unpacked.read(CHUNK):
            yield chunk


class _IterReader(io.RawIOBase):
    """A file that reads the chunks an iterator yields."""

    def __init__(self, parts: Iterator[bytes]) -> None:
        self._parts = parts
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = memoryview(next(self._parts, b""))
            if not self._left:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


def open_raw(trace: Trace) -> IO[bytes]:
    """Return the trace's received bytes as a temporary file (in memory up to
    RAW_IN_MEMORY), written as they are unpacked: a 1 GB trace is never held whole."""
    out = tempfile.SpooledTemporaryFile(max_size=RAW_IN_MEMORY)  # noqa: SIM115 - the caller's
    for chunk in chunks(trace):
        out.write(chunk)
    out.seek(0)
    return out  # type: ignore[return-value]
