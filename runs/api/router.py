"""The JSON API (django-ninja Router): traces, runs, policy and the live check.

Every endpoint acts on the project of the caller's API key (`Authorization: Bearer <key>`);
an id from another project is 404, never 403. Endpoints are thin: they call the same services
as the HTML views (`runs.services`).
"""

import time
from datetime import date
from typing import Literal

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.errors import HttpError
from ninja.pagination import LimitOffsetPagination, paginate
from ninja.security import HttpBearer

from ..models import Run, Trace
from ..services import (
    access,
    analysis,
    downloads,
    filters,
    ingest,
    live,
    policy,
    summary,
    uploads,
)
from . import auth
from .schemas import (
    AnalyzeQueued,
    AppendIn,
    AppendOut,
    CheckIn,
    CheckOut,
    ErrorOut,
    LiveCheckIn,
    LiveEndOut,
    LiveOpenIn,
    LiveRunOut,
    PolicyIn,
    PolicyOut,
    RunDetailOut,
    RunOut,
    StepPage,
    TraceAccepted,
    TraceOut,
)

STEPS_PAGE_MAX = 1000
MAX_ID = 2**63 - 1
# The formats an upload may force, as an enum in the schema ("" = detect).
FormatName = Literal.__getitem__(("", *ingest.formats()))
RUN_ID = Path(..., ge=1, le=MAX_ID, description="a run id")
TRACE_ID = Path(..., ge=1, le=MAX_ID, description="a trace id")
EXTERNAL_ID = Path(
    ..., min_length=1, max_length=255, description="the agent's session id (percent-encoded)"
)


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer <key>`: the key's project is the one the API acts on."""

    openapi_description = "A project API key (settings page or `manage.py create_api_key`)."

    def __call__(self, request: HttpRequest) -> auth.KeyAuth:
        # Unlike HttpBearer, a missing header gets the same clear 401 as a bad key.
        return self.authenticate(request, auth.bearer_token(request))

    def authenticate(self, request: HttpRequest, token: str) -> auth.KeyAuth:
        return auth.authenticate_request(request)


router = Router(auth=ApiKeyAuth())
# What any endpoint may answer: a bad parameter (422), a key problem, rate limit, outage.
ERRORS = {
    401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut, 429: ErrorOut, 503: ErrorOut,
}  # fmt: skip
BODY_ERRORS = {400: ErrorOut, 413: ErrorOut, 411: ErrorOut}  # endpoints that take a body


def _project(request: HttpRequest):  # type: ignore[no-untyped-def]
    return request.auth.project


def _run(request: HttpRequest, run_id: int) -> Run:
    return get_object_or_404(_project(request).runs.select_related("trace"), pk=run_id)


def _trace(request: HttpRequest, trace_id: int) -> Trace:
    return get_object_or_404(_project(request).traces.defer("raw"), pk=trace_id)


def _trace_out(trace: Trace) -> dict:
    run_ids = list(trace.runs.order_by("id").values_list("id", flat=True)[:1000])
    if not run_ids and trace.source == Trace.Source.OTLP:
        run_ids = sorted(
            set(trace.otlp_groups.exclude(run=None).values_list("run_id", flat=True)[:1000])
        )
    return {
        "id": trace.pk,
        "name": trace.name,
        "status": trace.status,
        "format": trace.format,
        "declared_format": trace.declared_format,
        "size": trace.size,
        "source": trace.source,
        "error": trace.error,
        "warnings": [str(w) for w in trace.warnings or []],
        "skipped_lines": trace.skipped_lines,
        "created_at": trace.created_at,
        "updated_at": trace.updated_at,
        "run_ids": run_ids,
    }


UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
            }
        },
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    },
}


@router.post(
    "/traces",
    response={202: TraceAccepted, **BODY_ERRORS, **ERRORS},
    tags=["traces"],
    summary="Upload a trace file",
    openapi_extra={"requestBody": UPLOAD_BODY},
)
def upload_trace(
    request: HttpRequest,
    format: FormatName = Query("", description="force a format (default: detected)"),  # noqa: B008
    name: str = Query("", max_length=255, description="file name (raw bodies)"),
    version: str = Query("", max_length=100, description="the agent version of its runs"),
):
    """Store a trace file and queue its import; returns at once with the trace id.

    Send the file as multipart (`file` field) or as the raw request body; gzip is accepted
    (gzipped bytes, or `Content-Encoding: gzip`). The same bytes sent twice are one trace.
    A raw body is read as a stream, whatever its Content-Type says (never parsed as a form),
    and a multipart file is spooled to disk, so the upload is never held whole in memory.
    """
    request.auth.require(access.SEND, "uploading a trace")
    if request.content_type == "multipart/form-data":
        file = request.FILES.get("file")
        if file is None:
            raise HttpError(400, "multipart upload without a 'file' field")
        data, size, name = file, file.size or None, name or file.name or "upload"
    else:
        data, size, name = request, None, name or "upload"
    try:
        trace, created = uploads.accept(
            _project(request), data, name=name, size=size, format=format, version=version,
            source=Trace.Source.API,
        )  # fmt: skip
    except uploads.UploadRefused as exc:
        raise HttpError(exc.status, exc.message) from None
    return Status(
        202,
        {
            "trace_id": trace.pk,
            "status": trace.status,
            "duplicate": not created,
            "url": f"/api/traces/{trace.pk}",
        },
    )


@router.get("/traces/{trace_id}", response={200: TraceOut, **ERRORS}, tags=["traces"])
def get_trace(request: HttpRequest, trace_id: int = TRACE_ID):
    """A trace's import status (received, parsing, analyzing, analyzed, failed), its error
    message and warnings, and the ids of its runs."""
    return _trace_out(_trace(request, trace_id))


@router.get(
    "/traces/{trace_id}/raw",
    response={**ERRORS, 410: ErrorOut},
    tags=["traces"],
    openapi_extra={
        "responses": {
            200: {
                "description": "the bytes exactly as received",
                "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            }
        }
    },
)
def download_trace(request: HttpRequest, trace_id: int = TRACE_ID) -> HttpResponseBase:
    """The trace's bytes exactly as they were received (possibly gzipped)."""
    trace = _trace(request, trace_id)
    if trace.raw_expired_at is not None:
        raise HttpError(410, f"the trace's raw bytes expired on {trace.raw_expired_at:%Y-%m-%d}")
    return downloads.raw_response(trace)


class RunPages(LimitOffsetPagination):
    """limit/offset paging with an upper bound on the offset too (a bigint overflow is no 500)."""

    class Input(Schema):
        limit: int = Field(
            settings.NINJA_PAGINATION_PER_PAGE, ge=1, le=settings.NINJA_PAGINATION_MAX_LIMIT
        )
        offset: int = Field(0, ge=0, le=settings.NINJA_PAGINATION_MAX_OFFSET)


@router.get("/runs", response={200: list[RunOut], **ERRORS}, tags=["runs"])
@paginate(RunPages)
def list_runs(
    request: HttpRequest,
    verdict: Literal["flagged", "pending", "ok", "warn", "stop", ""] = "",
    detector: str = Query("", max_length=40),
    tool: str = Query("", max_length=200),
    format: str = Query("", max_length=40),
    since: date | None = None,
    until: date | None = None,
    q: str = Query("", max_length=200, description="search names and external ids"),
):
    """The project's runs, newest first, with the filters of the runs list (`verdict` also
    takes `flagged`: warn or stop; `q` matches words of tool names and arguments)."""
    wanted = filters.RunFilters(
        verdict=verdict,
        detector=detector,
        tool=tool,
        format=format,
        since=since,
        until=until,
        q=q,
    )
    runs = filters.apply(_project(request).runs.all(), wanted)
    return runs.order_by("-created_at", "-id").defer("metadata", "summary")


STOPPED_LISTED = 100  # stopped calls a run's API answer lists, latest first


@router.get("/runs/{run_id}", response={200: RunDetailOut, **ERRORS}, tags=["runs"])
def get_run(request: HttpRequest, run_id: int = RUN_ID):
    """A run with its summary, its findings (each with the message for the agent) and the
    latest 100 calls the live guard stopped in it."""
    run = _run(request, run_id)
    listed = ("findings", "stopped_calls", "unknowns")
    unknowns = summary.unknowns_of(run)
    return {
        **{f: getattr(run, f) for f in RunDetailOut.model_fields if f not in listed},
        "findings": list(run.findings.all()),
        "stopped_calls": list(live.stopped_calls(run).order_by("-before_seq")[:STOPPED_LISTED]),
        "unknowns": {
            "calls": unknowns.calls,
            "args": unknowns.args,
            "results": unknowns.results,
            "names_only": unknowns.names_only,
            "capture_hints": summary.capture_hints_of(run),
        },
    }


@router.get("/runs/{run_id}/steps", response={200: StepPage, **ERRORS}, tags=["runs"])
def list_steps(
    request: HttpRequest,
    run_id: int = RUN_ID,
    from_: int = Query(0, alias="from", ge=0, le=2**31 - 1, description="first seq"),
    limit: int = Query(200, ge=1, le=STEPS_PAGE_MAX),
):
    """A page of the run's steps in order, from seq `from`."""
    run = _run(request, run_id)
    steps = list(run.steps.filter(seq__gte=from_).order_by("seq")[: limit + 1])
    next_from = steps[limit].seq if len(steps) > limit else None
    return {"items": steps[:limit], "next_from": next_from}


@router.post("/runs/{run_id}/analyze", response={202: AnalyzeQueued, **ERRORS}, tags=["runs"])
def analyze_run(request: HttpRequest, run_id: int = RUN_ID):
    """Queue the run for analysis again (with the project's current policy); needs an
    admin key."""
    request.auth.require(access.REANALYZE)
    run = _run(request, run_id)
    analysis.reanalyze(Run.objects.filter(pk=run.pk))
    return Status(202, {"run_id": run.pk, "status": "queued"})


@router.get("/policy", response={200: PolicyOut, **ERRORS}, tags=["policy"])
def get_policy(request: HttpRequest):
    """The project's detection policy: `{"defaults": {...}, "tools": {...}}`."""
    return policy.current(_project(request))


@router.put("/policy", response={200: PolicyOut, **BODY_ERRORS, **ERRORS}, tags=["policy"])
def put_policy(request: HttpRequest, payload: PolicyIn):
    """Replace the project's policy (the `loopboard scan --policy` shape), record the change
    and re-analyze the project's runs."""
    request.auth.require(access.CHANGE_POLICY)
    project = _project(request)
    try:
        change = policy.save_policy(project, policy.validate(payload.model_dump()), None)
    except ValueError as exc:
        raise HttpError(422, str(exc)) from None
    return {**policy.current(project), "reanalyzed": change.reanalyzed}


@router.post(
    "/check", response={200: CheckOut, 409: ErrorOut, **BODY_ERRORS, **ERRORS}, tags=["live"]
)
def check(request: HttpRequest, payload: CheckIn):
    """Would this next tool call be a loop? Give the run so far (a stored run's `run_id`, or
    the `calls` made so far) and the next call; the answer's `message` is what the agent
    should tell its model."""
    started = time.perf_counter()
    project = _project(request)
    run = _run(request, payload.run_id) if payload.run_id is not None else None
    steps = [live.step_from_call(i, call.model_dump()) for i, call in enumerate(payload.calls)]
    try:
        result = live.check_next_call(project, payload.tool, payload.args, run=run, steps=steps)
    except policy.PolicyInvalid as exc:
        raise HttpError(409, str(exc)) from None
    return {
        "verdict": result.verdict,
        "findings": [finding.to_dict() for finding in result.findings],
        "message": result.message,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 2),
    }


def _live_run_out(run: Run) -> dict:
    return {
        "run_id": run.pk,
        "external_id": run.external_id,
        "url": run.get_absolute_url(),
        "steps": run.step_count,
        "verdict": run.verdict,
        "live": run.live,
        "stopped_calls": live.stopped_calls(run).count(),
    }


def _server_timing(response: HttpResponse, started: float) -> None:
    """Say the server time in a header (what bench/bench_live.py reads)."""
    response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.3f}"


@router.post(
    "/live/runs",
    response={200: LiveRunOut, **BODY_ERRORS, **ERRORS},
    tags=["live"],
    summary="Open a live run",
)
def open_live_run(request: HttpRequest, payload: LiveOpenIn):
    """Open a live run by the agent's own session id (`external_id`), or return the one
    already open: opening is idempotent. Appending to an unknown id opens it too."""
    request.auth.require(access.SEND, "opening a live run")
    try:
        run = live.open_run(
            _project(request), payload.external_id, name=payload.name, metadata=payload.metadata
        )
    except live.UnusableSessionId as exc:
        raise HttpError(400, f"external_id: {exc}") from None
    return _live_run_out(run)


@router.get("/live/runs/{external_id}", response={200: LiveRunOut, **ERRORS}, tags=["live"])
def get_live_run(request: HttpRequest, external_id: str = EXTERNAL_ID):
    """A live run by its session id: steps so far, verdict, and whether it is still live."""
    run = live.find_run(_project(request), external_id)
    if run is None:
        raise HttpError(404, f"no live run {external_id!r} in this project")
    return _live_run_out(run)


@router.post(
    "/live/runs/{external_id}/steps",
    response={200: AppendOut, 409: ErrorOut, **BODY_ERRORS, **ERRORS},
    tags=["live"],
    summary="Append steps to a live run",
)
def append_live_steps(
    request: HttpRequest, response: HttpResponse, payload: AppendIn, external_id: str = EXTERNAL_ID
):
    """Append steps (1 to 500, in order) to a live run, opening it if there is none and
    reopening it if it ended. Answers each step's seq and the findings that fire on these
    steps. A step whose `id` the run already holds is not stored again (retries are safe);
    its seq is still answered."""
    started = time.perf_counter()
    request.auth.require(access.SEND, "appending to a live run")
    calls = [step.model_dump() for step in payload.steps]
    try:
        appended = live.append_steps(_project(request), external_id, calls)
    except policy.PolicyInvalid as exc:
        raise HttpError(409, str(exc)) from None
    except live.UnusableSessionId as exc:
        raise HttpError(400, str(exc)) from None
    _server_timing(response, started)
    return {
        "run_id": appended.run_id,
        "seqs": appended.seqs,
        "findings": [finding.to_dict() for finding in appended.findings],
        "verdict": appended.verdict,
    }


@router.post(
    "/live/runs/{external_id}/check",
    response={200: CheckOut, 409: ErrorOut, **BODY_ERRORS, **ERRORS},
    tags=["live"],
    summary="Would this next call of a live run be a loop?",
)
def check_live_call(
    request: HttpRequest,
    response: HttpResponse,
    payload: LiveCheckIn,
    external_id: str = EXTERNAL_ID,
):
    """Would this next tool call be a loop, given what the live run has done so far? Costs
    the same at step 100,000 as at step 10. An unknown run has seen nothing: `ok`. A `stop`
    is kept as a call the guard stopped only for a key that may write (the `ingest` scope);
    a `read` key gets the same answer and writes nothing."""
    started = time.perf_counter()
    keep = request.auth.may(access.SEND)
    try:
        result = live.check_live(
            _project(request), external_id, payload.tool, payload.args, keep=keep
        )
    except policy.PolicyInvalid as exc:
        raise HttpError(409, str(exc)) from None
    _server_timing(response, started)
    return {
        "verdict": result.verdict,
        "findings": [finding.to_dict() for finding in result.findings],
        "message": result.message,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 2),
    }


@router.post(
    "/live/runs/{external_id}/end",
    response={200: LiveEndOut, **ERRORS},
    tags=["live"],
    summary="End a live run",
)
def end_live_run(request: HttpRequest, external_id: str = EXTERNAL_ID):
    """End a live run: it is then analyzed like any other run (idempotent). The verdict
    answered is the live one; a later append reopens the run."""
    request.auth.require(access.SEND, "ending a live run")
    run = live.end_run(_project(request), external_id)
    if run is None:
        raise HttpError(404, f"no live run {external_id!r} in this project")
    return {"run_id": run.pk, "verdict": run.verdict, "live": False}
