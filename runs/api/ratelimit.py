"""A per-key rate limit shared by all web workers: a token bucket per key in PostgreSQL.

One UPDATE per request (`take_token`; an INSERT first for a key's first request): loopboard runs several gunicorn workers, possibly on
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


# One statement a request: refill by the time elapsed (capped at the burst), then take one
# token when a whole one is there. A refused request takes nothing, so a client that ignores
# Retry-After and keeps asking is served at the key's rate, never shut out for longer. The
# row is locked while it is read (FOR UPDATE), so concurrent requests refill and take in
# turn; it answers the refilled level (>= 1: allowed). The clock is the real time, not the
# transaction's start (`now()`), which stands still in a long transaction.
_BUCKET_SQL = """
WITH clock AS (SELECT clock_timestamp() AS at)
UPDATE runs_ratebucket AS b SET
    tokens = CASE WHEN r.refill >= 1 THEN r.refill - 1 ELSE r.refill END,
    updated_at = r.at
FROM (
    SELECT key_id, clock.at,
           LEAST(%(burst)s, tokens + EXTRACT(EPOCH FROM (clock.at - updated_at)) * %(rate)s)
               AS refill
    FROM runs_ratebucket, clock WHERE key_id = %(key)s FOR UPDATE OF runs_ratebucket
) AS r
WHERE b.key_id = r.key_id
RETURNING r.refill
"""
# A key's first request: its bucket starts full (a racing first request of the same key
# finds the row there and goes on to the UPDATE).
_NEW_BUCKET_SQL = """
INSERT INTO runs_ratebucket (key_id, tokens, updated_at)
VALUES (%(key)s, %(burst)s, clock_timestamp())
ON CONFLICT (key_id) DO NOTHING
"""


def take_token(key: ApiKey) -> None:
    """Take one request from the key's bucket or raise RateLimited; touch last_used_at."""
    rate = float(settings.LOOPBOARD_API_RATE)
    burst = float(settings.LOOPBOARD_API_BURST)
    params = {"key": key.pk, "burst": burst, "rate": rate}
    with connection.cursor() as cursor:
        cursor.execute(_BUCKET_SQL, params)
        row = cursor.fetchone()
        if row is None:  # no bucket yet
            cursor.execute(_NEW_BUCKET_SQL, params)
            cursor.execute(_BUCKET_SQL, params)
            row = cursor.fetchone()
    (tokens,) = row
    if tokens < 1:
        wait = (1 - tokens) / rate if rate > 0 else 60
        raise RateLimited(max(1, math.ceil(wait)))
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > (
        LAST_USED_EVERY_SECONDS
    ):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
