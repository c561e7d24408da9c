"""Tuning (staff): a project's policy as forms, saved or back-tested, and a back-test's
progress."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseClientRedirect

from ..models import Project
from ..services import access, backtest, policy
from . import forms
from .backtest import job_context, range_form, tuning_context
from .params import int_param


@require_GET
@login_required
def tuning_index(request: HttpRequest) -> HttpResponse:
    project = access.projects_for(request.user).first()
    if project is None or not access.may_tune(request.user):
        raise Http404("no project to tune")
    return redirect("runs:tuning", slug=project.slug)


@require_http_methods(["GET", "POST"])
@login_required
def tuning_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project(request.user, slug, access.CHANGE_POLICY)
    errors: list[str] = []
    if request.method == "POST":
        defaults, rows = forms.forms_for(project, request.POST)
        draft, errors = forms.draft_policy(project, defaults, rows)
        if draft is not None:
            change = policy.save_policy(project, draft, request.user)
            url = reverse("runs:tuning", args=[project.slug]) + f"?saved={change.pk}"
            if request.htmx:
                return HttpResponseClientRedirect(url)
            return redirect(url)
    else:
        defaults, rows = forms.forms_for(project)
    saved = int_param(request.GET.get("saved"), None)
    context = page_context(request, project, defaults, rows) | {
        "errors": errors,
        "saved": project.policy_changes.filter(pk=saved).first() if saved else None,
    }
    return render(request, "runs/tuning.html", context, status=400 if errors else 200)


@require_POST
@login_required
def backtest_start(request: HttpRequest, slug: str) -> HttpResponse:
    """Start a back-test of the posted draft over the posted range; show its progress."""
    project = access.get_project(request.user, slug, access.BACKTEST)
    defaults, rows = forms.forms_for(project, request.POST)
    draft, errors = forms.draft_policy(project, defaults, rows)
    window = range_form(request.POST)
    if window.is_valid() and draft is not None:
        try:
            job = backtest.start(
                project, request.user, draft, *window.window(), window.cleaned_data["sample"]
            )
        except ValueError as exc:
            errors.append(str(exc))
        else:
            if request.htmx:
                return render(request, "runs/backtest.html#backtest", job_context(job))
            return redirect(job)
    errors += [e for field_errors in window.errors.values() for e in field_errors]
    if request.htmx:
        return render(request, "runs/backtest.html#backtest", {"backtest_errors": errors})
    context = page_context(request, project, defaults, rows) | {
        "errors": errors,
        "range_form": window,
    }
    return render(request, "runs/tuning.html", context, status=400)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def backtest_status(request: HttpRequest, job_id: int) -> HttpResponse:
    """A back-test's page, or (htmx) its block, which stops polling (286) once finished."""
    job = access.get_backtest(request.user, job_id)
    context = job_context(job)
    if not request.htmx:
        return render(request, "runs/backtest.html", context)
    response = render(request, "runs/backtest.html#backtest", context)
    if job.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_POST
@login_required
def backtest_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = backtest.cancel(access.get_backtest(request.user, job_id))
    if request.htmx:
        return render(request, "runs/backtest.html#backtest", job_context(job))
    return redirect(job)


def page_context(request: HttpRequest, project: Project, defaults, rows) -> dict:  # type: ignore[no-untyped-def]
    """Return what the whole Tuning page shows around its forms."""
    return {
        "project": project,
        "projects": access.projects_for(request.user),
        "defaults": defaults,
        "rows": rows,
        "changes": project.policy_changes.select_related("user")[:10],
        "tools": sorted(policy.project_tools(project))[:300],
        "range_form": range_form(),
    } | tuning_context(project)
