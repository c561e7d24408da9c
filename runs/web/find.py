"""Page builder and view: find the steps of one run that hold a piece of text.

A step matches when its tool name, its arguments, its result or its text holds the query,
case-insensitively (PostgreSQL's ILIKE over the step's columns, arguments and result as their
JSON text). Each match shows a snippet of the first field that holds it, with the query
marked; the template escapes every piece. At most MAX_MATCHES steps are listed, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..models import Run, Step
from ..services import access
from .run_page import run_header_context

MAX_MATCHES = 100
MAX_QUERY = 200  # characters of the query kept
AROUND = 70  # characters of context on each side of the match
FIELDS = ("tool", "args_text", "result_text", "text")  # searched in this order
LABELS = {"tool": "tool", "args_text": "arguments", "result_text": "result", "text": "text"}


@dataclass
class Match:
    step: Step
    field: str  # which field holds the query: tool, arguments, result or text
    before: str
    hit: str
    after: str


def clean_query(raw: str | None) -> str:
    """The query as searched: trimmed, bounded, without NUL (which PostgreSQL text refuses)."""
    return (raw or "").replace("\x00", "").strip()[:MAX_QUERY]


def find(run: Run, query: str) -> tuple[list[Match], bool]:
    """Return the first MAX_MATCHES steps of `run` that hold `query`, and whether there are
    more."""
    rows = list(
        Step.objects.filter(run=run)
        .annotate(args_text=Cast("args", TextField()), result_text=Cast("result", TextField()))
        .filter(
            Q(tool__icontains=query)
            | Q(text__icontains=query)
            | Q(args_text__icontains=query)
            | Q(result_text__icontains=query)
        )
        .only("run_id", "seq", "kind", "tool", "status", "text")  # with args/result_text
        .order_by("seq")[: MAX_MATCHES + 1]
    )
    return [_match(step, query) for step in rows[:MAX_MATCHES]], len(rows) > MAX_MATCHES


def _match(step: Step, query: str) -> Match:
    needle = query.casefold()
    for field in FIELDS:
        value = getattr(step, field, None) or ""
        at = value.casefold().find(needle)
        if at >= 0 and len(value.casefold()) == len(value):  # positions line up
            end = at + len(query)
            before = value[max(at - AROUND, 0) : at]
            if field == "tool":  # the call's arguments are the context of its name
                value += " " + (step.args_text or "")
            after = value[end : end + AROUND]
            return Match(
                step,
                LABELS[field],
                ("…" if at > AROUND else "") + before,
                value[at:end],
                after + ("…" if end + AROUND < len(value) else ""),
            )
    # Matched by PostgreSQL's case rules but not Python's: show the start of the first field.
    value = next((getattr(step, f) for f in FIELDS if getattr(step, f, None)), "")
    return Match(step, "", value[: 2 * AROUND], "", "")


@require_GET
@login_required
def run_find(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    query = clean_query(request.GET.get("q"))
    found, more = find(run, query) if query else ([], False)
    context = run_header_context(run) | {
        "query": query,
        "found": found,
        "more": more,
        "max_matches": MAX_MATCHES,
    }
    return render(request, "runs/run_find.html", context)
