"""PostgreSQL stopped and started again under load, for real (the machine's cluster): clients
see 202 or 503, never 500, /healthz answers all along, and every trace answered 202 is
analyzed afterwards, by the same worker, without a restart of loopboard."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest
from django.db import connection

from runs.models import Trace
from tests.helpers import looping_trace, message, native_jsonl
from tests.runs.services.test_worker import start_worker, stop_worker

CLUSTER = "/etc/postgresql"
URL = urlparse(os.environ.get("DATABASE_URL", ""))
LOCAL_CLUSTER = (
    shutil.which("pg_ctlcluster") is not None
    and os.path.isdir(CLUSTER)
    and URL.hostname in ("127.0.0.1", "localhost")
    and (URL.port or 5432) == 5432
)
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.worker,
    pytest.mark.skipif(
        not LOCAL_CLUSTER, reason="needs DATABASE_URL on this machine's PostgreSQL cluster"
    ),
]


def cluster(action: str) -> None:
    version = sorted(os.listdir(CLUSTER))[0]
    extra = ["-m", "fast"] if action == "stop" else []
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action, *extra],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def test_a_database_restart_under_load_loses_no_accepted_trace(live_server, key, project):
    statuses: list[int] = []
    accepted: list[int] = []
    auth = {"Authorization": f"Bearer {key}"}

    def send() -> None:
        with httpx.Client(base_url=live_server.url, headers=auth, timeout=20) as client:
            for i in range(40):
                body = looping_trace(3) + native_jsonl(message("user", f"upload {i}"))
                response = client.post(f"/api/traces?name=t{i}.jsonl", content=body)
                statuses.append(response.status_code)
                if response.status_code == 202:
                    accepted.append(response.json()["trace_id"])
                time.sleep(0.15)

    health: list[int | str] = []

    def watch_health() -> None:
        with httpx.Client(base_url=live_server.url, timeout=5) as client:
            while sender.is_alive():
                try:
                    health.append(client.get("/healthz").status_code)
                except httpx.HTTPError as exc:  # no answer within 5 s
                    health.append(type(exc).__name__)
                time.sleep(0.2)

    worker = start_worker(LOOPBOARD_STALE_SECONDS="3")
    sender = threading.Thread(target=send)
    watcher = threading.Thread(target=watch_health)
    try:
        sender.start()
        watcher.start()
        time.sleep(1.5)
        cluster("stop")
        time.sleep(2)
        cluster("start")
        sender.join(120)
        watcher.join(10)
        connection.close()
        assert set(health) <= {200, 503} and 503 in health and 200 in health, health
        assert 500 not in statuses and set(statuses) <= {202, 503}, statuses
        assert 503 in statuses and len(accepted) >= 10
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = Trace.objects.filter(pk__in=accepted, status=Trace.Status.ANALYZED).count()
            if done == len(accepted):
                break
            time.sleep(0.5)
        stuck = Trace.objects.filter(pk__in=accepted).exclude(status=Trace.Status.ANALYZED)
        assert not stuck.exists(), list(stuck.values_list("pk", "status", "error"))
    finally:
        if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"]).returncode != 0:
            cluster("start")
        stop_worker(worker)
