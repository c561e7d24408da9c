"""Small formatting filters for the pages."""

from __future__ import annotations

from datetime import timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from detection import catalogue

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
