"""`loopboard serve`: set up and start the web server and a Celery worker together.

With no DATABASE_URL this starts the embedded PostgreSQL (var/pg), migrates, creates
the demo login and sample runs, then runs gunicorn and a worker per queue (interactive,
bulk, delivery: see `pools`) until Ctrl-C. The
children die with the launcher, even when it is killed (SIGKILL) on Linux, and the banner
is printed once the web server answers.

The children run in their own process group, so a Ctrl-C in the terminal reaches only the
launcher, which then stops them gracefully (SIGTERM: gunicorn finishes its requests, the
worker its tasks) instead of each child getting the SIGINT at a different moment.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loopboard import embedded

BASE_DIR = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
LISTEN_TIMEOUT = 60  # seconds for the web server to start answering
# Seconds gunicorn gives its workers to finish on a stop; an idle connection is let go within
# about 7 (gthread waits 5 s for its first bytes, then the 2 s keep-alive).
WEB_GRACE = 10
STOP_TIMEOUT = 20  # seconds the launcher waits for each child before killing it


def die_with(parent: int):  # type: ignore[no-untyped-def]
    """Return a preexec_fn: the child gets SIGTERM when the launcher dies (Linux only)."""

    def arrange() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the launcher died before the request took effect
            os._exit(1)

    return arrange


def wait_until_listening(
    host: str, port: int, web: subprocess.Popen, stopping: Callable[[], bool]
) -> bool:
    """Wait until the web server accepts connections; False if it exited, timed out, or
    `stopping()` became true (Ctrl-C)."""
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while time.monotonic() < deadline and web.poll() is None and not stopping():
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


@dataclass(frozen=True)
class Pool:
    """One Celery worker process of `loopboard serve`: the queues it consumes."""

    name: str
    queues: tuple[str, ...]
    concurrency: int
    beat: bool = False


def pools(args: argparse.Namespace) -> list[Pool]:
    """The worker pools, one per queue (the settings' LOOPBOARD_QUEUES). The interactive one
    also drains `celery`, the one queue of earlier versions, and runs beat: exactly one beat,
    beside the work a person waits for, so the periodic recovery never queues behind bulk."""
    return [
        Pool("interactive", ("interactive", "celery"), max(1, args.worker_concurrency), True),
        Pool("bulk", ("bulk",), max(1, args.bulk_concurrency)),
        Pool("delivery", ("delivery",), max(1, args.delivery_concurrency)),
    ]


def worker_command(bin_dir: Path, pool: Pool) -> list[str]:
    """The `celery worker` command line of one pool."""
    command = [
        str(bin_dir / "celery"),
        "-A",
        "loopboard.celery",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        str(pool.concurrency),
        "--hostname",
        f"{pool.name}@%h",  # each pool its own name: one broker, three workers
        "--without-gossip",
        "--without-mingle",
        "--queues",
        ",".join(pool.queues),
    ]
    if pool.beat:
        command += ["--beat", "--schedule", str(BASE_DIR / "var" / "celerybeat-schedule")]
    return command


def manage(*args: str, env: dict[str, str]) -> None:
    """Run one manage.py command, stopping the launcher if it fails."""
    subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), *args], env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopboard serve", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2"))
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=int(os.environ.get("WORKER_CONCURRENCY", "2")),
        help="processes of the interactive pool (uploads, analysis, live issues, alerts)",
    )
    parser.add_argument(
        "--bulk-concurrency",
        type=int,
        default=int(os.environ.get("BULK_CONCURRENCY", "1")),
        help="processes of the bulk pool (back-tests, re-analyses, compare, retention)",
    )
    parser.add_argument(
        "--delivery-concurrency",
        type=int,
        default=int(os.environ.get("DELIVERY_CONCURRENCY", "2")),
        help="processes of the delivery pool (webhooks, Slack, email, digests)",
    )
    parser.add_argument("--no-demo", action="store_true", help="do not load the sample traces")
    args = parser.parse_args(argv)

    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    embedded_db = not env.get("DATABASE_URL")
    if embedded_db:
        print("Starting the embedded PostgreSQL (var/pg)…", flush=True)
        env["DATABASE_URL"] = embedded.database_url()
        env["LOOPBOARD_EMBEDDED"] = "true"
    if args.host not in ("127.0.0.1", "localhost", "0.0.0.0"):
        env.setdefault("ALLOWED_HOSTS", f"{args.host},127.0.0.1,localhost")

    try:
        manage("migrate", "--noinput", "-v", "0", env=env)
        manage("collectstatic", "--noinput", "-v", "0", env=env)
        # Nothing else runs yet, so whatever is unfinished was left by a worker that died.
        manage("requeue_stale", "--older-than", "0", env=env)
        if not args.no_demo:
            manage("seed_demo", *(["--user"] if embedded_db else []), env=env)
    except KeyboardInterrupt:
        print("Stopped before the server started.", flush=True)
        return 130

    stopping = False

    def stop(*_args) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    bin_dir = Path(sys.executable).parent
    web = subprocess.Popen(
        [
            str(bin_dir / "gunicorn"),
            "loopboard.wsgi",
            "--bind",
            f"{args.host}:{args.port}",
            "--workers",
            str(args.web_workers),
            # gthread, one thread: a request at a time per worker as with sync, but a
            # connection that sends nothing (a browser's preconnect, an idle keep-alive) waits
            # in the poller instead of holding the worker in a blocking read, so a stop does
            # not end in gunicorn SIGKILLing it ("Perhaps out of memory?") at the timeout.
            "--worker-class",
            "gthread",
            "--threads",
            "1",
            "--access-logfile",
            "-",
            "--graceful-timeout",
            str(WEB_GRACE),
        ],
        env=env,
        cwd=BASE_DIR,
        process_group=0,  # out of the terminal's group: Ctrl-C reaches only the launcher
        preexec_fn=die_with(os.getpid()),  # safe: the launcher has no threads
    )
    children = {"web server": web}
    for pool in pools(args):
        children[f"{pool.name} worker"] = subprocess.Popen(
            worker_command(bin_dir, pool),
            env=env,
            cwd=BASE_DIR,
            process_group=0,  # out of the terminal's group: Ctrl-C reaches only the launcher
            preexec_fn=die_with(os.getpid()),  # safe: the launcher has no threads
        )
    shown = "127.0.0.1" if args.host == "0.0.0.0" else args.host
    if not wait_until_listening(shown, args.port, web, lambda: stopping):
        if stopping:
            return stop_children(children, status=0)
        print(f"The web server did not start on {shown}:{args.port}; stopping.", flush=True)
        return stop_children(children, status=1)
    banner = [
        "",
        f"  loopboard is running at http://{shown}:{args.port}/",
        "  log in as demo / demo"
        if embedded_db
        else "  log in with your Django user (manage.py createsuperuser)",
        "  Press Ctrl-C to stop.",
        "",
    ]
    print("\n".join(banner), flush=True)
    status = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"The {name} exited with status {child.returncode}; stopping.", flush=True)
                stopping, status = True, 1
        time.sleep(0.3)
    return stop_children(children, status)


def stop_children(children: dict[str, subprocess.Popen], status: int) -> int:
    """Stop the web server and the workers (SIGTERM, then SIGKILL after STOP_TIMEOUT).

    SIGTERM is gunicorn's graceful stop (its workers finish their requests within WEB_GRACE
    seconds) and Celery's warm shutdown (each pool finishes its running tasks). A child still
    there at the deadline is killed with its whole process group (a worker's pool processes
    too); the tasks it held go back to the queue (acks_late)."""
    print("Stopping web server and workers…", flush=True)
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    print("Stopped.", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
