"""`GET /api/labels`: the key's project's labels as JSON lines, streamed (django-ninja Router).

Each line is one label that counts (the latest judgement of a finding), oldest first, as
`services.labels.export` writes it; `loopboard labels export` saves them and
`loopboard scan --labels FILE` scores a scan against them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from ninja import Query, Router

from ..services import labels
from .router import ERRORS, ApiKeyAuth

router = Router(auth=ApiKeyAuth(), tags=["labels"])

JSONL = "application/x-ndjson"
SINCE = Query(None, description="labels made at or after this time (ISO 8601; UTC if no zone)")
UNTIL = Query(None, description="labels made before this time (ISO 8601; UTC if no zone)")


def _aware(value: datetime | None) -> datetime | None:
    """A time without a zone is UTC."""
    if value is None or timezone.is_aware(value):
        return value
    return value.replace(tzinfo=UTC)


def _lines(rows: Iterator[dict]) -> Iterator[bytes]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False).encode() + b"\n"


@router.get(
    "/labels",
    response=ERRORS,
    openapi_extra={
        "responses": {
            200: {
                "description": "one JSON object per line, one line per label",
                "content": {JSONL: {"schema": {"type": "string"}}},
            }
        }
    },
)
def export_labels(
    request: HttpRequest,
    since: datetime | None = SINCE,
    until: datetime | None = UNTIL,
) -> StreamingHttpResponse:
    """The project's labels that count, made in [since, until), oldest first, as JSONL:
    run id and external id, the finding's detector, tool, signature and steps, the verdict,
    the reason, who, when and the policy version."""
    rows = labels.export(request.auth.project, since=_aware(since), until=_aware(until))
    response = StreamingHttpResponse(_lines(rows), content_type=JSONL)
    response["Content-Disposition"] = 'inline; filename="labels.jsonl"'
    return response
