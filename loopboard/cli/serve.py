"""`loopboard serve`: set up and start the web server and a Celery worker together.

With no DATABASE_URL this starts the embedded PostgreSQL (var/pg), migrates, creates
the demo login and sample runs, then runs gunicorn and one worker until Ctrl-C. The
children die with the launcher, even when it is killed (SIGKILL) on Linux, and the banner
is printed once the web server answers.

The children run in their own process group, so a Ctrl-C in the terminal reaches only the
launcher, which then stops them gracefully (SIGTERM: gunicorn finishes its requests, the
worker its tasks) instead of each child getting the SIGINT at a different moment.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from loopboard import embedded

BASE_DIR = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
LISTEN_TIMEOUT = 60  # seconds for the web server to start answering


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
        "--worker-concurrency", type=int, default=int(os.environ.get("WORKER_CONCURRENCY", "2"))
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
            "--access-logfile",
            "-",
            "--graceful-timeout",
            "5",
        ],
        env=env,
        cwd=BASE_DIR,
        process_group=0,  # out of the terminal's group: Ctrl-C reaches only the launcher
        preexec_fn=die_with(os.getpid()),  # safe: the launcher has no threads
    )
    worker = subprocess.Popen(
        [
            str(bin_dir / "celery"),
            "-A",
            "loopboard.celery",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(args.worker_concurrency),
            "--without-gossip",
            "--without-mingle",
            "--queues",
            "celery,bulk",  # new work, and re-analyses after a policy change, in turn
            "--beat",  # one worker here: it runs the periodic recovery too
            "--schedule",
            str(BASE_DIR / "var" / "celerybeat-schedule"),
        ],
        env=env,
        cwd=BASE_DIR,
        process_group=0,  # out of the terminal's group: Ctrl-C reaches only the launcher
        preexec_fn=die_with(os.getpid()),  # safe: the launcher has no threads
    )
    shown = "127.0.0.1" if args.host == "0.0.0.0" else args.host
    children = {"web server": web, "worker": worker}
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
    """Stop the web server and the worker (SIGTERM, then SIGKILL after 15 s).

    SIGTERM is gunicorn's graceful stop (its workers finish their requests within the
    5-second graceful timeout) and Celery's warm shutdown."""
    print("Stopping web server and worker…", flush=True)
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 15
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    print("Stopped.", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
