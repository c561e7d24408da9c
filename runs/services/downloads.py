"""A trace's raw bytes as a download, for the page and the API alike."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse

from ..models import Trace
from . import raw

log = logging.getLogger(__name__)


def raw_response(trace: Trace) -> HttpResponseBase:
    """Return a download response for a trace's bytes exactly as received, streamed as they
    are unpacked (never whole in memory); 410 Gone once retention has removed them."""
    if trace.raw_expired_at is not None:
        return HttpResponse(
            f"This trace's raw bytes expired on {trace.raw_expired_at:%Y-%m-%d} (retention).",
            status=410,
            content_type="text/plain; charset=utf-8",
        )
    response = StreamingHttpResponse(_logged(trace), content_type="application/octet-stream")
    response["Content-Length"] = str(trace.size)
    filename = "".join(c for c in trace.name if c.isalnum() or c in "._- ")[:100] or "trace"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _logged(trace: Trace) -> Iterator[bytes]:
    """The trace's bytes; a failure partway is logged and ends the answer short of its
    Content-Length, which every HTTP client reports as an incomplete body."""
    sent = 0
    try:
        for chunk in raw.chunks(trace):
            sent += len(chunk)
            yield chunk
    except Exception:
        log.exception(
            "download of trace %s failed after %s of %s bytes", trace.pk, sent, trace.size
        )
        raise
