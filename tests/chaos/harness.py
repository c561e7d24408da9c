"""The chaos harness: loopboard started as a user runs it (`loopboard serve --no-demo`) on a
fresh PostgreSQL database and the real broker, two projects with API keys, and the helpers
the chaos tests use to upload through the HTTP API, poll until analyzed and measure.

Each test module gets its own database (a copy of one migrated once per session) and its own
`loopboard serve`, so the load one fault leaves behind never reaches the next test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import psycopg
import redis
import requests

ROOT = Path(__file__).resolve().parents[2]
VAR = ROOT / "var"
START_TIMEOUT = 180  # seconds for `loopboard serve` to print its banner on a loaded machine
# Extra seconds a measurement keeps waiting past its bound, so a figure can be taken where the
# bound does not hold (the "before" figures); the test fails past its bound all the same.
PATIENCE = float(os.environ.get("LOOPBOARD_CHAOS_PATIENCE", "0"))

FIGURES: list[tuple[str, str, float | None, float]] = []  # (test, what, seconds, bound)

SETUP = """
import json
from django.contrib.auth import get_user_model
from runs.models import Membership, Project
user = get_user_model().objects.create_user("chaos", password="chaos-pw-123", is_staff=True)
for slug in ("alpha", "beta"):
    project = Project.objects.create(name=slug.title(), slug=slug)
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
"""


def database_urls(name: str) -> tuple[str, str]:
    """Return (URL of the server's maintenance database, URL of database `name`) on the
    server of DATABASE_URL."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        raise RuntimeError(
            "tests/chaos need DATABASE_URL on a real PostgreSQL (and CELERY_BROKER_URL on a "
            "real broker): they start `loopboard serve` against them"
        )
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/postgres")), urlunsplit(parts._replace(path=f"/{name}"))


def base_name() -> str:
    database_urls("")  # fails with a clear message without a real PostgreSQL
    return urlsplit(os.environ["DATABASE_URL"]).path.lstrip("/") or "loopboard"


