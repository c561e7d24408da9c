"""The alerts API (django-ninja Router): the key's project's channels, rules and delivery log.

Reading needs a `read` key, changing an `admin` key. Secrets are never returned: a channel
shows its `hint` only, and a webhook's signing secret is in the answer that created it (or
set a new one), once. Another project's channel or rule is 404. The endpoints call the same
services as the settings page (`services.channels`, `services.alerts`, `services.delivery`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.errors import HttpError

from ..models import AlertRule, Channel, Delivery
from ..services import access, alerts, channels, delivery
from .router import BODY_ERRORS, ERRORS, MAX_ID, ApiKeyAuth

router = Router(auth=ApiKeyAuth(), tags=["alerts"])

CHANNEL_ID = Path(..., ge=1, le=MAX_ID, description="a channel id")
RULE_ID = Path(..., ge=1, le=MAX_ID, description="an alert rule id")
Kind = Literal["webhook", "slack", "email"]
RuleKind = Literal["run", "issue", "rate", "digest"]
Metric = Literal["", "flagged_share", "waste_cost_per_hour", "waste_tokens_per_hour", "stop_findings_per_hour"]  # fmt: skip
Names = list[str]


class ChannelOut(Schema):
    id: int
    name: str
    kind: Kind
    hint: str = Field(description="what is shown of the URL and secret: host and last characters")
    recipients: list[str]
    enabled: bool
    created_at: datetime


class ChannelCreated(ChannelOut):
    secret: str = Field(
        description="a webhook's signing secret, returned only here (empty for other kinds)"
    )


class ChannelIn(Schema):
    name: str = Field(..., min_length=1, max_length=100)
    kind: Kind
    url: str = Field("", max_length=2000, description="webhook or Slack incoming-webhook URL")
    secret: str = Field("", max_length=200, description="webhook signing secret; blank = generated")
    recipients: list[str] = Field([], max_length=20, description="email addresses")
    enabled: bool = True


class ChannelPatch(Schema):
    name: str | None = Field(None, min_length=1, max_length=100)
    url: str | None = Field(None, max_length=2000)
    secret: str | None = Field(None, max_length=200, description="a new signing secret")
    recipients: list[str] | None = Field(None, max_length=20)
    enabled: bool | None = None


class RuleIn(Schema):
    name: str = Field(..., min_length=1, max_length=100)
    kind: RuleKind
    channel_ids: list[int] = Field([], max_length=50)
    enabled: bool = True
    severity: Literal["warn", "stop"] = "stop"
    tools: Names = Field([], max_length=50, description="run: tool names or globs (any)")
    agents: Names = Field([], max_length=50, description="run: agent names (any)")
    detectors: Names = Field([], max_length=50, description="run: detector names (any)")
    max_per_hour: int = Field(10, ge=0, le=10_000, description="run, issue: 0 = no cap")
    metric: Metric = ""
    window_minutes: int = Field(60, ge=1, le=7 * 24 * 60)
    warn_threshold: float | None = None
    alert_threshold: float | None = None
    no_data: Literal["ok", "alert", "keep"] = "ok"
    hour: int = Field(9, ge=0, le=23, description="digest: hour in the project's time zone")


# The rule fields a PATCH may set to null; any other null is refused (a field left out stays).
NULLABLE_RULE_FIELDS = {"warn_threshold", "alert_threshold"}


class RulePatch(Schema):
    name: str | None = Field(None, min_length=1, max_length=100)
    channel_ids: list[int] | None = Field(None, max_length=50)
    enabled: bool | None = None
    severity: Literal["warn", "stop"] | None = None
    tools: Names | None = Field(None, max_length=50)
    agents: Names | None = Field(None, max_length=50)
    detectors: Names | None = Field(None, max_length=50)
    max_per_hour: int | None = Field(None, ge=0, le=10_000)
    metric: Metric | None = None
    window_minutes: int | None = Field(None, ge=1, le=7 * 24 * 60)
    warn_threshold: float | None = None
    alert_threshold: float | None = None
    no_data: Literal["ok", "alert", "keep"] | None = None
    hour: int | None = Field(None, ge=0, le=23)


class RuleOut(Schema):
    id: int
    name: str
    kind: RuleKind
    channel_ids: list[int]
    enabled: bool
    severity: str
    tools: list[str]
    agents: list[str]
    detectors: list[str]
    max_per_hour: int
    metric: str
    window_minutes: int
    warn_threshold: float | None
    alert_threshold: float | None
    no_data: str
    state: str = Field(description="rate: the last level (ok, warn, alert)")
    state_changed_at: datetime | None
    hour: int
    created_at: datetime


class DeliveryOut(Schema):
    id: int
    alert_id: int
    alert_key: str
    title: str
    rule_id: int | None
    rule: str = Field(description="the rule's name; empty for a channel test")
    channel_id: int
    channel: str
    attempt: int
    status: Literal["sent", "failed", "retrying", "gave_up"]
    response_code: int | None
    error: str
    payload_sha256: str
    created_at: datetime


def _project(request: HttpRequest):  # type: ignore[no-untyped-def]
    return request.auth.project


def _admin(request: HttpRequest, doing: str):  # type: ignore[no-untyped-def]
    request.auth.require(access.CHANGE_ALERTS, doing)
    return _project(request)


def _channel(project, channel_id: int) -> Channel:  # type: ignore[no-untyped-def]
    return get_object_or_404(project.channels, pk=channel_id)


def _channel_out(channel: Channel, secret: str | None = None) -> dict:
    out = {
        "id": channel.pk,
        "name": channel.name,
        "kind": channel.kind,
        "hint": channel.hint,
        "recipients": channel.recipients,
        "enabled": channel.enabled,
        "created_at": channel.created_at,
    }
    return out if secret is None else out | {"secret": secret}


def _rule_out(rule: AlertRule) -> dict:
    fields = {field: getattr(rule, field) for field in alerts.RULE_FIELDS}
    return fields | {
        "id": rule.pk,
        "channel_ids": sorted(c.pk for c in rule.channels.all()),
        "state": rule.state,
        "state_changed_at": rule.state_changed_at,
        "created_at": rule.created_at,
    }


def _delivery_out(row: Delivery) -> dict:
    rule = row.alert.rule
    return {
        "id": row.pk,
        "alert_id": row.alert_id,
        "alert_key": row.alert.key,
        "title": str(row.alert.payload.get("title", "")),
        "rule_id": rule.pk if rule else None,
        "rule": rule.name if rule else "",
        "channel_id": row.channel_id,
        "channel": row.channel.name,
        "attempt": row.attempt,
        "status": row.status,
        "response_code": row.response_code,
        "error": row.error,
        "payload_sha256": row.payload_sha256,
        "created_at": row.created_at,
    }


@router.get("/channels", response={200: list[ChannelOut], **ERRORS})
def list_channels(request: HttpRequest):
    """The project's alert channels (secrets never included)."""
    return [_channel_out(c) for c in _project(request).channels.all()]


