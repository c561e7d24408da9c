"""Views: pick a run to compare with, and the two runs side by side (the page builder is
comparison.py; the worker computes the comparison, services/compare.py)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseClientRefresh

from ..models import CompareJob, Run
from ..services import access
from ..services.compare import (
    cancel,
    candidates,
    default_other,
    open_job,
    retry,
    stored_comparison,
)
from .comparison import build_window, context


def _int(value: str | None, default: int | None = 0) -> int | None:
    return int(value) if value and value.isdigit() else default


@require_GET
@login_required
def compare_pick(request: HttpRequest, run_id: int) -> HttpResponse:
    """Pick the run to compare with (by default the previous run of the same task);
    ``?other=`` goes to the comparison, ``?q=`` searches the project's runs."""
    run = access.get_run(request.user, run_id)
    other_id = _int(request.GET.get("other"), None)
    if other_id is not None:
        other = access.get_run(request.user, other_id)
        return redirect("runs:compare", run.pk, other.pk)
    query = request.GET.get("q", "").strip()[:100]
    default = default_other(run)
    return render(request, "runs/run_compare.html", _compare_picker(run, query, default, default))


@require_GET
@login_required
@vary_on_headers("HX-Request")
def compare(request: HttpRequest, run_id: int, other_id: int) -> HttpResponse:
    """Two runs side by side, aligned step by step; htmx asks for more rows or a fold.

    The worker computes the comparison (`compare.open_job`): until it is done, the page shows
    the job's progress (polled by htmx) and a Cancel button, and once done, the stored result
    at once for as long as neither run changes.
    """
    run = access.get_run(request.user, run_id)
    other = access.get_run(request.user, other_id)
    job = open_job(run, other)
    if job.status != CompareJob.Status.DONE:
        if request.htmx:  # rows asked for while a run changed: the page shows the new job
            return HttpResponseClientRefresh()
        page = {"job": job, "other": other} | _compare_picker(run, "", default_other(run), other)
        return render(request, "runs/run_compare.html", page)
    comparison = stored_comparison(job, run, other)
    window = build_window(
        comparison,
        _int(request.GET.get("from")) or 0,
        end=_int(request.GET.get("to"), None),
        flat=request.GET.get("flat") == "1",
    )
    page = context(comparison, window)
    if request.htmx:
        return render(request, "runs/run_compare.html#compare-rows", page)
    default = default_other(run)
    page |= _compare_picker(run, "", default, other)
    return render(request, "runs/run_compare.html", page)


@require_GET
@login_required
def compare_status(request: HttpRequest, run_id: int, other_id: int) -> HttpResponse:
    """The comparison job's progress block (htmx polls it, 286 once cancelled or failed);
    once the job is done, the page reloads to show the result."""
    run = access.get_run(request.user, run_id)
    other = access.get_run(request.user, other_id)
    job = open_job(run, other)
    if job.status == CompareJob.Status.DONE or not request.htmx:
        return HttpResponseClientRefresh() if request.htmx else redirect(job)
    return _job_block(request, job, run, other)


@require_POST
@login_required
def compare_cancel(request: HttpRequest, run_id: int, other_id: int) -> HttpResponse:
    """Stop the pair's comparison: at once when queued, at the worker's next chunk when running."""
    run = access.get_run(request.user, run_id)
    other = access.get_run(request.user, other_id)
    job = cancel(run, other)
    if request.htmx and job is not None:
        return _job_block(request, job, run, other)
    return redirect("runs:compare", run.pk, other.pk)


@require_POST
@login_required
def compare_retry(request: HttpRequest, run_id: int, other_id: int) -> HttpResponse:
    """Queue a cancelled or failed comparison of the pair again."""
    run = access.get_run(request.user, run_id)
    other = access.get_run(request.user, other_id)
    job = retry(run, other)
    if request.htmx:
        return _job_block(request, job, run, other)
    return redirect(job)


def _job_block(request: HttpRequest, job: CompareJob, run: Run, other: Run) -> HttpResponse:
    page = {"job": job, "run": run, "other": other}
    response = render(request, "runs/run_compare.html#compare-job", page)
    if job.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response


def _compare_picker(run: Run, query: str, default: Run | None, selected: Run | None) -> dict:
    """Return the picker's context: the runs to choose from, with ``selected`` first."""
    return {
        "run": run,
        "query": query,
        "candidates": candidates(run, query, first=selected),
        "default_id": default.pk if default else None,
        "selected": selected.pk if selected else None,
    }
