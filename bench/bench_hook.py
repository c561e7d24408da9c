"""Time one hook call as an agent makes it: a new Python process, the hook JSON on stdin.

    .venv/bin/python bench/bench_hook.py [--runs 20] [--old REV] [--url URL --key KEY]

An agent runs the hook twice per tool call (before and after), so its wall time is paid on
every call. Each row starts the process `--runs` times, the rows interleaved (so a busy
machine slows them alike), and prints min and median wall time and the median CPU time
(user + system, what the process itself costs, less swayed by a busy machine) in ms:

- `python -c pass`: starting the interpreter, the floor;
- `import loopboard.cli.hook`: the import alone;
- the hook (`loopboard hook claude-code pre`, through the environment's `loopboard` script),
  with the server down (a closed port: it fails open) and up;
- the same hook through `python -m loopboard.cli` (runpy costs a little more), and the old
  entry point that way (`--old`, a git revision, by default the last one before the lean
  entry point): its import and the two calls, with that revision's `loopboard.cli` on
  PYTHONPATH (every process runs outside the repository, so PYTHONPATH decides).

"Up" is a local stub that answers the check as loopboard does (`{"verdict": "ok", ...}`), so
the row measures the hook and not the server; give `--url` and `--key` to time a real
loopboard instead.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SCRIPT = str(Path(PYTHON).with_name("loopboard"))
OLD_REV = "9a2efbd"  # the last revision before the lean hook entry point
OLD_FILES = ("loopboard/__init__.py", "loopboard/cli/__init__.py", "loopboard/cli/__main__.py",
             "loopboard/cli/hook.py",
             "loopboard/cli/live_client.py")  # fmt: skip
PAYLOAD = json.dumps({
    "session_id": "bench-hook", "hook_event_name": "PreToolUse", "tool_name": "Bash",
    "tool_input": {"command": "make test"}, "tool_use_id": "toolu_1", "cwd": "/tmp",
})  # fmt: skip


class Stub(http.server.BaseHTTPRequestHandler):
    """Answers every POST as loopboard's live check answers an ok call."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - the http.server protocol
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"verdict": "ok", "findings": [], "message": "", "elapsed_ms": 0.1})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def old_tree(rev: str, into: Path) -> Path | None:
    """The old revision's hook modules under `into` (None when git cannot give them)."""
    for name in OLD_FILES:
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{name}"], capture_output=True, check=False
        )
        if shown.returncode != 0:
            return None
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
    return into


def timed(command: list[str], env: dict[str, str], stdin: str = "") -> tuple[float, float]:
    """Run one process; return its wall time and its CPU time (user + system) in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=env, cwd=env["HOME"]
    )  # not in the repository: its loopboard/ would shadow PYTHONPATH's old one
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command} failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--old", default=OLD_REV, help="git revision of the old entry point")
    parser.add_argument("--url", help="a real loopboard for the 'server up' rows")
    parser.add_argument("--key", help="its API key")
    args = parser.parse_args()

    stub = None
    if args.url:
        up_url, key = args.url, args.key or ""
    else:
        stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
        threading.Thread(target=stub.serve_forever, daemon=True).start()
        up_url, key = f"http://127.0.0.1:{stub.server_address[1]}", "lb_bench"
    home = tempfile.mkdtemp(prefix="bench-hook-")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPBOARD_", "PYTHON"))}
    base |= {"HOME": home, "XDG_CONFIG_HOME": f"{home}/.config", "LOOPBOARD_API_KEY": key}
    down = base | {"LOOPBOARD_URL": f"http://127.0.0.1:{closed_port()}"}
    up = base | {"LOOPBOARD_URL": up_url}
    hook = [SCRIPT, "hook", "claude-code", "pre"]
    rows: dict[str, tuple[list[str], dict[str, str], str]] = {
        "python -c pass": ([PYTHON, "-c", "pass"], base, ""),
        "import loopboard.cli.hook": ([PYTHON, "-c", "import loopboard.cli.hook"], base, ""),
        "hook, server down": (hook, down, PAYLOAD),
        "hook, server up": (hook, up, PAYLOAD),
        "hook via -m, server down": (
            [PYTHON, "-m", "loopboard.cli", "hook", "claude-code", "pre"],
            down,
            PAYLOAD,
        ),
    }
    with tempfile.TemporaryDirectory(prefix="bench-hook-old-") as folder:
        old = old_tree(args.old, Path(folder))
        if old is not None:
            old_hook = [PYTHON, "-m", "loopboard.cli", "hook", "claude-code", "pre"]
            path = {"PYTHONPATH": str(old)}
            rows[f"old ({args.old}) import"] = (
                [PYTHON, "-c", "import loopboard.cli.hook"], base | path, ""
            )  # fmt: skip
            rows[f"old ({args.old}) hook via -m, down"] = (old_hook, down | path, PAYLOAD)
            rows[f"old ({args.old}) hook via -m, up"] = (old_hook, up | path, PAYLOAD)
        else:
            print(f"(no old entry point: git cannot show {args.old})")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
        for command, env, stdin in rows.values():  # warm the caches once
            timed(command, env, stdin)
        for _ in range(args.runs):
            for name, (command, env, stdin) in rows.items():
                times[name].append(timed(command, env, stdin))
    if stub is not None:
        stub.shutdown()
    load = os.getloadavg()[0]
    print(
        f"hook wall time, {args.runs} runs each, load average {load:.2f} on {os.cpu_count()} cores"
    )
    print(f"{'':32} {'wall min':>9} {'wall median':>12} {'cpu median':>11}  (ms)")
    for name, values in times.items():
        wall = [w for w, _ in values]
        cpu = statistics.median(c for _, c in values) * 1000
        print(
            f"{name:32} {min(wall) * 1000:9.1f} {statistics.median(wall) * 1000:12.1f} {cpu:11.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
