"""The conformance harness: a live loopboard web server, a real Celery worker on the real
broker, a project with an ingest API key, and the producer scripts that drive real agent
frameworks in their own virtualenvs (var/conformance/<venv>, built by `make conformance`).

A producer plays one agent session and exports it with the framework's own OTLP/HTTP
exporter to the live server; the test then polls the API until the session's run is
assembled and analyzed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.runs.api.test_otlp_http import gunicorn
from tests.runs.services.test_worker import start_worker, stop_worker, worker_env

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENVS = ROOT / "var" / "conformance"
PRODUCERS = HERE / "producers"

QUIET_SECONDS = 3  # spans of a trace whose root never comes are assembled after this
PRODUCER_TIMEOUT = 240  # seconds one producer may take (the first import of a framework is slow)
ANALYZED_TIMEOUT = 90  # seconds from the producer's exit until its run must be analyzed
# What an exporter (Python's or JavaScript's OpenTelemetry SDK) writes when an export fails.
EXPORT_ERROR = re.compile(
    r"failed to export|exception while exporting|error exporting|export.*(failed|error)"
    r"|transient error|OTLPExporterError",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Loopboard:
    """The live server a producer exports to, and the project (and key) it exports into."""

    url: str
    key: str
    project: Any

    def get(self, path: str) -> Any:
        """GET an API path with the project's key; return the decoded JSON answer."""
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.key}"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())


@pytest.fixture(scope="module")
def conformance_worker(django_db_setup, django_db_blocker):
    """One real Celery worker for the module's tests (starting one takes seconds), on the
    test database and the broker of CELERY_BROKER_URL; its log in var/conformance-worker.log."""
    log_path = ROOT / "var" / "conformance-worker.log"
    log_path.parent.mkdir(exist_ok=True)
    with django_db_blocker.unblock(), open(log_path, "wb") as log:
        process = start_worker(
            log, LOOPBOARD_OTLP_QUIET_SECONDS=str(QUIET_SECONDS), LOOPBOARD_STALE_SECONDS="10"
        )
        try:
            yield process
        finally:
            stop_worker(process)


@pytest.fixture(scope="module")
def gunicorn_url(django_db_setup, django_db_blocker):
    """A gunicorn serving loopboard on the test database, as `loopboard serve` runs it (the
    OpenTelemetry JS exporter streams its bodies chunked, which Django's live server cannot
    read); its log in var/conformance-gunicorn.log."""
    with django_db_blocker.unblock():
        env = worker_env(LOOPBOARD_OTLP_QUIET_SECONDS=str(QUIET_SECONDS))
    with gunicorn(ROOT / "var" / "conformance-gunicorn.log", env) as port:
        yield f"http://127.0.0.1:{port}"


def _board(url: str) -> Iterator[Loopboard]:
    """A fresh project with an ingest key on the server at url. Afterwards wait for the worker
    to be idle, so the database is not flushed under its feet."""
    from runs.models import ApiKey, Project

    slug = f"conformance-{uuid.uuid4().hex[:8]}"
    project = Project.objects.create(name="Conformance", slug=slug)
    key = ApiKey.issue(project, "conformance", scope=ApiKey.Scope.INGEST)[1]
    yield Loopboard(url=url, key=key, project=project)
    wait_until_idle()


@pytest.fixture
def loopboard(live_server, conformance_worker, settings, transactional_db):
    """A fresh project on Django's live server, the worker running."""
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = QUIET_SECONDS
    assert conformance_worker.poll() is None, "the conformance worker died: see its log"
    yield from _board(live_server.url)


@pytest.fixture
def gunicorn_loopboard(gunicorn_url, conformance_worker, transactional_db):
    """A fresh project on the gunicorn server, the worker running."""
    assert conformance_worker.poll() is None, "the conformance worker died: see its log"
    yield from _board(gunicorn_url)


