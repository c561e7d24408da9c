"""A per-key rate limit shared by all web workers: a token bucket per key in PostgreSQL.

One upsert per request (`take_token`): loopboard runs several gunicorn workers, possibly on
several machines, and the database is the one store they all share without another service
(Django's default local-memory cache is per process, and Redis is only the Celery broker,
which a deployment may swap for RabbitMQ). One small row per key, updated in a single
statement, costs well under a millisecond.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.db import connection
from django.utils import timezone

from ..models import ApiKey

LAST_USED_EVERY_SECONDS = 60  # last_used_at is written at most this often per key


class RateLimited(Exception):
    """A key that has used up its requests for now; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limit exceeded; retry after {retry_after} s")
        self.retry_after = retry_after


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
