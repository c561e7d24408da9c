"""The runs list: filtered, sorted, paged by cursor (htmx swaps the table or adds rows)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

import detection

from ..models import Run
from ..services import access, filters, ingest, summary
from . import charts

RUNS_PER_PAGE = 50


@require_GET
@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    f = filters.RunFilters.from_query(request.GET)
    # Project ids as constants, not a subquery: with one project the planner walks the
    # (project, sort key, id) index in order and stops at the page size.
    project_ids = list(access.projects_for(request.user).values_list("pk", flat=True))
    runs = Run.objects.filter(project_id__in=project_ids)
    runs = filters.apply(runs, f).select_related("project")
    page, next_cursor = filters.page(
        runs.defer("search", "metadata"), f, request.GET.get("after", ""), RUNS_PER_PAGE
    )
    for run in page:
        run.strip = charts.repeat_strip(summary.strip_of(run))
    context = {
        "runs": page,
        "filters": f,
        "query": urlencode(f.query()),
        "next_after": next_cursor,
        "projects": access.projects_for(request.user),
        "sorts": [(k, label) for k, (_, label) in filters.SORTS.items()],
        "verdicts": filters.VERDICTS,
        "detectors": list(detection.catalogue.NAMES),
        "formats": list(ingest.formats()),
        "detector_titles": detection.catalogue.TITLES,
    }
    if request.htmx and request.htmx.target == "run-table":
        template = "runs/run_list.html#run-table"
    elif request.htmx:
        template = "runs/run_list.html#run-rows"
    else:
        template = "runs/run_list.html"
    return render(request, template, context)
