"""HTML pages and htmx fragments (function views)."""

from __future__ import annotations

import zlib

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HTMX_STOP_POLLING

from . import access, ingest
from .importers import IMPORTERS
from .models import Run, Step

RUNS_PER_PAGE = 50
STEPS_PER_PAGE = 300


def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the database answers (used by docker compose health checks)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


@require_GET
@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = access.runs_for(request.user).select_related("project").order_by("-id")
    if (before := request.GET.get("before", "")) and before.isdigit():
        runs = runs.filter(pk__lt=int(before))
    page = list(runs[: RUNS_PER_PAGE + 1])
    has_more = len(page) > RUNS_PER_PAGE
    page = page[:RUNS_PER_PAGE]
    context = {
        "runs": page,
        "next_before": page[-1].pk if has_more else None,
        "projects": access.projects_for(request.user),
    }
    template = "runs/run_list.html#run-rows" if request.htmx else "runs/run_list.html"
    return render(request, template, context)


def signature_colors(run: Run) -> dict[str, dict]:
    """Return {call signature: {"hue", "count"}} for the signatures that repeat in a run."""
    repeated = (
        Step.objects.filter(run=run)
        .exclude(call_sig="")
        .values("call_sig")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    return {
        row["call_sig"]: {"hue": zlib.crc32(row["call_sig"].encode()) % 360, "count": row["n"]}
        for row in repeated
    }


@require_GET
@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    start = request.GET.get("from", "0")
    start = int(start) if start.isdigit() else 0
    steps = list(run.steps.filter(seq__gte=start).order_by("seq")[: STEPS_PER_PAGE + 1])
    more_from = steps[-1].seq if len(steps) > STEPS_PER_PAGE else None
    steps = steps[:STEPS_PER_PAGE]
    colors = signature_colors(run)
    findings = list(run.findings.all())
    flagged = {seq for f in findings if f.severity != "info" for seq in f.seqs}
    for step in steps:
        step.repeat = colors.get(step.call_sig)
        step.flagged = step.seq in flagged
    context = {
        "run": run,
        "steps": steps,
        "more_from": more_from,
        "findings": findings,
        "colors": colors,
    }
    template = "runs/run_detail.html#step-rows" if request.htmx else "runs/run_detail.html"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@login_required
def upload(request: HttpRequest) -> HttpResponse:
    projects = list(access.projects_for(request.user))
    context = {
        "projects": projects,
        "formats": IMPORTERS,
        "max_bytes": settings.MAX_UPLOAD_BYTES,
        "recent": access.traces_for(request.user).defer("raw").select_related("project")[:20],
    }
    if request.method == "GET":
        return render(request, "runs/upload.html", context)
    errors, traces = [], []
    project = None
    if slug := request.POST.get("project"):
        project = next((p for p in projects if p.slug == slug), None)
    elif len(projects) >= 1:
        project = projects[0]
    if project is None:
        errors.append("Choose a project you are a member of.")
    fmt = request.POST.get("format", "")
    if fmt and fmt not in IMPORTERS:
        errors.append(f"Unknown format {fmt!r}.")
    files = request.FILES.getlist("files")
    if not files:
        errors.append("Choose at least one trace file.")
    if not errors:
        for upload_ in files:
            if upload_.size > settings.MAX_UPLOAD_BYTES:
                errors.append(
                    f"{upload_.name}: {upload_.size} bytes is over the limit of "
                    f"{settings.MAX_UPLOAD_BYTES} bytes."
                )
                continue
            trace, created = ingest.store_trace(
                project, upload_.read(), name=upload_.name, format=fmt, user=request.user
            )
            trace.was_duplicate = not created
            traces.append(trace)
    context |= {"traces": traces, "errors": errors}
    status = 400 if errors and not traces else 200
    if request.htmx:
        return render(request, "runs/upload.html#upload-results", context, status=status)
    return render(request, "runs/upload.html", context, status=status)


@require_GET
@login_required
def trace_status(request: HttpRequest, trace_id: int) -> HttpResponse:
    trace = access.get_trace(request.user, trace_id)
    trace.run_list = list(trace.runs.only("id", "name", "verdict", "step_count")[:20])
    response = render(request, "runs/upload.html#trace-row", {"trace": trace})
    if trace.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response


def home(request: HttpRequest) -> HttpResponse:
    return redirect("runs:list")
