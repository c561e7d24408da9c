"""Request middleware for the API and the OTLP receiver: body limits and database outages.

Errors on these paths answer in the path's own terms: `{"detail": ...}` JSON under /api/,
a `google.rpc.Status` in the request's encoding under /v1/ (what OTLP exporters read).
"""

from __future__ import annotations

import logging
import tempfile
from typing import IO

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from . import otlp

log = logging.getLogger(__name__)

API_PREFIXES = ("/api/", "/v1/")
# What a guard or a live run sends (a few steps at a time, parsed whole as JSON in the web
# process) is held to LOOPBOARD_MAX_LIVE_BYTES instead of the upload limit.
LIVE_PREFIXES = ("/api/live/", "/api/check")
OUTAGE_RETRY_AFTER = "5"  # seconds; OTLP exporters and push retry a 503 after this
SPOOL_MEMORY_BYTES = 1024 * 1024  # a chunked body past this goes to a temporary file
READ_BYTES = 64 * 1024  # read a chunked body this much at a time


def error_response(request: HttpRequest, message: str, status: int, **headers: str) -> HttpResponse:
    """Return an error in the terms of the request's path (API JSON or OTLP Status)."""
    if request.path.startswith("/v1/"):
        return otlp.error_response(request, message, status, **headers)
    response = JsonResponse({"detail": message}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def outage_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: the database is not answering, the client should retry."""
    message = "the database is not answering; retry shortly"
    return error_response(request, message, 503, **{"Retry-After": OUTAGE_RETRY_AFTER})


class ApiMiddleware:
    """For API and OTLP requests: refuse a body over its limit (`body_limit`) before it is
    read in full (413 when its declared size is over, or when a chunked body grows past it
    while it is read), and answer what a view did not handle in the path's terms (`process_exception`).

    A chunked body (no Content-Length: the OpenTelemetry JS exporter always streams) is read
    here into a temporary file, a chunk at a time, and the request then reads it with its
    size as Content-Length, so views and the multipart parser see an ordinary body. That
    needs a server that undoes the chunking (gunicorn says so with `wsgi.input_terminated`);
    under one that does not, a chunked body is refused with 411.
    """

    def __init__(self, get_response) -> None:  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIXES):
            return self.get_response(request)
        refused = self.refusal(request)
        if refused is not None:
            return refused
        spooled: IO[bytes] | None = None
        if is_chunked(request):
            spooled = spool_body(request)
            if spooled is None:
                return too_large(request)
        try:
            return self.get_response(request)
        finally:
            if spooled is not None:
                spooled.close()

    def refusal(self, request: HttpRequest) -> HttpResponse | None:
        if is_chunked(request):
            if not request.META.get("wsgi.input_terminated"):
                message = "this server cannot read a chunked body: send it with a Content-Length"
                return error_response(request, message, 411)
            return None
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > body_limit(request):
            return too_large(request, length)
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Answer an error the views did not handle in the path's own terms: 503 while the
        database does not answer, else a logged 500 (never Django's HTML page)."""
        if not request.path.startswith(API_PREFIXES):
            return None
        if isinstance(exception, OperationalError | InterfaceError):
            return outage_response(request)
        log.exception("%s %s failed", request.method, request.path, exc_info=exception)
        return error_response(request, "internal error; it is logged", 500)


def is_chunked(request: HttpRequest) -> bool:
    """Whether the body comes chunked, with no Content-Length."""
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return chunked and not request.META.get("CONTENT_LENGTH")


def body_limit(request: HttpRequest) -> int:
    """The most bytes a request body on this path may hold: LOOPBOARD_MAX_LIVE_BYTES for the
    live-run and guard endpoints, MAX_UPLOAD_BYTES for the rest."""
    if request.path.startswith(LIVE_PREFIXES):
        return settings.LOOPBOARD_MAX_LIVE_BYTES
    return settings.MAX_UPLOAD_BYTES


def too_large(request: HttpRequest, length: int | None = None) -> HttpResponse:
    """413: the body is (or grew) over its limit."""
    limit = body_limit(request)
    size = f"of {length} bytes " if length is not None else ""
    return error_response(request, f"request body {size}is over the limit of {limit} bytes", 413)


def spool_body(request: HttpRequest) -> IO[bytes] | None:
    """Read a chunked body into a temporary file and make it the request's body (its size as
    Content-Length); None, with nothing more read, once it grows past its limit."""
    limit = body_limit(request)
    source = request.META["wsgi.input"]
    spooled = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
    size = 0
    while chunk := source.read(min(READ_BYTES, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            spooled.close()
            return None
        spooled.write(chunk)
    spooled.seek(0)
    request.META["CONTENT_LENGTH"] = str(size)
    request._stream = spooled  # type: ignore[attr-defined] # what request.read() reads
    return spooled