@router.post("/channels", response={201: ChannelCreated, **BODY_ERRORS, **ERRORS})
def create_channel(request: HttpRequest, payload: ChannelIn):
    """Add a channel. URLs must be http(s) and public (unless the server allows private
    webhooks); a Slack URL starts with https://hooks.slack.com/. A webhook's signing secret
    (given, or generated) is returned in this answer only."""
    project = _admin(request, "changing alert channels")
    data = channels.ChannelData(
        name=payload.name, kind=payload.kind, url=payload.url, secret=payload.secret or None,
        recipients=payload.recipients, enabled=payload.enabled,
    )  # fmt: skip
    try:
        channel, secret = channels.create_channel(project, data)
    except channels.ChannelInvalid as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, _channel_out(channel, secret))


@router.patch("/channels/{channel_id}", response={200: ChannelCreated, **BODY_ERRORS, **ERRORS})
def update_channel(request: HttpRequest, payload: ChannelPatch, channel_id: int = CHANNEL_ID):
    """Change a channel; fields left out stay. `secret` is returned only when one was set."""
    channel = _channel(_admin(request, "changing alert channels"), channel_id)
    try:
        secret = channels.update_channel(channel, channels.ChannelData(**payload.dict()))
    except channels.ChannelInvalid as exc:
        raise HttpError(422, str(exc)) from None
    return _channel_out(channel, secret)


