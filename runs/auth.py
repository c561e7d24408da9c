"""API keys: Bearer authentication, a per-key rate limit shared by all web workers, body limits.

The rate limit is a token bucket per key kept in PostgreSQL (one upsert per request, see
`take_token`): loopboard runs several gunicorn workers, possibly on several machines, and the
database is the one store they all share without another service (Django's default local-memory
cache is per process, and Redis is only the Celery broker, which a deployment may swap for
RabbitMQ). One small row per key, updated in a single statement, costs well under a millisecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from .importers.base import json_depth_ok as json_depth  # noqa: F401 - used by the API
from .models import ApiKey, Project

API_PREFIXES = ("/api/", "/v1/")
LAST_USED_EVERY_SECONDS = 60  # last_used_at is written at most this often per key


class AuthError(Exception):
    """A request whose key is missing, unknown (401) or revoked (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class RateLimited(Exception):
    """A key that has used up its requests for now; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limit exceeded; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class KeyAuth:
    """Who is calling: the key and the project it acts on."""

    key: ApiKey
    project: Project


def bearer_token(request: HttpRequest) -> str:
    """Return the token of an `Authorization: Bearer <key>` header, or ''."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def authenticate_key(token: str) -> KeyAuth:
    """Return the key and project for a plain key, or raise AuthError / RateLimited."""
    if not token:
        raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
    key = (
        ApiKey.objects.select_related("project")
        .filter(key_hash=ApiKey.hash(token))
        .only("id", "name", "revoked_at", "last_used_at", "project")
        .first()
    )
    if key is None:
        raise AuthError("invalid API key")
    if key.revoked_at is not None:
        raise AuthError("this API key was revoked", status=403)
    take_token(key)
    return KeyAuth(key=key, project=key.project)


def authenticate_request(request: HttpRequest) -> KeyAuth:
    """Authenticate a request by its Bearer key and remember the result on the request."""
    auth = authenticate_key(bearer_token(request))
    request.key_auth = auth  # type: ignore[attr-defined]
    return auth


# One statement: refill by the time elapsed (capped at the burst), then take one token. A
# request is allowed when a whole token was there (the result is >= 0); a refused request
# leaves the bucket at no less than -1, so a client that keeps hammering waits a little
# longer while one that honours Retry-After is served. `now()` is the statement's time.
_BUCKET_SQL = """
INSERT INTO runs_ratebucket AS b (key_id, tokens, updated_at)
VALUES (%(key)s, %(burst)s - 1, now())
ON CONFLICT (key_id) DO UPDATE SET
    tokens = GREATEST(
        LEAST(%(burst)s, b.tokens + EXTRACT(EPOCH FROM (now() - b.updated_at)) * %(rate)s) - 1,
        -1
    ),
    updated_at = now()
RETURNING tokens
"""


def take_token(key: ApiKey) -> None:
    """Take one request from the key's bucket or raise RateLimited; touch last_used_at."""
    rate = float(settings.LOOPBOARD_API_RATE)
    burst = float(settings.LOOPBOARD_API_BURST)
    with connection.cursor() as cursor:
        cursor.execute(_BUCKET_SQL, {"key": key.pk, "burst": burst, "rate": rate})
        (tokens,) = cursor.fetchone()
    if tokens < 0:
        wait = (1 - tokens) / rate if rate > 0 else 60
        raise RateLimited(max(1, math.ceil(wait)))
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > (
        LAST_USED_EVERY_SECONDS
    ):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


class BodyLimitMiddleware:
    """Answer 413 to an API or OTLP request whose declared body is over MAX_UPLOAD_BYTES."""

    def __init__(self, get_response) -> None:  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIXES):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > settings.MAX_UPLOAD_BYTES:
                return JsonResponse(
                    {
                        "detail": f"request body of {length} bytes is over the limit of "
                        f"{settings.MAX_UPLOAD_BYTES} bytes"
                    },
                    status=413,
                )
        return self.get_response(request)
