"""The back-test on the Tuning page: its range form, what a job's block shows, the nightly trend."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import BacktestJob, Project
from ..services import backtest
from ..services.policy import describe

PRESETS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
SAMPLE_LIMIT = 1_000_000


class RangeForm(forms.Form):
    """Which runs a back-test examines: a preset or custom range, optionally a sample of N."""

    range = forms.ChoiceField(
        choices=[("24h", "last 24 hours"), ("7d", "last 7 days"), ("30d", "last 30 days"),
                 ("custom", "custom range")],
        initial="30d",
    )  # fmt: skip
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="From"
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), label="To"
    )
    sample = forms.IntegerField(
        min_value=1, max_value=SAMPLE_LIMIT, required=False, label="Sample of N runs"
    )

    def clean(self) -> dict:
        data = super().clean()
        if data.get("range") == "custom":
            since, until = data.get("since"), data.get("until")
            if not since or not until:
                raise forms.ValidationError("A custom range needs a start and an end.")
            if since >= until:
                raise forms.ValidationError("The range must end after it starts.")
        return data

    def window(self, now: datetime | None = None) -> tuple[datetime, datetime]:
        """Return (since, until) of a valid form."""
        data = self.cleaned_data
        if data["range"] == "custom":
            return data["since"], data["until"]
        now = now or timezone.now()
        return now - PRESETS[data["range"]], now


def range_form(data=None) -> RangeForm:
    return RangeForm(data, prefix="b")


def job_context(job: BacktestJob) -> dict:
    """Return what a back-test's block shows: progress, changes, precision/recall, issues."""
    tally = backtest.Tally.load(job.results)
    appear, vanish = tally.issue_changes()
    return {
        "job": job,
        "tally": tally,
        "groups": [
            ("flagged", "Newly flagged", tally.counts["flagged"], tally.changes["flagged"]),
            ("cleared", "Cleared", tally.counts["cleared"], tally.changes["cleared"]),
            ("changed", "Changed severity", tally.counts["changed"], tally.changes["changed"]),
        ],
        "scores": [
            ("Current policy", tally.precision_recall("current")),
            ("Draft", tally.precision_recall("draft")),
        ],
        "appear": backtest.with_issues(job.project_id, appear[:50]),
        "vanish": backtest.with_issues(job.project_id, vanish[:50]),
        "draft_summary": describe(job.baseline, job.draft),
        "place": backtest.place_in_line(job),
        "slots": settings.LOOPBOARD_BACKTESTS_PER_PROJECT,
    }


def tuning_context(project: Project) -> dict:
    """Return the Tuning page's back-test parts: the latest job and the nightly trend."""
    latest = backtest.latest(project)
    nights = backtest.trend(project)
    rows = []
    for job in nights:
        tally = backtest.Tally.load(job.results)
        rows.append({"job": job, "tally": tally, "score": tally.precision_recall("current")})
    return {
        "latest": job_context(latest) if latest else None,
        "nights": nights,
        "night_rows": list(reversed(rows)),
        "trend": trend_chart(rows),
    }


def trend_chart(rows: list[dict], width: int = 420, height: int = 90) -> SafeString:
    """Return the nightly trend: flagged runs per night (columns), precision and recall (lines).

    `rows` are tuning_context's, oldest first. Precision and recall are drawn only for nights
    that had labels (else there is no line).
    """
    if not rows:
        return mark_safe("")
    pad_t, pad_b = 6, 16
    inner = height - pad_t - pad_b
    col = width / len(rows)
    nights = [row["job"] for row in rows]
    tallies = [row["tally"] for row in rows]
    top = max(t.flagged_current for t in tallies) or 1
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" class="chart__bar chart__bar--flagged">'
        "<title>{}: {} of {} runs flagged</title></rect>",
        (
            (f"{i * col + 1:.1f}", f"{pad_t + inner * (1 - t.flagged_current / top):.1f}",
             f"{max(col - 2, 1):.1f}", f"{inner * t.flagged_current / top:.1f}",
             job.night.isoformat() if job.night else "", t.flagged_current, t.examined)
            for i, (job, t) in enumerate(zip(nights, tallies, strict=True))
        ),
    )  # fmt: skip
    lines = []
    for name in ("precision", "recall"):
        points = []
        for i, row in enumerate(rows):
            value = getattr(row["score"], name)
            if value is not None:
                points.append((i * col + col / 2, pad_t + inner * (1 - value), value))
        if points:
            lines.append(
                format_html(
                    '<polyline points="{}" class="chart__line chart__line--{}" fill="none"/>',
                    " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points),
                    name,
                )
            )
            lines.append(
                format_html_join(
                    "",
                    '<circle cx="{}" cy="{}" r="2.5" class="chart__dot chart__dot--{}">'
                    "<title>{} {}</title></circle>",
                    ((f"{x:.1f}", f"{y:.1f}", name, name, f"{v:.2f}") for x, y, v in points),
                )
            )
    axis = format_html(
        '<text x="0" y="{}" class="chart__axis">{}</text>'
        '<text x="{}" y="{}" class="chart__axis" text-anchor="end">{}</text>',
        height - 3,
        nights[0].night.strftime("%b %d") if nights[0].night else "",
        width,
        height - 3,
        nights[-1].night.strftime("%b %d") if nights[-1].night else "",
    )
    body = bars + mark_safe("".join(lines)) + axis  # noqa: S308 - format_html parts
    return format_html(
        '<svg class="chart chart--trend" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="flagged runs, precision and recall per night">{}</svg>',
        width,
        height,
        width,
        height,
        body,
    )
