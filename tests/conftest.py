"""Fixtures: users, projects, a logged-in client, and services run inline."""

from __future__ import annotations

import os

import pytest

# Django imports stay inside the fixtures so the engine and importer tests also run
# without Django (pytest -p no:django tests/detection tests/importers).


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker (gw0, gw1, ...) gets a broker of its own, so a worker process
    one test starts never takes a task another test sent (whose ids are rows of the other
    worker's database): the filesystem broker in LOOPBOARD_BROKER_DIR/<worker>, Redis with
    the prefix `<worker>:` on every key. The settings were loaded before this file, so they
    are changed here, and in the environment for the processes the tests start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not config.pluginmanager.hasplugin("django"):
        return
    from django.conf import settings

    from loopboard import embedded
    from loopboard.celery import app

    scheme = settings.CELERY_BROKER_URL.partition("://")[0]
    if scheme == "filesystem":
        base = os.environ.get("LOOPBOARD_BROKER_DIR") or str(embedded.VAR_DIR / "broker")
        os.environ["LOOPBOARD_BROKER_DIR"] = os.path.join(base, worker)
        options = embedded.broker_transport_options()
    elif scheme in ("redis", "rediss"):
        prefix = os.environ.get("LOOPBOARD_BROKER_PREFIX", "") + f"{worker}:"
        os.environ["LOOPBOARD_BROKER_PREFIX"] = prefix
        options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": prefix}
    else:
        raise pytest.UsageError(
            f"CELERY_BROKER_URL={settings.CELERY_BROKER_URL}: parallel tests give each worker "
            "a filesystem or Redis broker of its own; with this broker run them one at a time "
            "(make test TEST_WORKERS=0, or pytest -n 0)"
        )
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    app.conf.broker_transport_options = options


@pytest.fixture
def user(db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def project(user):
    from runs.models import Membership, Project

    project = Project.objects.create(name="Agents", slug="agents")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    return project


@pytest.fixture
def other_project(db):
    """A project alice does not belong to."""
    from django.contrib.auth import get_user_model

    from runs.models import Membership, Project

    stranger = get_user_model().objects.create_user("mallory", password="pw-mallory-123")
    project = Project.objects.create(name="Secret", slug="secret")
    Membership.objects.create(project=project, user=stranger)
    return project


@pytest.fixture
def client_in(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def process():
    """Return a function that stores bytes and runs ingest + analysis inline (no worker)."""
    from runs.services import analysis, ingest

    def run(project, data: bytes, name: str = "trace.jsonl", format: str = ""):
        trace, _ = ingest.store_trace(project, data, name=name, format=format)
        ingest.ingest_trace(trace.pk)
        for run_id in trace.runs.values_list("pk", flat=True):
            analysis.analyze_run(run_id)
        trace.refresh_from_db()
        return trace

    return run


@pytest.fixture
def key(project) -> str:
    """A plain admin API key of alice's project."""
    from runs.models import ApiKey

    return ApiKey.issue(project, "tests", scope=ApiKey.Scope.ADMIN)[1]


@pytest.fixture
def other_key(other_project) -> str:
    from runs.models import ApiKey

    return ApiKey.issue(other_project, "theirs")[1]


@pytest.fixture
def api(client, key):
    """A test client that sends alice's project key."""
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return client


@pytest.fixture
def receivers():
    from tests.receivers import Receiver

    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def eager(settings, django_capture_on_commit_callbacks):
    """Celery tasks run inline, on-commit hooks run at the end of each `with eager():` block,
    and local receivers are allowed."""
    from loopboard.celery import app

    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    settings.LOOPBOARD_ALERT_RETRY_SECONDS = 0
    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = saved
