"""Schemas of the JSON API (django-ninja): every field listed explicitly."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from django.conf import settings
from ninja import Field, Schema
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from ..importers.reading import DEFAULT_LIMITS, clip_json, json_depth_ok


def _bounded(value: Any) -> Any:
    """Refuse JSON values that nest deeper than LOOPBOARD_MAX_JSON_DEPTH."""
    if not json_depth_ok(value, settings.LOOPBOARD_MAX_JSON_DEPTH):
        raise ValueError(f"nests deeper than {settings.LOOPBOARD_MAX_JSON_DEPTH} levels")
    return value


class ErrorOut(Schema):
    """An error: what went wrong, in words."""

    detail: str


class TraceAccepted(Schema):
    """A trace was stored and queued (or was already there: duplicate)."""

    trace_id: int
    status: str
    duplicate: bool
    url: str


class TraceOut(Schema):
    """A stored trace and how its import went."""

    id: int
    name: str
    status: str
    format: str
    declared_format: str
    size: int
    source: str
    error: str
    warnings: list[str]
    skipped_lines: int
    created_at: datetime
    updated_at: datetime
    run_ids: list[int]


class RunOut(Schema):
    """One run in a list: its verdict, stall score and counts."""

    id: int
    name: str
    external_id: str
    format: str
    verdict: str
    stall_score: float
    step_count: int
    tool_call_count: int
    waste_steps: int
    detectors: list[str]
    tools: list[str]
    trace_id: int | None
    created_at: datetime
    analyzed_at: datetime | None


class LiveFindingOut(Schema):
    """A finding: where its loop started, fired and stops, and the message meant for the
    agent (what a live append answers; FindingOut adds what the steps after it cost)."""

    detector: str
    severity: str
    tool: str | None
    signature: str
    seqs: list[int]
    count: int
    threshold: int
    started_at: int | None
    fired_at: int
    stop_at: int | None
    rule: str
    message: str


class FindingOut(LiveFindingOut):
    """One thing the engine found in a run, with the message meant for the agent, and what
    the steps after it cost."""

    tool: str
    waste_steps: int
    waste_tokens: int | None
    waste_cost: float | None
    waste_seconds: float | None


class StoppedCallOut(Schema):
    """A call the live guard answered `stop` for: the agent was told not to make it."""

    tool: str
    args: str  # the arguments as JSON text, cut to 2,000 characters
    before_seq: int  # the step it would have been
    times: int  # how many times it was asked at that point
    message: str
    detectors: list[str]
    first_at: datetime
    last_at: datetime


class UnknownsOut(Schema):
    """How many calls the trace recorded without arguments or a result (never taken for the
    same call or result), and how to make the run's instrumentation record them."""

    calls: int
    args: int
    results: int
    names_only: bool  # most calls carry neither: loops cannot be judged (at most a streak)
    capture_hints: list[str]


class RunDetailOut(RunOut):
    """A run with its summary, findings and the calls the live guard stopped (the latest
    100)."""

    metadata: dict[str, Any]
    started_at: datetime | None
    ended_at: datetime | None
    waste_tokens: int | None
    waste_cost: float | None
    waste_seconds: float | None
    findings: list[FindingOut]
    stopped_calls: list[StoppedCallOut]
    unknowns: UnknownsOut


class StepOut(Schema):
    """One step of a run in the common trace model."""

    seq: int
    kind: str
    source_id: str
    parent_id: str
    lane: str
    tool: str
    args: Any
    result: Any
    status: str
    batch_id: str
    text: str
    started_at: datetime | None
    ended_at: datetime | None
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None
    call_sig: str


class StepPage(Schema):
    """A page of steps; pass `next_from` as `from` for the next page (null at the end)."""

    items: list[StepOut]
    next_from: int | None


class AnalyzeQueued(Schema):
    """A run queued for analysis."""

    run_id: int
    status: str


class PolicyIn(Schema):
    """A project policy, as `loopboard scan --policy` reads it."""

    model_config = ConfigDict(extra="forbid")

    defaults: dict[str, Any] = Field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("defaults", "tools")
    @classmethod
    def check_depth(cls, value: Any) -> Any:
        return _bounded(value)


class PolicyOut(Schema):
    """The project's policy; after a PUT, also how many runs are being re-analyzed."""

    defaults: dict[str, Any]
    tools: dict[str, dict[str, Any]]
    reanalyzed: int | None = None