def queue_length(app: Any, name: str) -> int:
    """Return how many messages wait in a broker queue (0 for one never declared)."""
    with app.connection_for_read() as connection:
        try:
            return connection.default_channel.queue_declare(queue=name, passive=True).message_count
        except connection.channel_errors:
            return 0


def wait_until_idle(timeout: float = 60) -> None:
    """Wait until the broker's queues are empty and the worker runs, holds and schedules no
    task (asked through Celery's remote control), twice in a row."""
    from loopboard.celery import app

    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:
        queued = sum(queue_length(app, name) for name in ("celery", "bulk"))
        inspect = app.control.inspect(timeout=1.0, limit=1)  # one worker answers
        held = [inspect.active(), inspect.reserved(), inspect.scheduled()]
        busy = queued or any(tasks for answer in held for tasks in (answer or {}).values())
        quiet = 0 if busy else quiet + 1
        time.sleep(0.5)


def run_producer(
    board: Loopboard, venv: str, producer: str, session: str, variant: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one producer script in its virtualenv: one agent session exported to the board.

    Fails the test, with the producer's output, when the virtualenv is missing or the
    producer does not exit 0, or its exporter reports an export error."""
    if venv == "node":  # a Node producer in node/, its packages installed there by npm ci
        modules = HERE / "node" / "node_modules"
        assert modules.exists(), f"{modules} is missing: `make conformance` installs it"
        command = ["node", str(HERE / "node" / producer), "--endpoint", board.url]
    else:
        python = VENVS / venv / "bin" / "python"
        assert python.exists(), f"{python} is missing: `make conformance` builds it"
        command = [str(python), str(PRODUCERS / producer), "--endpoint", board.url]
    command += ["--key", board.key, "--session", session]
    if variant:
        command += ["--variant", variant]
    env = dict(os.environ)
    if venv != "node":  # exporters a framework makes itself: seconds, as common.EXPORT_TIMEOUT
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "60"
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=PRODUCER_TIMEOUT, check=False,
        env=env,
    )  # fmt: skip
    output = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-6000:]}"
    assert done.returncode == 0, f"{producer} exited {done.returncode}\n{output}"
    assert not EXPORT_ERROR.search(done.stderr), f"{producer}: export error\n{output}"
    return done


def wait_for_runs(board: Loopboard, timeout: float = ANALYZED_TIMEOUT) -> list[dict[str, Any]]:
    """Poll the API until every span buffered for the project is assembled into a run and
    every run is analyzed, twice in a row a second apart (spans that arrive late rebuild a
    run); return the runs. Fails with the worker's log after `timeout` seconds."""
    from runs.models import OtlpSpanGroup, Trace

    deadline = time.monotonic() + timeout
    previous: list[tuple[int, str | None]] | None = None
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        runs = board.get("/api/runs?limit=100")["items"]
        waiting = OtlpSpanGroup.objects.filter(project=board.project, assembled=False).exists()
        state = sorted((run["id"], run["analyzed_at"]) for run in runs)
        settled = runs and not waiting and all(analyzed for _, analyzed in state)
        if settled and state == previous:
            return runs
        previous = state if settled else None
        time.sleep(1)
    failed = list(
        Trace.objects.filter(project=board.project)
        .exclude(error="")
        .values_list("error", flat=True)
    )
    log = (ROOT / "var" / "conformance-worker.log").read_text(errors="replace")[-3000:]
    pytest.fail(
        f"no settled, analyzed run after {timeout}s: runs {runs}, trace errors {failed}\n"
        f"worker log:\n{log}"
    )


def run_steps(board: Loopboard, run_id: int) -> list[dict[str, Any]]:
    """Return every step of a run, in order, through the steps API."""
    steps: list[dict[str, Any]] = []
    start: int | None = 0
    while start is not None:
        page = board.get(f"/api/runs/{run_id}/steps?from={start}&limit=500")
        steps += page["items"]
        start = page["next_from"]
    return steps
