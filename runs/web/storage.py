"""The settings page's retention and storage section: its fragment (htmx) and its form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from ..services import access, retention, usage

FIELDS = (*retention.SETTINGS, "storage_budget_bytes")
LABELS = (
    ("raw_bytes", "Raw traces"),
    ("step_bytes", "Steps"),
    ("finding_bytes", "Findings"),
    ("total_bytes", "Total"),
)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def project_storage(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's retention settings and stored bytes (the settings page loads it)."""
    project = access.get_project(request.user, slug)
    context = {
        "project": project,
        "storage": usage.figures(project),
        "can_manage": access.may(request.user, project, access.CHANGE_RETENTION),
    }
    figures = context["storage"]
    if figures.latest is not None:
        context["rows"] = [
            (label, getattr(figures.latest, kind), figures.growth[kind]) for kind, label in LABELS
        ]
        context["percent"] = round(100 * figures.share) if figures.share is not None else None
    template = "runs/project_storage.html#storage" if request.htmx else "runs/project_storage.html"
    return render(request, template, context)


@require_POST
@login_required
def retention_save(request: HttpRequest, slug: str) -> HttpResponse:
    """Set the project's retention days and storage budget (owners); blank means for ever."""
    project = access.get_project(request.user, slug, access.CHANGE_RETENTION)
    values = {}
    try:
        for field in FIELDS:
            text = request.POST.get(field, "").strip().replace(",", "")
            values[field] = int(text) if text else None
        retention.save_settings(project, values)
    except ValueError as exc:
        messages.error(request, f"Retention not changed: {exc}.")
    else:
        messages.success(request, "Retention saved.")
    return redirect(reverse("runs:project_settings", args=[project.slug]) + "#storage")
