"""Project pages: the settings page (API keys) and the raw trace download, member-scoped."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ..services import access, api_keys, downloads


@require_GET
@login_required
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's settings: its API keys (create, revoke) and how to send traces."""
    project = access.get_project(request.user, slug)
    context = {
        "project": project,
        "keys": project.api_keys.select_related("created_by"),
        "new_key": request.session.pop("new_api_key", None),
        "otlp_url": request.build_absolute_uri("/v1/traces"),
        "api_url": request.build_absolute_uri("/api/"),
    }
    return render(request, "runs/project_settings.html", context)


@require_POST
@login_required
def create_key(request: HttpRequest, slug: str) -> HttpResponse:
    """Issue a key; its plain value is shown once, on the next page load."""
    project = access.get_project(request.user, slug)
    name = request.POST.get("name", "").strip()[:100]
    if not name:
        messages.error(request, "Give the key a name (what will use it, e.g. 'CI').")
    else:
        row, key = api_keys.create_key(project, name, user=request.user)
        request.session["new_api_key"] = {"name": row.name, "key": key}
    return redirect("project_settings", slug=project.slug)


@require_POST
@login_required
def revoke_key(request: HttpRequest, slug: str, key_id: int) -> HttpResponse:
    project = access.get_project(request.user, slug)
    key = get_object_or_404(project.api_keys, pk=key_id)
    api_keys.revoke_key(key)
    messages.success(request, f"Key “{key.name}” revoked {timezone.now():%Y-%m-%d %H:%M} UTC.")
    return redirect("project_settings", slug=project.slug)


@require_http_methods(["GET"])
@login_required
def trace_raw(request: HttpRequest, trace_id: int) -> HttpResponse:
    """Download a trace's bytes as received, if the user is a member of its project."""
    trace = get_object_or_404(access.traces_for(request.user), pk=trace_id)
    return downloads.raw_response(trace)
