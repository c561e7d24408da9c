"""Request middleware for the API and the OTLP receiver: body limits and database outages.

Errors on these paths answer in the path's own terms: `{"detail": ...}` JSON under /api/,
a `google.rpc.Status` in the request's encoding under /v1/ (what OTLP exporters read).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from . import otlp

log = logging.getLogger(__name__)

API_PREFIXES = ("/api/", "/v1/")
OUTAGE_RETRY_AFTER = "5"  # seconds; OTLP exporters and push retry a 503 after this


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
    """For API and OTLP requests: refuse a body before it is read (413 when its declared size
    is over MAX_UPLOAD_BYTES, 411 when it is chunked with no length, which would read as
    empty), and answer what a view did not handle in the path's terms (`process_exception`)."""

    def __init__(self, get_response) -> None:  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIXES):
            refused = self.refusal(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    def refusal(self, request: HttpRequest) -> HttpResponse | None:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not length:
            return error_response(request, "send the body with a Content-Length", 411)
        if length > settings.MAX_UPLOAD_BYTES:
            message = (
                f"request body of {length} bytes is over the limit of "
                f"{settings.MAX_UPLOAD_BYTES} bytes"
            )
            return error_response(request, message, 413)
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
