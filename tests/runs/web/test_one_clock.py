"""One clock (issue 27 part 4): the runs list, Issues (list and page) and the Overview date a
run by its own start, taken from the trace, and agree with each other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import LoopIssue
from tests.helpers import call, message, native_jsonl

pytestmark = pytest.mark.django_db


def test_the_runs_list_issues_and_the_overview_agree_on_a_runs_start(client_in, project, process):
    started = (datetime.now(UTC) - timedelta(days=3)).replace(
        hour=7, minute=5, second=0, microsecond=0
    )
    ts = started.timestamp()
    trace = native_jsonl(
        message("user", "find it", ts=ts),
        *[call("web_search", {"q": "same"}, {"hits": []}, ts=ts + 10 * (n + 1)) for n in range(6)],
    )
    run = process(project, trace).runs.get()
    assert run.started_at == started  # from the trace; it was received today
    local = timezone.localtime(started)
    shown = local.strftime("%b ") + str(local.day) + local.strftime(", %H:%M")  # "Dec 1, 07:05"
    if local.year != timezone.localdate().year:
        shown = local.strftime("%b ") + f"{local.day} {local.year}" + local.strftime(", %H:%M")
    stamp = f'<time datetime="{local.isoformat()}">{shown}</time>'

    runs_list = client_in.get(reverse("runs:list")).content.decode()
    assert stamp in runs_list  # the run's own start, "received" below it
    issue = LoopIssue.objects.get(project=project, tool="web_search")
    assert issue.last_seen == started and issue.first_seen == started
    issues = client_in.get(reverse("runs:issues")).content.decode()
    assert f'<time datetime="{local.isoformat()}">{shown}</time>' in issues
    detail = client_in.get(issue.get_absolute_url()).content.decode()
    assert local.strftime("%b ") + f"{local.day} {local.year}" + local.strftime(", %H:%M") in detail
    series = client_in.get(reverse("runs:overview")).context["series"]
    by_day = {day: runs for day, runs, _ in series}
    assert by_day[local.date()] == 1 and sum(by_day.values()) == 1  # its day, not today
