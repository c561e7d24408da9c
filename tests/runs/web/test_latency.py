"""The Time tab, one clock on every page, per-step usage in the timeline, previous and next."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from runs.models import Run
from runs.web import latency
from tests.helpers import call, message, native_jsonl

DATA = Path(__file__).resolve().parents[2] / "data" / "importers"
T0 = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def timed_trace() -> bytes:
    return native_jsonl(
        message("user", "go", ts=at(0)),
        call("search", {"q": "<b>x</b>"}, "r", ts=at(1), ended_at=at(3)),
        message(
            "assistant",
            "thinking",
            ts=at(13),
            ended_at=at(14),
            tokens_in=1200,
            tokens_out=300,
            cost=0.0125,
        ),
        call("<script>alert(1)</script>", {}, "r", ts=at(14), ended_at=at(20)),
    )


@pytest.fixture
def timed_run(project, process):
    return process(project, timed_trace()).runs.get()


@pytest.mark.django_db
def test_the_waterfall_places_each_step_with_its_duration_and_gap(timed_run):
    w = latency.waterfall(timed_run)
    assert w.seconds == 20 and w.total == 4 and w.next_from is None
    search, thinking, last = w.bars[1], w.bars[2], w.bars[3]
    assert search.left == 5 and search.width == 10 and search.duration == 2
    assert thinking.gap == 10  # search ended at 3 s, the next step began at 13 s
    assert last.left == 70 and last.width == 30 and last.gap is None


@pytest.mark.django_db
def test_a_huge_run_opens_in_pages(project, process):
    events = [call("poll", {"i": i}, "r", ts=at(i), ended_at=at(i + 0.5)) for i in range(30)]
    run = process(project, native_jsonl(*events)).runs.get()
    w = latency.waterfall(run, limit=10)
    assert w.shown == 10 and w.total == 30 and w.next_from == 10 and w.previous_from is None
    w = latency.waterfall(run, start=10, limit=10)
    assert w.first == 10 and w.previous_from == 0 and w.bars[0].gap == 0.5


@pytest.mark.django_db
def test_the_time_tab_shows_bars_and_escapes_trace_content(client_in, timed_run):
    page = client_in.get(reverse("runs:latency", args=[timed_run.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'aria-current="page">Time</a>' in html
    assert "left: 70.0%; width: 30.0%" in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert 'role="cell">10s</span>' in html  # the gap


@pytest.mark.django_db
def test_the_time_tab_is_not_shown_to_strangers(client, django_user_model, timed_run):
    client.force_login(django_user_model.objects.create_user("stranger"))
    assert client.get(reverse("runs:latency", args=[timed_run.pk])).status_code == 404


@pytest.mark.django_db
def test_the_timeline_shows_each_steps_duration_tokens_and_cost(client_in, timed_run):
    html = client_in.get(reverse("runs:detail", args=[timed_run.pk])).content.decode()
    assert "1,200 in / 300 out" in html and "$0.0125" in html
    assert '<span class="step__dur" title="duration">6.0s</span>' in html
    # and the header totals them
    assert "<dt>Tokens</dt><dd>1,200 in / 300 out</dd>" in html
    assert "<dt>Cost</dt><dd>$0.0125</dd>" in html


@pytest.mark.django_db
def test_the_step_page_writes_its_tokens_as_the_timeline_does(client_in, timed_run):
    html = client_in.get(reverse("runs:step", args=[timed_run.pk, 2])).content.decode()
    assert "1,200 in / 300 out tokens" in html and "1200 in" not in html


@pytest.mark.django_db
def test_the_step_page_links_to_the_previous_and_next_step(client_in, timed_run):
    def nav(seq: int) -> str:
        return client_in.get(reverse("runs:step", args=[timed_run.pk, seq])).content.decode()

    first, middle, last = nav(0), nav(1), nav(3)
    prev_link = f'rel="prev" accesskey="p" href="{reverse("runs:step", args=[timed_run.pk, 0])}"'
    next_link = f'rel="next" accesskey="n" href="{reverse("runs:step", args=[timed_run.pk, 2])}"'
    assert 'rel="prev"' not in first and 'rel="next"' in first
    assert prev_link in middle and next_link in middle
    assert 'rel="prev"' in last and 'rel="next"' not in last


@pytest.mark.django_db
def test_the_runs_list_shows_the_runs_own_start_and_when_it_was_received(client_in, timed_run):
    html = client_in.get(reverse("runs:list")).content.decode()
    assert '<time datetime="2026-03-04T10:00:00+00:00">Mar 4, 10:00</time>' in html
    assert "received <time" in html


@pytest.mark.django_db
def test_the_overview_counts_a_run_on_the_day_it_started(client_in, timed_run):
    started = datetime.now(UTC) - timedelta(days=10)
    Run.objects.filter(pk=timed_run.pk).update(started_at=started)
    series = client_in.get(reverse("runs:overview")).context["series"]
    by_day = {day: runs for day, runs, _ in series}
    assert by_day[timezone.localdate(started)] == 1
    assert by_day[timezone.localdate()] == 0


@pytest.mark.django_db
def test_an_epoch_timestamp_is_no_date(client_in, timed_run):
    Run.objects.filter(pk=timed_run.pk).update(started_at=datetime(1970, 1, 1, tzinfo=UTC))
    html = client_in.get(reverse("runs:list")).content.decode()
    assert "Jan 1, 00:00" not in html


@pytest.mark.django_db
def test_a_start_in_another_year_shows_its_year(client_in, timed_run):
    Run.objects.filter(pk=timed_run.pk).update(started_at=datetime(2021, 1, 1, tzinfo=UTC))
    html = client_in.get(reverse("runs:list")).content.decode()
    assert ">Jan 1 2021, 00:00</time>" in html


@pytest.mark.django_db
def test_a_codex_runs_tokens_appear_on_its_page(client_in, project, process):
    data = (DATA / "codex_rollout.jsonl").read_bytes()
    run = process(project, data, name="rollout.jsonl").runs.get()
    total = run.steps.aggregate(n=Sum("tokens_in"))["n"]
    assert total
    html = client_in.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "<dt>Tokens</dt>" in html and 'class="step__usage" title="tokens in / out"' in html
