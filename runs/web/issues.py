"""The Issues list and an issue's page: what they show, and their views (changing a state,
labeling an issue's findings)."""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

import detection

from ..models import LoopIssue
from ..services import access, issues, labels
from ..templatetags.loopboard import code_spans
from . import charts, forms

ISSUES_PER_PAGE = 50
RUNS_PER_PAGE = 20
SPARK_DAYS = 30


def filter_from(query: QueryDict) -> tuple[issues.IssueFilter, str]:
    """Return the issue filter and the project slug the query asks for (unknown values
    are ignored, not errors: a list link keeps working when a choice goes away)."""
    state = query.get("state", "")
    sort = query.get("sort", "last_seen")
    detector = query.get("detector", "")
    wanted = issues.IssueFilter(
        state=state if state in LoopIssue.State.values else "",
        detector=detector if detector in detection.catalogue.NAMES else "",
        tool=query.get("tool", "").strip()[:200],
        version=query.get("version", "").strip()[:100],
        sort=sort if sort in issues.SORTS else "last_seen",
    )
    return wanted, query.get("project", "")[:100]


def list_context(user, query: QueryDict) -> dict:
    """Return the Issues list: the user's projects' issues, filtered, sorted and paged, each
    with a sparkline of its runs per day over the last SPARK_DAYS days."""
    wanted, slug = filter_from(query)
    projects = list(access.projects_for(user))
    chosen = [p.pk for p in projects if not slug or p.slug == slug]
    found = issues.filter_issues(LoopIssue.objects.filter(project_id__in=chosen), wanted)
    page = Paginator(found.select_related("project"), ISSUES_PER_PAGE).get_page(query.get("page"))
    today = timezone.now().date()
    since = today - timedelta(days=SPARK_DAYS - 1)
    days = issues.days_of([issue.pk for issue in page], since)
    for issue in page:
        per_day = _per_day(days.get(issue.pk, {}), since, today)
        issue.spark = charts.sparkline([n for _, n in per_day])
        issue.title_html = title_html(issue.title)
    params = {k: v for k, v in {**dataclasses.asdict(wanted), "project": slug}.items() if v}
    if wanted.sort == "last_seen":
        del params["sort"]  # the default order
    return {
        "issues": page,
        "filters": wanted,
        "project_slug": slug,
        "projects": projects,
        "query": urlencode(params),
        "states": LoopIssue.State.choices,
        "detectors": list(detection.catalogue.NAMES),
        "sorts": [("last_seen", "Last seen"), ("runs", "Most runs"), ("waste", "Most waste")],
        "versions": issues.versions_seen(chosen),
        "active": bool(params.keys() - {"sort"}),
    }


class CountedPaginator(Paginator):
    """A paginator told its count (a denormalised counter), instead of counting the rows."""

    def __init__(self, object_list, per_page: int, count: int) -> None:
        super().__init__(object_list, per_page)
        self.known = count

    @property
    def count(self) -> int:
        return self.known


def detail_context(issue: LoopIssue, page_number: str | None) -> dict:
    """Return an issue's page: its runs (newest first, paged), trend by day and by version,
    the example finding, and its first and last run side by side."""
    runs = CountedPaginator(issues.runs_of(issue), RUNS_PER_PAGE, issue.run_count)
    page = runs.get_page(page_number)
    page.object_list = issues.runs_by_id(list(page.object_list))
    counts = dict(issue.days.values_list("day", "runs"))
    trend = (
        charts.daily_columns([(d, n, n) for d, n in _per_day(counts, min(counts), max(counts))])
        if counts
        else ""
    )
    versions = issues.by_version(issue)
    example = issues.example_of(issue)
    issue.title_html = title_html(issue.title)
    return {
        "issue": issue,
        "runs": page,
        "trend": trend,
        "by_version": versions,
        "version_chart": charts.bars([(v or "no version", n) for v, n, _ in versions], unit=" run")
        if len(versions) > 1 or (versions and versions[0][0])
        else "",
        "example": example,
        "sides": [("First run", issue.first_run), ("Last run", issue.last_run)],
        "states": [("resolve", "Resolve"), ("ignore", "Ignore"), ("reopen", "Reopen")],
        "can_compare": bool(
            issue.first_run_id and issue.last_run_id and issue.first_run_id != issue.last_run_id
        ),
    }


def title_html(title: str) -> SafeString:
    """Return an issue title as HTML: its `backticked` names as code, everything escaped."""
    return code_spans(title)


def _per_day(counts: dict[date, int], since: date, until: date) -> list[tuple[date, int]]:
    """Return (day, count) for each day from `since` to `until`, zero where nothing happened."""
    days = (since + timedelta(days=i) for i in range((until - since).days + 1))
    return [(day, counts.get(day, 0)) for day in days]


@require_GET
@login_required
@vary_on_headers("HX-Request")
def issue_list(request: HttpRequest) -> HttpResponse:
    context = list_context(request.user, request.GET)
    template = "runs/issue_list.html#issue-table" if request.htmx else "runs/issue_list.html"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def issue_detail(request: HttpRequest, issue_id: int) -> HttpResponse:
    issue = access.get_issue(request.user, issue_id)
    error = ""
    if request.method == "POST":
        form = forms.IssueStateForm(request.POST)
        try:
            if not form.is_valid():
                raise issues.StateError("choose resolve, ignore or reopen")
            access.require(request.user, issue.project, access.CHANGE_ISSUE_STATE)
            data = form.cleaned_data
            issues.set_state(issue, data["action"], user=request.user, version=data["version"])
            return redirect(issue.get_absolute_url())
        except issues.StateError as exc:
            error = str(exc)
    context = detail_context(issue, request.GET.get("page")) | {
        "error": error,
        "label_reasons": labels.REASONS,
    }
    template = "runs/issue_detail.html#issue-runs" if request.htmx else "runs/issue_detail.html"
    return render(request, template, context, status=400 if error else 200)


@require_POST
@login_required
def label_issue(request: HttpRequest, issue_id: int) -> HttpResponse:
    """Judge every finding of a loop issue alike (members only); htmx gets the issue's label
    box back with how many were labeled, a plain form post goes back to the issue."""
    issue = access.get_issue(request.user, issue_id)
    context: dict = {"issue": issue, "label_reasons": labels.REASONS}
    try:
        context["labeled"] = labels.label_issue(
            request.user,
            issue,
            request.POST.get("verdict", ""),
            request.POST.get("reason", ""),
            request.POST.get("text", ""),
        )
    except labels.LabelInvalid as exc:
        context["label_error"] = str(exc)
    if not request.htmx:
        if "label_error" in context:
            return HttpResponse(
                context["label_error"], status=400, content_type="text/plain; charset=utf-8"
            )
        return redirect(issue.get_absolute_url())
    status = 400 if "label_error" in context else 200
    return render(request, "runs/_label_issue.html", context, status=status)
