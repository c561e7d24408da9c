"""Back-tests run at most LOOPBOARD_BACKTESTS_PER_PROJECT at once per project; the others
wait, queued, in line (shown on the back-test block), and start as slots free up. Two
workers claiming at the same moment never pass the limit together."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from runs.models import BacktestJob
from runs.services import backtest

DRAFT = {"defaults": {"warn": 2}, "tools": {}}


def queued_jobs(project, count: int) -> list[BacktestJob]:
    now = timezone.now()
    return [
        backtest.start(project, None, DRAFT, now - timedelta(days=1), now) for _ in range(count)
    ]


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    """The back-test ids queued (instead of sent to the broker)."""
    ids: list[int] = []
    monkeypatch.setattr(backtest.queue, "queue_backtest", ids.append)
    return ids


@pytest.mark.django_db
def test_a_project_runs_at_most_two_back_tests_and_the_rest_wait_in_line(
    user, project, other_project, client_in, settings, sent
):
    user.is_staff = True  # who may back-test
    user.save()
    assert settings.LOOPBOARD_BACKTESTS_PER_PROJECT == 2
    first, second, third, fourth = queued_jobs(project, 4)
    assert backtest._claim(first.pk) is not None
    assert backtest._claim(second.pk) is not None
    assert backtest._claim(fourth.pk) is None  # no slot
    assert backtest._claim(third.pk) is None
    for job in (third, fourth):
        job.refresh_from_db()
        assert job.status == BacktestJob.Status.QUEUED
    assert backtest.place_in_line(third) == 1
    assert backtest.place_in_line(fourth) == 2
    first.refresh_from_db()
    assert backtest.place_in_line(first) is None  # running
    page = client_in.get(reverse("runs:backtest", args=[fourth.pk]), headers={"HX-Request": "1"})
    assert "place in line: 2" in page.content.decode()
    # another project's back-test has slots of its own
    [theirs] = queued_jobs(other_project, 1)
    assert backtest._claim(theirs.pk) is not None
    # the first ends: its slot goes to the next in line, not to the youngest
    BacktestJob.objects.filter(pk=first.pk).update(status=BacktestJob.Status.DONE)
    sent.clear()
    assert backtest.start_next(project.pk) == 1
    assert sent == [third.pk]
    assert backtest._claim(fourth.pk) is None  # the third is still ahead of it
    assert backtest._claim(third.pk) is not None


@pytest.mark.django_db
def test_a_finished_back_test_starts_the_next_in_line(project, settings, sent):
    settings.LOOPBOARD_BACKTESTS_PER_PROJECT = 1
    first, second = queued_jobs(project, 2)
    sent.clear()
    job = backtest.run_job(first.pk)
    assert job.status == BacktestJob.Status.DONE
    assert sent == [second.pk]
    assert backtest.run_job(second.pk).status == BacktestJob.Status.DONE


@pytest.mark.django_db
def test_a_dead_workers_job_holds_no_slot(project, settings, sent):
    """A running job whose heartbeat went stale (its worker died) does not count."""
    settings.LOOPBOARD_BACKTESTS_PER_PROJECT = 1
    first, second = queued_jobs(project, 2)
    assert backtest._claim(first.pk) is not None
    stale = timezone.now() - timedelta(seconds=settings.LOOPBOARD_STALE_SECONDS + 5)
    BacktestJob.objects.filter(pk=first.pk).update(heartbeat_at=stale)
    assert backtest._claim(second.pk) is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limit", [1, 2])
def test_workers_claiming_at_the_same_moment_never_pass_the_limit(project, settings, sent, limit):
    settings.LOOPBOARD_BACKTESTS_PER_PROJECT = limit
    jobs = queued_jobs(project, 5)
    barrier = threading.Barrier(len(jobs))
    claimed: list[int] = []

    def claim(job_id: int) -> None:
        try:
            barrier.wait()
            if backtest._claim(job_id) is not None:
                claimed.append(job_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(job.pk,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(claimed) == [job.pk for job in jobs[:limit]]  # the oldest, and no more
    running = BacktestJob.objects.filter(project=project, status=BacktestJob.Status.RUNNING)
    assert running.count() == limit
