"""Small formatting filters for the pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import template
from django.db.models import Sum
from django.template.defaultfilters import date
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from detection import catalogue

from ..models import Label, Step

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """Return seconds as 0.4s, 12s, 3m 05s or 2h 10m."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60):02d}m"


@register.filter
def offset(seconds) -> str:
    """Return a time since the run started as +m:ss (or +h:mm:ss)."""
    if seconds is None:
        return ""
    total = int(max(float(seconds), 0))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return f"+{h}:{m:02d}:{s:02d}" if h else f"+{m}:{s:02d}"


@register.filter
def seqlist(seqs, limit: int = 100) -> str:
    """Return seqs as a space-separated list for a data attribute (bounded)."""
    return " ".join(str(int(s)) for s in list(seqs or [])[: int(limit)])


@register.filter
def tokens(value) -> str:
    if value is None:
        return ""
    value = int(value)
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:,}"


@register.filter
def detector_title(detector: str) -> str:
    """Return a detector's plain-words title."""
    return catalogue.title(str(detector))


@register.filter
def ago(moment) -> str:
    """Return how long ago a time was: 'just now' under a minute, else '3 minutes ago'."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"


@register.filter
def code_spans(text: str) -> SafeString:
    """Return a text (an issue title) as HTML: its `backticked` names as code, all escaped."""
    parts = str(text or "").split("`")
    return format_html_join(
        "",
        "{}",
        (
            (format_html("<code>{}</code>", part) if i % 2 else part,)
            for i, part in enumerate(parts)
        ),
    )


# A trace that carries 0 (or no real date) as a time says nothing about when it ran.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)


@register.filter
def real_time(moment):
    """Return a moment, or None for a zero/epoch timestamp that is no real date."""
    return moment if moment is not None and moment >= EARLIEST else None


@register.filter
def when(moment) -> str:
    """Return a moment as "Mar 4, 10:00", with the year when it is not this year's."""
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    same_year = local.year == timezone.localdate().year
    return date(local, "M j, H:i" if same_year else "M j Y, H:i")


@register.filter
def run_when(run) -> SafeString:
    """Return a run's own start time (from the trace, else received), with "received" below."""
    received = _time_tag(run.created_at)
    started = real_time(run.started_at)
    if started is None:
        return received
    return format_html('{}<br><span class="muted">received {}</span>', _time_tag(started), received)


def _time_tag(moment) -> SafeString:
    local = timezone.localtime(moment)
    return format_html('<time datetime="{}">{}</time>', local.isoformat(), when(local))


@register.simple_tag
def step_neighbors(step) -> dict:
    """Return the seqs of the run's step before and after this one (None at the ends)."""
    steps = Step.objects.filter(run_id=step.run_id)
    before = steps.filter(seq__lt=step.seq).order_by("-seq").values_list("seq", flat=True)
    after = steps.filter(seq__gt=step.seq).order_by("seq").values_list("seq", flat=True)
    return {"previous": before.first(), "next": after.first()}


@register.simple_tag
def run_usage(run) -> dict:
    """Return the run's total tokens in and out and its cost, where the trace has them."""
    return run.steps.aggregate(
        tokens_in=Sum("tokens_in"), tokens_out=Sum("tokens_out"), cost=Sum("cost")
    )


@register.simple_tag
def label_reasons() -> list[tuple[str, str]]:
    """The reasons a false alarm can be labeled with, (value, label), for a form's choices."""
    return list(Label.Reason.choices)
