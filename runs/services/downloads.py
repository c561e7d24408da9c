"""A trace's raw bytes as a download, for the page and the API alike."""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse

from ..models import Trace
from . import raw


def raw_response(trace: Trace) -> HttpResponseBase:
    """Return a download response for a trace's bytes exactly as received, streamed as they
    are unpacked (never whole in memory); 410 Gone once retention has removed them."""
    if trace.raw_expired_at is not None:
        return HttpResponse(
            f"This trace's raw bytes expired on {trace.raw_expired_at:%Y-%m-%d} (retention).",
            status=410,
            content_type="text/plain; charset=utf-8",
        )
    response = StreamingHttpResponse(raw.chunks(trace), content_type="application/octet-stream")
    response["Content-Length"] = str(trace.size)
    filename = "".join(c for c in trace.name if c.isalnum() or c in "._- ")[:100] or "trace"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
