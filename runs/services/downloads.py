"""A trace's raw bytes as a download, for the page and the API alike."""

from __future__ import annotations

from django.http import HttpResponse

from ..models import Trace


def raw_response(trace: Trace) -> HttpResponse:
    """Return a download response for a trace's bytes exactly as received."""
    response = HttpResponse(bytes(trace.raw), content_type="application/octet-stream")
    filename = "".join(c for c in trace.name if c.isalnum() or c in "._- ")[:100] or "trace"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