def recreate_database(name: str, template: str | None = None) -> str:
    """Drop and create database `name` (a copy of `template` when given); return its URL."""
    admin, url = database_urls(name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return url


def drop_database(name: str) -> None:
    admin, _ = database_urls(name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def flush_broker() -> None:
    """Empty the broker's Redis database (this run's own, CELERY_BROKER_URL), so no message
    of an earlier module (another database's ids) reaches this module's workers."""
    url = os.environ.get("CELERY_BROKER_URL", "")
    if url.startswith("redis"):
        redis.Redis.from_url(url).flushdb()


def serve_env(database_url: str, broker_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env |= {
        "DATABASE_URL": database_url,
        "SECRET_KEY": env.get("SECRET_KEY") or "chaos-only-not-secret",
        "LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS": "true",  # the slow receiver runs on 127.0.0.1
        "LOOPBOARD_API_RATE": "1000",
        "LOOPBOARD_API_BURST": "5000",
        "SECURE_COOKIES": "false",  # the staff login of the back-test form, over plain http
        "PYTHONPATH": str(ROOT),  # the checkout under test, whatever the venv points at
    }
    if not env.get("CELERY_BROKER_URL"):
        env["LOOPBOARD_BROKER_DIR"] = str(broker_dir)
    env.pop("LOOPBOARD_EMBEDDED", None)
    return env


def manage(env: dict[str, str], *args: str, code: str | None = None) -> str:
    command = [sys.executable, str(ROOT / "manage.py"), *args]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, input=code
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout.strip()


def migrate_template(name: str) -> None:
    """Create database `name` and migrate it once: each module's database is a copy of it."""
    url = recreate_database(name)
    manage(serve_env(url, VAR / "chaos-broker"), "migrate", "--noinput", "-v", "0")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Serve:
    """One `loopboard serve --no-demo` launcher and the log it writes."""

    env: dict[str, str]
    port: int
    log_path: Path
    process: subprocess.Popen | None = None
    log: Any = None

    def start(self) -> None:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        mark = self.log_path.stat().st_size
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loopboard.cli", "serve", "--no-demo", "--port",
             str(self.port)],
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            process_group=0,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if b"running at" in self.log_path.read_bytes()[mark:]:
                return
            assert self.process.poll() is None, f"serve exited:\n{self.tail()}"
            time.sleep(0.2)
        raise AssertionError(f"serve did not start in {START_TIMEOUT}s:\n{self.tail()}")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def workers(self) -> list[psutil.Process]:
        """Every Celery process the launcher started: the pools' parents and their children."""
        found = []
        for process in self.descendants():
            try:
                if any("celery" in part for part in process.cmdline()[:3]):
                    found.append(process)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """Stop it as Ctrl-C does (the launcher stops its children), then kill what is left."""
        if self.process is None:
            return
        children = self.descendants()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _, alive = psutil.wait_procs(children, timeout=10)
        for process in alive:
            process.kill()
        psutil.wait_procs(alive, timeout=10)
        self.log.close()

    def tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


@dataclass
class Board:
    """The live server and its two projects: alpha (the one that makes trouble) and beta
    (the one whose small uploads must not wait)."""

    url: str
    keys: dict[str, str]
    database_url: str
    serve: Serve
    name: str
    sessions: dict[str, requests.Session] = field(default_factory=dict)

    def http(self, project: str) -> requests.Session:
        if project not in self.sessions:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {self.keys[project]}"
            self.sessions[project] = session
        return self.sessions[project]

    def api(self, project: str, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.http(project).request(method, self.url + path, timeout=60, **kwargs)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    def upload(self, project: str, data: bytes, name: str) -> int:
        """POST /api/traces (the raw body, as `curl --data-binary`); return the trace id."""
        answer = self.api(project, "POST", f"/api/traces?name={name}", data=data)
        assert not answer["duplicate"], answer
        return answer["trace_id"]

    def trace(self, project: str, trace_id: int) -> dict[str, Any]:
        return self.api(project, "GET", f"/api/traces/{trace_id}")

    def wait_trace(
        self, project: str, trace_id: int, statuses: tuple[str, ...], timeout: float
    ) -> dict[str, Any] | None:
        """Poll GET /api/traces/{id} until its status is one of `statuses` (or failed);
        None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            trace = self.trace(project, trace_id)
            if trace["status"] in statuses or trace["status"] == "failed":
                return trace
            if time.monotonic() > deadline:
                return None
            time.sleep(0.25)

    def wait_analyzed(self, project: str, trace_id: int, timeout: float) -> dict[str, Any]:
        trace = self.wait_trace(project, trace_id, ("analyzed",), timeout)
        assert trace is not None, (
            f"trace {trace_id} is still {self.trace(project, trace_id)['status']} after "
            f"{timeout:.0f}s\n{self.serve.tail()}"
        )
        assert trace["status"] == "analyzed", trace
        return trace

    def warm_up(self) -> None:
        """Wait until the workers take work: the banner comes once the web server answers,
        the worker pools may start seconds later on a loaded machine."""
        deadline = time.monotonic() + START_TIMEOUT
        for project in ("alpha", "beta"):
            while True:  # gunicorn's workers may still be loading Django after a restart
                try:
                    trace_id = self.upload(project, small_trace(), "warm-up.jsonl")
                    break
                except requests.RequestException:
                    assert time.monotonic() < deadline, self.serve.tail()
                    self.sessions.clear()
                    time.sleep(1)
            self.wait_analyzed(project, trace_id, max(10, deadline - time.monotonic()))

    def measure(self, test: str, what: str, bound: float) -> float | None:
        """Upload a small looping trace of beta's, poll until it is analyzed; record and
        print the seconds it took (None: not within the bound plus PATIENCE)."""
        started = time.monotonic()
        trace_id = self.upload("beta", small_trace(), f"small-{uuid.uuid4().hex[:6]}.jsonl")
        trace = self.wait_trace("beta", trace_id, ("analyzed",), max(bound, bound + PATIENCE))
        seconds = time.monotonic() - started if trace else None
        if trace is not None:
            assert trace["status"] == "analyzed", trace
            runs = [self.api("beta", "GET", f"/api/runs/{i}") for i in trace["run_ids"]]
            assert [run["verdict"] for run in runs] == ["stop"], runs  # really analyzed
        FIGURES.append((test, what, seconds, bound))
        shown = f"{seconds:.1f} s" if seconds is not None else f"> {bound + PATIENCE:.0f} s"
        print(f"\nchaos: {test}: {what}: beta's upload analyzed in {shown} (bound {bound:.0f} s)")
        return seconds

    def sql(self, query: str, *params: Any) -> list[tuple]:
        """Read the server's database (the tests' checks; the server is the only writer)."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def wait_sql(self, query: str, timeout: float) -> Any:
        """Poll a one-value query until its value is truthy; return the last value."""
        deadline = time.monotonic() + timeout
        while not (value := self.sql(query)[0][0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        return value

    def login(self) -> requests.Session:
        """A browser-like session of the staff member `chaos` (the back-test form is a page)."""
        session = requests.Session()
        page = session.get(self.url + "/accounts/login/", timeout=30)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = session.post(
            self.url + "/accounts/login/",
            data={"username": "chaos", "password": "chaos-pw-123", "csrfmiddlewaretoken": token},
            headers={"Referer": self.url + "/accounts/login/"},
            allow_redirects=False,
            timeout=30,
        )
        assert answer.status_code == 302, answer.text[:2000]
        return session


def assert_within(seconds: float | None, bound: float, what: str, board: Board) -> None:
    assert seconds is not None and seconds <= bound, (
        f"{what}: beta's upload took {seconds if seconds is not None else 'over ' + str(bound)}"
        f" s, bound {bound} s\n{board.serve.tail()}"
    )


@contextmanager
def board(name: str, template: str) -> Iterator[Board]:
    """A fresh database copied from the session's template, the broker emptied, `loopboard
    serve --no-demo` on a free port, and the projects alpha and beta with admin keys."""
    database = f"{base_name()}_chaos_{name}"
    url = recreate_database(database, template=template)
    flush_broker()
    VAR.mkdir(exist_ok=True)
    log = VAR / f"chaos-{name}.log"
    log.write_bytes(b"")
    env = serve_env(url, VAR / f"chaos-broker-{name}")
    server = Serve(env=env, port=free_port(), log_path=log)
    manage(env, "shell", "-c", SETUP)
    keys = {slug: manage(env, "create_api_key", slug, "chaos") for slug in ("alpha", "beta")}
    server.start()
    try:
        live = Board(f"http://127.0.0.1:{server.port}", keys, url, server, name)
        live.warm_up()
        yield live
    finally:
        server.stop()
        flush_broker()
        drop_database(database)


# --- traces -------------------------------------------------------------------------------


def line(run: str, tool: str, args: dict, result: Any = "ok") -> str:
    return json.dumps(
        {"type": "tool_call", "run_id": run, "tool": tool, "args": args, "result": result,
         "status": "ok"},
        separators=(",", ":"),
    )  # fmt: skip


def small_trace() -> bytes:
    """One run of 8 identical calls (a loop the defaults stop), unique so never a duplicate."""
    nonce = uuid.uuid4().hex
    return "\n".join(
        line("small", "fetch_status", {"job": nonce}, {"state": "pending"}) for _ in range(8)
    ).encode()


def many_runs(runs: int, steps: int, *, loop_every: int = 5, tag: str = "") -> bytes:
    """A native JSONL file of `runs` runs of `steps` calls; every `loop_every`-th run repeats
    one call throughout (a loop), the others vary their arguments."""
    tag = tag or uuid.uuid4().hex[:8]
    out = []
    for r in range(runs):
        run = f"{tag}-{r:06d}"
        looping = r % loop_every == 0
        for s in range(steps):
            args = {"q": f"{run}"} if looping else {"q": f"{run}-{s}"}
            out.append(line(run, "search", args, {"hits": 0 if looping else s}))
    return ("\n".join(out) + "\n").encode()


# --- a slow receiver ----------------------------------------------------------------------


class TrickleReceiver:
    """A real HTTP server that reads each request and answers one byte every `every`
    seconds, for as long as the client stays: a receiver whose answer never ends."""

    def __init__(self, every: float = 3.0) -> None:
        self.every = every
        self.connections = 0
        self.closed = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.5)
        threading.Thread(target=self.accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.trickle, args=(conn,), daemon=True).start()

    def trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + b"X-Slow: " + b"z" * 10_000
        conn.settimeout(1)
        try:
            with contextlib.suppress(TimeoutError):
                conn.recv(65536)  # the request (headers and a small body)
            for byte in answer:
                if self.closed.wait(self.every):
                    return
                conn.sendall(bytes([byte]))
        except OSError:
            pass  # the client gave up
        finally:
            conn.close()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
