"""The retention API: the key's project's retention days, storage budget and stored bytes.

Reading needs a `read` key, changing an `admin` key. The endpoints call the same services as
the settings page (`services.retention`, `services.usage`).
"""

from __future__ import annotations

from datetime import date

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from ..services import access, retention, usage
from .router import BODY_ERRORS, ERRORS, ApiKeyAuth

router = Router(auth=ApiKeyAuth(), tags=["retention"])
DAYS = Field(None, ge=1, le=retention.MAX_DAYS, description="days kept; null = for ever")


class StorageOut(Schema):
    day: date | None = Field(description="when last measured (the hourly retention pass)")
    raw_bytes: int
    step_bytes: int
    finding_bytes: int
    growth_per_day: dict[str, float | None] = Field(
        description="bytes per day over up to the last 7 days, per kind and total"
    )


class RetentionOut(Schema):
    raw_retention_days: int | None
    step_retention_days: int | None
    run_retention_days: int | None
    storage_budget_bytes: int | None
    storage: StorageOut


class RetentionIn(Schema):
    raw_retention_days: int | None = DAYS
    step_retention_days: int | None = DAYS
    run_retention_days: int | None = DAYS
    storage_budget_bytes: int | None = Field(None, ge=1, le=2**63 - 1)


def _out(project) -> dict:
    figures = usage.figures(project)
    day = figures.latest
    return {
        **{f: getattr(project, f) for f in (*retention.SETTINGS, "storage_budget_bytes")},
        "storage": {
            "day": day.day if day else None,
            **{kind: getattr(day, kind) if day else 0 for kind in usage.KINDS},
            "growth_per_day": figures.growth,
        },
    }


@router.get("/retention", response={200: RetentionOut, **ERRORS}, summary="Retention and storage")
def get_retention(request: HttpRequest):
    """The project's retention days, storage budget, stored bytes and their growth per day."""
    request.auth.require(access.READ, "reading retention")
    return _out(request.auth.project)


@router.put(
    "/retention",
    response={200: RetentionOut, **BODY_ERRORS, **ERRORS},
    summary="Set retention and the storage budget",
)
def put_retention(request: HttpRequest, payload: RetentionIn):
    """Set every value (a field left out or null means for ever, or no budget). Runs are
    kept at least as long as their steps and raw bytes."""
    request.auth.require(access.CHANGE_RETENTION)
    try:
        project = retention.save_settings(request.auth.project, payload.dict())
    except retention.SettingsInvalid as exc:
        raise HttpError(422, str(exc)) from exc
    return _out(project)
