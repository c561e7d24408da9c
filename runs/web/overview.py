"""The overview page: its figures, over the runs a user may see."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from detection import catalogue

from ..models import Finding, Run
from ..services import access, metrics
from . import charts

DAYS = 30


def all_time_totals(project_ids: list[int]) -> dict:
    """Return the totals over every stored run of these projects without reading every run:
    runs by verdict and the waste sums from the metric triggers' rows (migrations 0019 and
    0030), plus the open live runs' steps and waste, which those count once the run ends."""
    figures = metrics.summed(project_ids)
    by_verdict = figures["runs"]
    live = Run.objects.filter(project_id__in=project_ids, live=True).aggregate(
        steps=Sum("step_count"), waste_steps=Sum("waste_steps"), waste_seconds=Sum("waste_seconds")
    )

    def total(name: str) -> float:
        value = figures[name].get((), 0.0) + (live.get(name) or 0)
        return value if abs(value) > 1e-9 else 0.0  # a float sum's crumbs of deleted runs

    return {
        "runs": round(sum(by_verdict.values())),
        "flagged": round(sum(by_verdict.get((v,), 0.0) for v in ("warn", "stop"))),
        "steps": round(total("steps")),
        "waste_steps": round(total("waste_steps")),
        # The run fields are blank where nothing was measured: shown as "—", as before.
        "waste_tokens": round(total("waste_tokens")) or None,
        "waste_cost": total("waste_cost") or None,
        "waste_seconds": total("waste_seconds") or None,
    }


def figures(user, days: int = DAYS) -> dict:
    """Return the totals over every stored run, and the charts of the last `days` days: runs
    per day, top looping tools, waste by tool and detector."""
    project_ids = list(access.projects_for(user).values_list("pk", flat=True))
    runs = Run.objects.filter(project_id__in=project_ids)
    flagged_q = Q(verdict__in=["warn", "stop"])
    totals = all_time_totals(project_ids)
    today = timezone.localdate()
    first = today - timedelta(days=days - 1)
    # A run's day is its own start time where the trace has one, as the runs list and
    # Issues show it; the time it was received otherwise (index run_project_day).
    window = runs.annotate(day=TruncDate(Coalesce("started_at", "created_at"))).filter(
        day__gte=first
    )
    per_day = {
        row["day"]: row
        for row in window.values("day").annotate(
            total=Count("id"), flagged=Count("id", filter=flagged_q)
        )
    }
    series = []
    for i in range(days):
        day = first + timedelta(days=i)
        row = per_day.get(day, {})
        series.append((day, row.get("total", 0), row.get("flagged", 0)))
    # The loop charts cover the same days: a year of findings is not joined to draw them.
    findings = Finding.objects.filter(run__in=window.values("pk")).exclude(severity="info")
    by_tool = list(
        findings.exclude(tool="")
        .values("tool")
        .annotate(
            n=Count("id"),
            runs=Count("run", distinct=True),
            steps=Sum("waste_steps"),
            tokens=Sum("waste_tokens"),
            cost=Sum("waste_cost"),
        )
        .order_by("-n")[:10]
    )
    by_detector = list(
        findings.values("detector")
        .annotate(
            n=Count("id"),
            steps=Sum("waste_steps"),
            tokens=Sum("waste_tokens"),
            cost=Sum("waste_cost"),
        )
        .order_by("-steps", "-n")[:12]
    )
    for row in by_detector:
        row["title"] = catalogue.title(row["detector"])
    by_waste_tool = sorted(by_tool, key=lambda r: r["steps"] or 0, reverse=True)
    return {
        "totals": totals,
        "days": days,
        "series": series,  # (day, runs, flagged) for each of the days
        "day_chart": charts.daily_columns(series, width=900, height=180),
        "tool_chart": charts.bars([(r["tool"], r["n"]) for r in by_tool], unit=" loop"),
        "waste_tool_chart": charts.bars(
            [(r["tool"], r["steps"] or 0) for r in by_waste_tool], unit=" step"
        ),
        "waste_detector_chart": charts.bars(
            [(r["title"], r["steps"] or 0) for r in by_detector], unit=" step"
        ),
        "by_tool": by_tool,
        "by_detector": by_detector,
    }


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "runs/overview.html", figures(request.user))
