"""`loopboard serve`: the banner once the web server answers, children that die with it, and
an embedded PostgreSQL whose list of users forgets the dead."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loopboard import embedded
from tests.runs.services.test_worker import worker_env

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.django_db(transaction=True)
def test_the_banner_waits_for_the_server_and_a_killed_launcher_takes_its_children(tmp_path):
    port = free_port()
    log = open(tmp_path / "serve.log", "w+b")  # noqa: SIM115 - read back below
    launcher = subprocess.Popen(
        [sys.executable, "-m", "loopboard.cli", "serve", "--no-demo", "--port", str(port),
         "--web-workers", "1", "--worker-concurrency", "1"],
        cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline
            and b"running at" not in (tmp_path / "serve.log").read_bytes()
        ):
            assert launcher.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        assert answers(port)  # the banner came once the server answered
        children = psutil.Process(launcher.pid).children(recursive=True)
        assert len(children) >= 3  # gunicorn master and worker, celery
        direct = psutil.Process(launcher.pid).children()
        workers = [p.cmdline() for p in direct if "loopboard.celery" in p.cmdline()]
        # one worker per queue, each under its own name; beat in exactly one
        names = sorted(c[c.index("--hostname") + 1] for c in workers if "--hostname" in c)
        assert names == ["bulk@%h", "delivery@%h", "interactive@%h"], workers
        queues = sorted(c[c.index("--queues") + 1] for c in workers if "--queues" in c)
        assert queues == ["bulk", "delivery", "interactive,celery"]
        assert sum("--beat" in c for c in workers) == 1
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
        assert not answers(port)
    finally:
        for process in [*children, launcher]:
            if (
                process.poll() is None
                if isinstance(process, subprocess.Popen)
                else process.is_running()
            ):
                process.kill()


def test_the_embedded_server_forgets_users_that_died(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".handle_pids.json").write_text(json.dumps([os.getpid(), dead.pid]))
    assert embedded.forget_dead_handles(tmp_path) == [os.getpid()]
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [os.getpid()]


def wait_for_banner(launcher: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and b"running at" not in log.read_bytes():
        assert launcher.poll() is None, log.read_text()
        time.sleep(0.2)
    assert b"running at" in log.read_bytes(), log.read_text()


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_shuts_down_cleanly_without_killing_a_worker(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the launcher
    and every child it started. The web server and the workers stop gracefully, so the log
    has no SIGKILL and no traceback, even with a browser's idle connections open (a
    preconnect that never sends a request once held a sync web worker until gunicorn
    SIGKILLed it: "Perhaps out of memory?")."""
    port = free_port()
    path = tmp_path / "serve.log"
    log = open(path, "w+b")  # noqa: SIM115 - read back below
    launcher = subprocess.Popen(
        [sys.executable, "-m", "loopboard.cli", "serve", "--no-demo", "--port", str(port),
         "--web-workers", "2", "--worker-concurrency", "1"],
        cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
        process_group=0,  # its own group, as a shell gives a foreground job
    )  # fmt: skip
    try:
        wait_for_banner(launcher, path)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        time.sleep(1)  # accepted by the web workers, and no request sent
        os.killpg(launcher.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        assert launcher.wait(timeout=60) == 0, path.read_text()
        for sock in idle:
            sock.close()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    text = path.read_text()
    assert "Stopped." in text
    assert "SIGKILL" not in text, text
    assert "Perhaps out of memory" not in text, text
    assert "Traceback" not in text, text
    assert not answers(port)


def embedded_env(var_dir: Path) -> dict[str, str]:
    """This process's environment with nothing set: the embedded default, in var_dir."""
    unset = ("DATABASE_URL", "LOOPBOARD_EMBEDDED", "SECRET_KEY", "CELERY_BROKER_URL")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return env | {"LOOPBOARD_VAR_DIR": str(var_dir), "LOOPBOARD_BROKER_DIR": str(var_dir / "b")}


def postmaster(var_dir: Path) -> int | None:
    """The pid of the embedded PostgreSQL in var_dir while it runs, else None."""
    try:
        pid = int((var_dir / "pg" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def stop_postmaster(var_dir: Path) -> None:
    if pid := postmaster(var_dir):
        os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
        psutil.wait_procs([psutil.Process(pid)], timeout=30)


def test_a_command_that_started_the_embedded_postgresql_stops_it(tmp_path):
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "check", "--database", "default"],
            cwd=ROOT, env=embedded_env(tmp_path), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "pg" / "PG_VERSION").exists()  # it did start one
        assert postmaster(tmp_path) is None  # and stopped it on the way out
    finally:
        stop_postmaster(tmp_path)


def test_a_command_leaves_the_embedded_postgresql_to_a_server_that_uses_it(tmp_path):
    env = embedded_env(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", str(free_port())],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while postmaster(tmp_path) is None and time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()
            time.sleep(0.5)
        pid = postmaster(tmp_path)
        assert pid is not None
        done = subprocess.run(
            [sys.executable, "manage.py", "check", "--database", "default"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert postmaster(tmp_path) == pid  # the server still has its database
        server.send_signal(signal.SIGINT)  # Ctrl-C
        server.wait(timeout=30)
        deadline = time.monotonic() + 30
        while postmaster(tmp_path) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert postmaster(tmp_path) is None  # the last user stopped it
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        stop_postmaster(tmp_path)
