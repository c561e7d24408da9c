"""The runs list's filters, sorting and keyset pagination.

Keyset, not OFFSET: each page continues after the last row's (sort value, id), so page 2000
of 100k runs costs what page 1 costs, on the (project, sort key, id) indexes.

Free text searches Run.search, a tsvector of the tool names plus a bounded sample of the
arguments (analysis.StepSample), with a GIN index. Each word is matched as a prefix
("web" finds web_search), all words must match.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from datetime import date, datetime, time

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q, QuerySet
from django.utils import timezone

from ..models import Run, Verdict
from . import storage

SORTS = {
    "new": ("created_at", "Newest received"),
    "score": ("stall_score", "Stall score"),
    "waste": ("waste_steps", "Waste"),
}
VERDICTS = [("flagged", "flagged (warn or stop)"), *[(v, v) for v in Verdict.values]]
MAX_WORDS = 8
MAX_ID = 2**63 - 1  # a bigint id


@dataclass
class RunFilters:
    verdict: str = ""
    detector: str = ""
    tool: str = ""
    format: str = ""
    project: str = ""
    since: date | None = None
    until: date | None = None
    q: str = ""
    sort: str = "new"

    def __post_init__(self) -> None:
        for item in fields(self):  # request text: PostgreSQL cannot compare with a NUL in it
            value = getattr(self, item.name)
            if isinstance(value, str):
                setattr(self, item.name, storage.clean_text(value))

    @classmethod
    def from_query(cls, params) -> RunFilters:
        """Return the filters in a query string; anything malformed is ignored."""
        texts = {
            name: (params.get(name) or "").strip()[:200]
            for name in ("verdict", "detector", "tool", "format", "project", "q")
        }
        return cls(
            **texts,
            sort=params.get("sort") if params.get("sort") in SORTS else "new",
            since=_date(params.get("since")),
            until=_date(params.get("until")),
        )

    def query(self) -> dict[str, str]:
        """Return the set filters as query parameters (for links that keep them)."""
        out = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value and not (item.name == "sort" and value == "new"):
                out[item.name] = value.isoformat() if isinstance(value, date) else value
        return out

    @property
    def active(self) -> bool:
        return any(k != "sort" for k in self.query())


def _date(value: str | None) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except ValueError:
        return None


def search_query(text: str) -> SearchQuery | None:
    """Return a prefix query over the words of text (letters and digits only), or None."""
    words = re.findall(r"[^\W_]+", text.lower())[:MAX_WORDS]
    if not words:
        return None
    raw = " & ".join(f"{word[:60]}:*" for word in words)
    return SearchQuery(raw, search_type="raw", config="simple")


def apply(runs: QuerySet[Run], f: RunFilters) -> QuerySet[Run]:
    """Return the runs that pass the filters."""
    if f.verdict == "flagged":
        runs = runs.filter(verdict__in=[Verdict.WARN, Verdict.STOP])
    elif f.verdict in Verdict.values:
        runs = runs.filter(verdict=f.verdict)
    if f.detector:
        runs = runs.filter(detectors__contains=[f.detector])
    if f.tool:
        runs = runs.filter(tools__contains=[f.tool])
    if f.format:
        runs = runs.filter(format=f.format)
    if f.project:
        runs = runs.filter(project__slug=f.project)
    tz = timezone.get_current_timezone()
    if f.since:
        runs = runs.filter(created_at__gte=datetime.combine(f.since, time.min, tz))
    if f.until:
        runs = runs.filter(created_at__lt=datetime.combine(f.until, time.max, tz))
    if f.q and (query := search_query(f.q)) is not None:
        runs = runs.filter(search=query)
    return runs


def cursor_of(run: Run, sort: str) -> str:
    """Return the keyset cursor after a run for a sort."""
    value = getattr(run, SORTS[sort][0])
    return f"{value.isoformat() if isinstance(value, datetime) else value}~{run.pk}"


def after_cursor(runs: QuerySet[Run], sort: str, cursor: str) -> QuerySet[Run]:
    """Return the runs after a cursor in the sort's order (descending), ignoring a bad one."""
    key = SORTS[sort][0]
    value, _, pk = (cursor or "").rpartition("~")
    if not (pk.isascii() and pk.isdigit()) or not value or int(pk) > MAX_ID:
        return runs
    try:
        parsed = datetime.fromisoformat(value) if key == "created_at" else float(value)
    except ValueError:
        return runs
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return runs
    # The redundant `key <= value` bounds the index range scan (an OR alone would not).
    return runs.filter(
        Q(**{f"{key}__lte": parsed}),
        Q(**{f"{key}__lt": parsed}) | Q(**{key: parsed, "pk__lt": int(pk)}),
    )


def page(runs: QuerySet[Run], f: RunFilters, cursor: str, size: int) -> tuple[list[Run], str]:
    """Return one page of runs in the chosen order and the cursor for the next ('' at end)."""
    key = SORTS[f.sort][0]
    runs = after_cursor(runs, f.sort, cursor).order_by(f"-{key}", "-pk")
    rows = list(runs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return rows, cursor_of(rows[-1], f.sort) if more and rows else ""
