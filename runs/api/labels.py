"""`GET /api/labels`: the key's project's labels as JSON lines, streamed (django-ninja Router).

Each line is one label that counts (the latest judgement of a finding), oldest first, as
`services.labels.export` writes it (a stream that fails partway ends with an `{"error": ...}`
line instead); `loopboard labels export` saves them and
`loopboard scan --labels FILE` scores a scan against them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import chain

from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from ninja import Query, Router
from ninja.errors import HttpError

from ..services import labels
from .router import ERRORS, ApiKeyAuth

log = logging.getLogger(__name__)
router = Router(auth=ApiKeyAuth(), tags=["labels"])

JSONL = "application/x-ndjson"
SINCE = Query(None, description="labels made at or after this time (ISO 8601; UTC if no zone)")
UNTIL = Query(None, description="labels made before this time (ISO 8601; UTC if no zone)")


def _utc(value: datetime | None, name: str) -> datetime | None:
    """The time in UTC (a time without a zone is UTC); a 422 naming the parameter when it
    falls outside the years 1 to 9999 once in UTC. PostgreSQL holds zone offsets up to 15:59
    only, so the query never sees the offset as given."""
    if value is None:
        return None
    if timezone.is_naive(value):
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise HttpError(422, f"{name}: {value.isoformat()} is out of range in UTC") from None


def _lines(rows: Iterator[dict]) -> Iterator[bytes]:
    """The rows as JSON lines. The first row is read before the answer starts (see
    `export_labels`); a failure after that ends the stream with an `{"error": ...}` line,
    which no label line holds, and is logged."""
    try:
        for row in rows:
            yield json.dumps(row, ensure_ascii=False).encode() + b"\n"
    except Exception:
        log.exception("the labels export failed partway")
        yield json.dumps({"error": "the export failed partway; it is logged"}).encode() + b"\n"


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
    rows = labels.export(
        request.auth.project, since=_utc(since, "since"), until=_utc(until, "until")
    )
    # The query runs at the first row: an error there is still an ordinary error answer.
    first = next(rows, None)
    head = [] if first is None else [first]
    response = StreamingHttpResponse(_lines(chain(head, rows)), content_type=JSONL)
    response["Content-Disposition"] = 'inline; filename="labels.jsonl"'
    return response
