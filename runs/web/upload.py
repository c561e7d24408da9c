"""The upload page, an upload's status row (polled), and a trace's bytes as received."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HTMX_STOP_POLLING

from ..services import access, downloads, ingest, uploads


@require_http_methods(["GET", "POST"])
@login_required
def upload(request: HttpRequest) -> HttpResponse:
    projects = list(access.projects_for(request.user))
    context = {
        "projects": projects,
        "formats": ingest.formats(),
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
    files = request.FILES.getlist("files")
    if not files:
        errors.append("Choose at least one trace file.")
    if not errors:
        for upload_ in files:
            try:
                trace, created = uploads.accept(
                    project, upload_, name=upload_.name or "upload", size=upload_.size,
                    format=request.POST.get("format", ""), user=request.user,
                    version=request.POST.get("version", ""),
                )  # fmt: skip
            except uploads.UploadRefused as exc:
                errors.append(f"{exc.message}.")
                continue
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


@require_http_methods(["GET"])
@login_required
def trace_raw(request: HttpRequest, trace_id: int) -> HttpResponseBase:
    """Download a trace's bytes as received, if the user is a member of its project."""
    return downloads.raw_response(access.get_trace(request.user, trace_id))
