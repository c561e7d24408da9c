"""The back-test on the Tuning page: start it, its progress block (htmx, 286 once done), its
page without JavaScript, cancel, results and labels, the nightly trend, and who may see it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.models import BacktestJob, Finding
from runs.services import backtest, labels
from tests.helpers import looping_trace
from tests.runs.web.test_pages import tuning_post

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


@pytest.fixture
def staff(user):
    user.is_staff = True
    user.save()
    return user


@pytest.fixture
def runs(project, process):
    """Two runs of slow_search: 2 calls (ok) and 3 calls (warn)."""
    two = process(project, looping_trace(2, tool="slow_search"), name="two.jsonl").runs.get()
    three = process(project, looping_trace(3, tool="slow_search"), name="three.jsonl").runs.get()
    return two, three


def start_post(rows: list[dict], **range_fields: str) -> dict:
    data = tuning_post(rows)
    data |= {f"b-{k}": v for k, v in ({"range": "30d"} | range_fields).items()}
    return data


def start(client, project, rows=None, headers=None, **range_fields):
    rows = rows if rows is not None else [{"tool": "slow_*", "warn": "2", "stop": "9"}]
    url = reverse("runs:backtest_start", args=[project.slug])
    return client.post(url, start_post(rows, **range_fields), headers=headers or {})


def test_the_tuning_page_offers_a_back_test_over_a_range_or_a_sample(client_in, staff, project):
    html = client_in.get(reverse("runs:tuning", args=[project.slug])).content.decode()
    assert "Run back-test" in html and "Preview on the last" not in html
    for value in ("24h", "7d", "30d", "custom"):
        assert f'value="{value}"' in html
    assert 'name="b-sample"' in html and 'name="b-since"' in html
    assert f'formaction="{reverse("runs:backtest_start", args=[project.slug])}"' in html


def test_starting_without_javascript_redirects_to_a_refreshable_status_page(
    client_in, staff, project, runs
):
    response = start(client_in, project)
    job = BacktestJob.objects.get()
    assert response.status_code == 302 and response["Location"] == job.get_absolute_url()
    assert job.user == staff and job.draft["tools"]["slow_*"] == {"warn": 2, "stop": 9}
    assert (job.until - job.since).days == 30 and job.sample is None
    html = client_in.get(response["Location"]).content.decode()
    assert "Queued" in html and f'href="{job.get_absolute_url()}">Refresh' in html
    assert "Cancel" in html and 'hx-trigger="every 1s"' in html

    backtest.run_job(job.pk)
    html = client_in.get(response["Location"]).content.decode()
    assert "1 newly flagged" in html and "Refresh" not in html
    two, _ = runs
    assert f'href="{two.get_absolute_url()}"' in html and "two.jsonl" in html


def test_the_htmx_block_polls_until_the_job_is_done_then_answers_286(
    client_in, staff, project, runs
):
    response = start(client_in, project, headers=HX)
    html = response.content.decode()
    job = BacktestJob.objects.get()
    assert response.status_code == 200 and "<html" not in html and 'id="backtest"' in html
    assert f'hx-get="{job.get_absolute_url()}"' in html
    status = reverse("runs:backtest", args=[job.pk])
    assert client_in.get(status, headers=HX).status_code == 200  # still queued
    backtest.run_job(job.pk)
    done = client_in.get(status, headers=HX)
    assert done.status_code == 286
    assert "hx-trigger" not in done.content.decode()
    assert "1 newly flagged" in done.content.decode()


def test_a_custom_range_and_a_sample(client_in, staff, project, runs):
    start(client_in, project, **{"range": "custom", "since": "2020-01-01T00:00",
                                 "until": "2020-02-01T00:00", "sample": "5"})  # fmt: skip
    job = BacktestJob.objects.get()
    assert job.sample == 5 and job.since.year == 2020
    assert backtest.run_job(job.pk).total == 0  # no run was stored then


def test_invalid_drafts_and_ranges_are_reported_and_nothing_starts(client_in, staff, project):
    response = start(client_in, project, rows=[{"tool": "x", "warn": "-1"}])
    assert response.status_code == 400 and "error" in response.content.decode()
    response = start(client_in, project, **{"range": "custom", "since": "2020-02-01T00:00",
                                            "until": "2020-01-01T00:00"})  # fmt: skip
    assert "The range must end after it starts." in response.content.decode()
    html = start(client_in, project, rows=[{"tool": "x", "warn": "-1"}], headers=HX)
    assert 'class="error"' in html.content.decode()
    assert not BacktestJob.objects.exists()


def test_cancel_from_the_page(client_in, staff, project, runs):
    start(client_in, project)
    job = BacktestJob.objects.get()
    response = client_in.post(reverse("runs:backtest_cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert "Cancelled" in client_in.get(job.get_absolute_url()).content.decode()


def test_the_results_say_when_there_are_no_labels_and_show_precision_recall_when_there_are(
    client_in, staff, project, runs
):
    start(client_in, project)
    job = backtest.run_job(BacktestJob.objects.get().pk)
    html = client_in.get(job.get_absolute_url()).content.decode()
    assert "No labels in range" in html and "backtest__scores" not in html

    _, three = runs
    finding = Finding.objects.filter(run=three).exclude(severity="info").first()
    labels.label_finding(staff, finding, "real")
    start(client_in, project)
    job = backtest.run_job(BacktestJob.objects.first().pk)
    html = client_in.get(job.get_absolute_url()).content.decode()
    assert "No labels in range" not in html and "1 label in range" in html
    rows = re.findall(r'<th scope="row">(.*?)</th>\s*<td>(.*?)</td>\s*<td>(.*?)</td>', html)
    assert rows == [("Current policy", "1.00", "1.00"), ("Draft", "1.00", "1.00")]


def test_the_tuning_page_shows_the_latest_job_and_the_nightly_trend(
    client_in, staff, project, runs
):
    for job in backtest.nightly():
        backtest.run_job(job.pk)
    start(client_in, project)
    html = client_in.get(reverse("runs:tuning", args=[project.slug])).content.decode()
    assert 'id="backtest"' in html and "Queued" in html
    assert "Nightly back-test of the saved policy" in html
    assert 'class="chart chart--trend"' in html and "<rect" in html


def test_back_tests_are_for_staff_members_of_the_project(
    client_in, user, project, other_project, runs
):
    job = backtest.start(other_project, None, {}, *backtest_window())
    mine = backtest.start(project, None, {}, *backtest_window())
    # Not staff: nothing of it, even in one's own project.
    assert client_in.get(mine.get_absolute_url()).status_code == 404
    assert start(client_in, project).status_code == 404
    user.is_staff = True
    user.save()
    assert client_in.get(mine.get_absolute_url()).status_code == 200
    # Another project's job or project: 404, never 403.
    assert client_in.get(job.get_absolute_url()).status_code == 404
    assert client_in.post(reverse("runs:backtest_cancel", args=[job.pk])).status_code == 404
    assert start(client_in, other_project).status_code == 404
    job.refresh_from_db()
    assert job.status == "queued"


def backtest_window():
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    return now - timedelta(days=1), now


def test_an_issue_that_would_vanish_links_to_its_loop_issue(client_in, staff, project, runs):
    from runs.models import LoopIssue

    _, three = runs
    issue = LoopIssue.objects.get(project=project)  # three.jsonl's loop, grouped on analysis
    start(client_in, project, rows=[{"tool": "slow_search", "warn": "4"}])
    job = backtest.run_job(BacktestJob.objects.get().pk)
    html = client_in.get(job.get_absolute_url()).content.decode()
    vanish = html.split("Would vanish", 1)[1]
    assert f'href="{issue.get_absolute_url()}"' in vanish and "(open)" in vanish
    assert "1 cleared" in html


def test_a_nightly_jobs_page_shows_what_the_saved_policy_flagged(client_in, staff, project, runs):
    job = next(j for j in backtest.nightly() if j.project == project)
    backtest.run_job(job.pk)
    html = client_in.get(job.get_absolute_url()).content.decode()
    assert "Back-test (nightly)" in html and "the saved policy (version 0)" in html
    assert "1 flagged" in html and "newly flagged" not in html