class CallIn(BaseModel):
    """One earlier step for the live check: a tool call (tool, args, result, status) or a
    message (role + text). A `user` message starts a new turn. (A plain pydantic model: the
    shape check below sees the JSON value itself.)"""

    tool: str | None = None
    args: Any = None
    result: Any = None
    status: str = "ok"
    role: str | None = None
    text: str | None = None
    id: str | None = None
    parent_id: str | None = None
    lane: str | None = None  # the actor (a sub-agent's id) whose call this is; none: the main

    @model_validator(mode="before")
    @classmethod
    def check_shape(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("a call is an object: {tool, args, result, status} or {role, text}")
        if not value.get("tool") and not value.get("role"):
            raise ValueError("a call needs a 'tool', or a message its 'role'")
        return value

    @field_validator("args", "result")
    @classmethod
    def check_depth(cls, value: Any) -> Any:
        return _bounded(value)


class NextCallIn(Schema):
    """The next tool call of an agent: its tool and arguments."""

    tool: str = Field(min_length=1, max_length=200)
    args: Any = None

    @field_validator("args")
    @classmethod
    def check_depth(cls, value: Any) -> Any:
        return _bounded(value)


class CheckIn(NextCallIn):
    """The next tool call, and the run so far: a stored run's id, or the calls themselves."""

    run_id: int | None = Field(None, ge=1, le=2**63 - 1)
    calls: list[CallIn] = Field(default_factory=list, max_length=10_000)


class CheckFindingOut(Schema):
    """A finding the next call would trigger."""

    detector: str
    severity: str
    tool: str | None
    count: int
    threshold: int
    seqs: list[int]
    started_at: int | None
    rule: str
    message: str


class CheckOut(Schema):
    """ok / warn / stop, the findings, and what to tell the model ("" when ok)."""

    verdict: str
    findings: list[CheckFindingOut]
    message: str
    elapsed_ms: float


class StepIn(CallIn):
    """One step appended to a live run: a call's fields as `/api/check` takes them, plus
    its kind, batch, times (epoch seconds or ISO 8601; `ts` is the start), tokens and cost.
    Give each step its `id` (the agent's own call id): a retried step is then stored once."""

    kind: Literal["user", "assistant", "tool_call", "system", "reasoning"] | None = None
    batch_id: str | None = None
    ts: float | str | None = None
    started_at: float | str | None = None
    ended_at: float | str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None

    @model_validator(mode="before")
    @classmethod
    def check_shape(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("a step is an object: {tool, args, result, status} or {role, text}")
        if not value.get("tool") and not value.get("role") and not value.get("kind"):
            raise ValueError("a step needs a 'tool', or a message its 'role' (or 'kind')")
        return value


class LiveOpenIn(Schema):
    """Open a live run by the agent's own session id."""

    external_id: str = Field(min_length=1, max_length=255)
    name: str = Field("", max_length=255)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def check_depth(cls, value: Any) -> Any:
        # long strings cut, with a marker, as imports and live appends cut values
        return clip_json(_bounded(value), DEFAULT_LIMITS)


class LiveRunOut(Schema):
    """A live run: its id, page, steps so far, verdict, whether it is still live, and how
    many calls the guard stopped (a `stop` answer to a check)."""

    run_id: int
    external_id: str
    url: str
    steps: int
    verdict: str
    live: bool
    stopped_calls: int


class AppendIn(Schema):
    """Steps to append, in order."""

    steps: list[StepIn] = Field(min_length=1, max_length=500)


class AppendOut(Schema):
    """Where each given step is (a retried one: where it already was), what fired on the
    new steps, and the run's verdict so far."""

    run_id: int
    seqs: list[int]
    findings: list[LiveFindingOut]
    verdict: str


class LiveCheckIn(NextCallIn):
    """The next tool call of a live run."""


class LiveEndOut(Schema):
    """An ended live run (its analysis is queued)."""

    run_id: int
    verdict: str
    live: bool


class IssueOut(Schema):
    """A loop issue: one kind of loop across the project's runs, with its state and counts."""

    id: int
    fingerprint: str
    title: str
    detector: str
    tool: str
    state: str
    resolved_in_version: str
    state_changed_at: datetime | None
    first_seen: datetime | None
    last_seen: datetime | None
    first_run_id: int | None
    last_run_id: int | None
    run_count: int
    finding_count: int
    waste_steps: int
    waste_tokens: int | None
    waste_cost: float | None
    waste_seconds: float | None
    agents: list[str]
    models: list[str] = Field(validation_alias="models_seen")
    versions: list[str]


class IssueDayOut(Schema):
    """One day of an issue: its runs and findings that day."""

    day: date
    runs: int
    findings: int


class IssueVersionOut(Schema):
    """An agent version the issue was seen in ("" for runs without one)."""

    version: str
    runs: int
    findings: int


class IssueDetailOut(IssueOut):
    """A loop issue with its example message, its trend by day and by agent version."""

    example_message: str
    days: list[IssueDayOut]
    by_version: list[IssueVersionOut]


class IssueStateIn(Schema):
    """A person's decision: resolve (optionally in a version), ignore or reopen."""

    state: Literal["open", "resolved", "ignored"]
    resolved_in_version: str = Field("", max_length=100)
