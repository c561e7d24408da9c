"""Each task is registered under its one name, which queue.py and the beat schedule use."""

from __future__ import annotations


def names() -> set[str]:
    from runs import task_names

    return {value for key, value in vars(task_names).items() if key.isupper()}


def test_every_task_is_registered_under_its_name():
    from loopboard.celery import app

    assert {name for name in app.tasks if name.startswith("runs.")} == names()


def test_the_beat_schedule_names_registered_tasks(settings):
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= names()
