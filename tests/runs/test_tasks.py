"""Each task is registered under its one name, which queue.py and the beat schedule use."""

from __future__ import annotations

import pytest


def names() -> set[str]:
    from runs import task_names

    return {value for key, value in vars(task_names).items() if key.isupper()}


def test_every_task_is_registered_under_its_name():
    from loopboard.celery import app

    assert {name for name in app.tasks if name.startswith("runs.")} == names()


def test_the_beat_schedule_names_registered_tasks(settings):
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= names()


@pytest.mark.django_db
def test_the_analysis_task_of_a_run_whose_steps_expired_ends_quietly(project):
    """A re-analysis queued before retention took the run's steps writes nothing and does
    not fail (the service refuses it: issues.StepsExpired)."""
    from django.utils import timezone

    from runs import tasks
    from runs.models import Run, Trace

    trace = Trace.objects.create(project=project, name="t", sha256="c" * 64, size=1, raw=b"x")
    run = Run.objects.create(
        project=project, trace=trace, external_id="r", name="r", verdict="stop",
        steps_expired_at=timezone.now(),
    )  # fmt: skip
    tasks.analyze_run.run(run.pk)
    run.refresh_from_db()
    assert run.verdict == "stop" and run.analyzed_at is None
