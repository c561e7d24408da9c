"""Accepting an uploaded trace file: the one set of checks the upload page, `POST /api/traces`
and `manage.py ingest` share, in front of `ingest.store_trace`.

An upload is refused, with a sentence saying why and the HTTP status an entry point answers
with it, when its format is unknown (400), when it is empty (400), or when it is over
MAX_UPLOAD_BYTES (413). A file whose size is known is refused before it is read; one whose
size is not is read to one byte past the limit at most. A file or a request body is read a
chunk at a time into a temporary file (`raw.receive`), never whole into memory.
"""

from __future__ import annotations

import io
from typing import IO, Any

from django.conf import settings

from ..models import Project, Trace
from . import ingest, raw

MAX_VERSION_CHARS = 100  # Trace.agent_version


class UploadRefused(ValueError):
    """An upload that was not stored; `status` is what an HTTP entry point answers (400 for
    bad input, 413 for a file over the limit)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def accept(
    project: Project,
    data: bytes | IO[bytes] | Any,
    *,
    name: str,
    format: str = "",
    version: str = "",
    size: int | None = None,
    source: str = Trace.Source.UPLOAD,
    user=None,
) -> tuple[Trace, bool]:
    """Check an upload and store it as a trace, queued for import; return (trace, created),
    the same bytes again being the same trace. `data` is bytes, or anything with read(n) (a
    file, an uploaded file, a request body), read here a chunk at a time, never whole.
    `size` is its size when the caller knows it. Raises UploadRefused."""
    limit = settings.MAX_UPLOAD_BYTES
    if format and format not in ingest.formats():
        known = ", ".join(ingest.formats())
        raise UploadRefused(f"{name}: unknown format {format!r} (known: {known})")
    if isinstance(data, bytes):  # read like a file: one path for every caller
        data, size = io.BytesIO(data), len(data)
    if size is not None and size > limit:
        raise UploadRefused(f"{name}: {size} bytes is over the limit of {limit} bytes", 413)
    received = raw.receive(data, limit)
    if received is None:  # a stream that did not say its size
        raise UploadRefused(f"{name} is over the limit of {limit} bytes", 413)
    try:
        if not received.size:
            raise UploadRefused(f"{name}: empty file; nothing to import")
        return ingest.store_trace(
            project, received, name=name, format=format, source=source, user=user,
            version=version[:MAX_VERSION_CHARS],
        )  # fmt: skip
    finally:
        received.close()