@router.delete("/channels/{channel_id}", response={204: None, **ERRORS})
def delete_channel(request: HttpRequest, channel_id: int = CHANNEL_ID):
    """Delete a channel and its delivery log."""
    channels.delete_channel(_channel(_admin(request, "changing alert channels"), channel_id))
    return Status(204, None)


@router.post("/channels/{channel_id}/test", response={200: DeliveryOut, **ERRORS})
def test_channel(request: HttpRequest, channel_id: int = CHANNEL_ID):
    """Send a test message now (one attempt) and return its delivery log row."""
    channel = _channel(_admin(request, "testing alert channels"), channel_id)
    return _delivery_out(delivery.send_test(channel))


@router.get("/alert-rules", response={200: list[RuleOut], **ERRORS})
def list_rules(request: HttpRequest):
    """The project's alert rules."""
    return [_rule_out(r) for r in _project(request).alert_rules.prefetch_related("channels")]


@router.post("/alert-rules", response={201: RuleOut, **BODY_ERRORS, **ERRORS})
def create_rule(request: HttpRequest, payload: RuleIn):
    """Add a rule: `run` (a run reaches `severity`, optionally only for some tools, agents or
    detectors; at most `max_per_hour`), `issue` (a loop issue is new or regressed), `rate`
    (`metric` over `window_minutes` against `warn_threshold` / `alert_threshold`, `no_data`
    handling) or `digest` (daily at `hour`)."""
    project = _admin(request, "changing alert rules")
    values = payload.dict(exclude={"channel_ids"})
    try:
        rule = alerts.save_rule(project, values, channel_ids=payload.channel_ids)
    except alerts.RuleInvalid as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, _rule_out(rule))


@router.patch("/alert-rules/{rule_id}", response={200: RuleOut, **BODY_ERRORS, **ERRORS})
def update_rule(request: HttpRequest, payload: RulePatch, rule_id: int = RULE_ID):
    """Change a rule; fields left out stay (its kind never changes)."""
    project = _admin(request, "changing alert rules")
    rule = get_object_or_404(project.alert_rules, pk=rule_id)
    values = payload.dict(exclude_unset=True)
    nulls = sorted(name for name, value in values.items() if value is None)
    if refused := [name for name in nulls if name not in NULLABLE_RULE_FIELDS]:
        raise HttpError(422, f"{', '.join(refused)}: may not be null (leave it out to keep it)")
    channel_ids = values.pop("channel_ids", None)
    try:
        rule = alerts.save_rule(project, values, rule=rule, channel_ids=channel_ids)
    except alerts.RuleInvalid as exc:
        raise HttpError(422, str(exc)) from None
    return _rule_out(rule)


@router.delete("/alert-rules/{rule_id}", response={204: None, **ERRORS})
def delete_rule(request: HttpRequest, rule_id: int = RULE_ID):
    """Delete a rule and its alerts."""
    project = _admin(request, "changing alert rules")
    alerts.delete_rule(get_object_or_404(project.alert_rules, pk=rule_id))
    return Status(204, None)


@router.get("/deliveries", response={200: list[DeliveryOut], **ERRORS})
def list_deliveries(
    request: HttpRequest,
    limit: int = Query(100, ge=1, le=500),  # noqa: B008 - ninja's idiom
    status: Literal["sent", "failed", "retrying", "gave_up", ""] = "",
):
    """The project's latest delivery attempts, newest first."""
    rows = delivery.log_of(_project(request))
    if status:
        rows = rows.filter(status=status)
    return [_delivery_out(row) for row in rows[:limit]]
