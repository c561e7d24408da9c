"""Page builder and view: find the steps of one run that hold a piece of text.

A step matches when its tool name, its arguments, its result or its text holds the query,
case-insensitively (PostgreSQL's ILIKE over the step's columns, arguments and result as their
JSON text). Each match shows a snippet of the first field that holds it, with the query
marked; the template escapes every piece. At most MAX_MATCHES steps are listed, in order.

The search is bounded in time, as a web worker must not be held by one request: the query
runs in its own transaction with `SET LOCAL statement_timeout` (settings.
LOOPBOARD_FIND_TIMEOUT_MS), and when PostgreSQL cancels it the page says the search was cut
off instead of failing. Over a huge run a rare query can take that long: ILIKE reads every
step's text, arguments and result.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import OperationalError, connection, transaction
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


class CutOff(Exception):
    """The search ran past its statement timeout and PostgreSQL cancelled it."""


QUERY_CANCELED = "57014"  # SQLSTATE of a statement cancelled by statement_timeout
SET_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"  # SET LOCAL, with a parameter


def find(run: Run, query: str, timeout_ms: int | None = None) -> tuple[list[Match], bool]:
    """Return the first MAX_MATCHES steps of `run` that hold `query`, and whether there are
    more. Raise CutOff when the query takes longer than `timeout_ms` milliseconds (default
    settings.LOOPBOARD_FIND_TIMEOUT_MS; 0 is no bound)."""
    if timeout_ms is None:
        timeout_ms = settings.LOOPBOARD_FIND_TIMEOUT_MS
    steps = (
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
    try:
        # SET LOCAL lasts until the transaction ends: its own one in a request (autocommit),
        # so the bound is put back by hand for a caller already in a transaction (a test).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout')")
            (before,) = cursor.fetchone()
            cursor.execute(SET_TIMEOUT, [f"{max(timeout_ms, 0)}ms"])
            rows = list(steps)
            cursor.execute(SET_TIMEOUT, [before])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != QUERY_CANCELED:
            raise  # a lost database is not a slow search
        raise CutOff from exc
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
    found: list[Match] = []
    more = cut_off = False
    if query:
        try:
            found, more = find(run, query)
        except CutOff:
            cut_off = True
    context = run_header_context(run) | {
        "query": query,
        "found": found,
        "more": more,
        "cut_off": cut_off,
        "timeout_seconds": f"{settings.LOOPBOARD_FIND_TIMEOUT_MS / 1000:g}",
        "max_matches": MAX_MATCHES,
    }
    return render(request, "runs/run_find.html", context)
