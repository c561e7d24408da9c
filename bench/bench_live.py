"""Time live runs through HTTP with 2 gunicorn web workers: append + check at 1k, 10k and 100k
steps, beside the replaying `/api/check` (the stored run replayed on each call).

    .venv/bin/python bench/bench_live.py [--sizes 1000,10000,100000] [--calls 300] [--workers 2]

Uses the bench database of bench_pages.py (the configured one's name + "_bench", created when
missing; the embedded PostgreSQL when DATABASE_URL is unset), migrates it, makes a project and
a key, and starts `gunicorn loopboard.wsgi -w 2`. One live run grows to each size (batches of
500 steps through `POST .../steps`); at each size it times `--calls` single-step appends and
as many checks, one after the other, each on a new connection (gunicorn's sync workers close
it), so both workers answer and each catches up with what the other appended. The replaying
check is timed a few times only at each size (it is slow at 100k).

Server time is the `Server-Timing` header of the live endpoints (the view: queries, engine;
not the HTTP parsing). Client time minus the median of `GET /healthz` is printed beside it,
and for the replaying check (no header) it is the only figure. Prints p50 and p99 in ms.

Then the memory of one live run: what a Monitor holds (tracemalloc) after 1k, 10k and 100k
steps, for the benchmark's steps (their distinct call signatures printed beside) and for a
chain of parent links with 10 distinct signatures (a lane per step, as Claude Code's
transcripts link their entries): it follows the distinct signatures, not the length.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import bench_database_url  # noqa: E402 - the same bench database

import detection  # noqa: E402

TOOLS = ["read_file", "grep", "bash", "edit_file", "web_search", "list_dir", "run_tests"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_key(env: dict[str, str]) -> str:
    """Migrate the bench database and return an ingest key of a new project."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env=env, cwd=ROOT,
        check=True,
    )  # fmt: skip
    code = (
        "import time; from runs.models import ApiKey, Project; "
        "p = Project.objects.create(name='live bench', slug=f'live-bench-{time.time_ns()}'); "
        "print(ApiKey.issue(p, 'bench')[1])"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], env=env, cwd=ROOT, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def step(rng: random.Random, i: int) -> dict:
    """One generated step: mostly varied calls, some repeats and failures, a turn now and then."""
    if i % 200 == 0:
        return {"role": "user", "text": f"next task {i // 200}", "id": f"u{i}"}
    tool = rng.choice(TOOLS)
    args = {"path": f"src/m{rng.randrange(2000)}.py", "n": rng.randrange(50)}
    failed = rng.random() < 0.1
    return {
        "tool": tool,
        "args": args,
        "result": f"error: exit {rng.randrange(3)}" if failed else {"lines": rng.randrange(10**6)},
        "status": "error" if failed else "ok",
        "id": f"c{i}",
    }


class Client:
    def __init__(self, port: int, key: str) -> None:
        self.port, self.key = port, key

    def call(self, method: str, path: str, body: object = None) -> tuple[float, float | None, dict]:
        """Return (client ms, Server-Timing ms or None, JSON answer)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {raw[:300]!r}")
        timing = response.getheader("Server-Timing")
        server = float(timing.split("dur=")[1]) if timing else None
        return elapsed, server, json.loads(raw) if raw.startswith((b"{", b"[")) else {}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=300, help="appends and checks per size")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    env = dict(os.environ)
    env["DATABASE_URL"] = bench_database_url()
    env.update(LOOPBOARD_API_RATE="1000000", LOOPBOARD_API_BURST="1000000")
    env.setdefault("SECRET_KEY", "bench")
    key = make_key(env)
    port = free_port()
    web = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "loopboard.wsgi", "-w", str(args.workers),
         "--bind", f"127.0.0.1:{port}", "--timeout", "300", "--log-level", "warning"],
        env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        client = Client(port, key)
        for _ in range(100):
            try:
                client.call("GET", "/healthz")
                break
            except (OSError, RuntimeError):
                time.sleep(0.2)
        run(client, sizes, args.calls)
    finally:
        web.terminate()
        web.wait(timeout=30)
    memory(sizes)


def engine_steps(size: int) -> Iterator[detection.Step]:
    """The benchmark's steps as the engine's (what an append observes)."""
    rng = random.Random(15)
    for i in range(size):
        call = step(rng, i)
        kind = "tool_call" if call.get("tool") else "user"
        yield detection.Step(
            i, kind, id=call["id"], tool=call.get("tool"), args=call.get("args"),
            result=call.get("result"), status=call.get("status", "ok"), text=call.get("text"),
        )  # fmt: skip


def chain_steps(size: int) -> Iterator[detection.Step]:
    """Steps that each name the one before as parent, over 10 distinct call signatures."""
    for i in range(size):
        yield detection.Step(
            i, "tool_call", id=f"c{i}", parent_id=f"c{i - 1}" if i else None, tool="read_file",
            args={"path": f"src/m{i % 10}.py"}, result={"lines": i % 3},
        )  # fmt: skip


def retained(steps: Iterator[detection.Step]) -> int:
    """Return the bytes one Monitor holds after observing the steps."""
    tracemalloc.start()
    monitor = detection.Monitor()
    for one in steps:
        monitor.observe(one)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held


def distinct(steps: Iterator[detection.Step]) -> int:
    """Return how many distinct call signatures the steps have."""
    return len({(s.tool, json.dumps(s.args, sort_keys=True)) for s in steps if s.tool})


def memory(sizes: list[int]) -> None:
    print("\nmemory of one live run: a Monitor after n steps (tracemalloc, KB)")
    print("steps | benchmark steps: distinct signatures | KB | chain, 10 signatures: KB")
    print("--- | --- | --- | ---")
    for size in sizes:
        mixed, chain = retained(engine_steps(size)), retained(chain_steps(size))
        print(
            f"{size:,} | {distinct(engine_steps(size)):,} | {mixed / 1024:,.0f} | "
            f"{chain / 1024:,.0f}"
        )


def run(client: Client, sizes: list[int], calls: int) -> None:
    rng = random.Random(15)
    session = quote(f"bench-{time.time_ns()}", safe="")
    base = f"/api/live/runs/{session}"
    baseline = statistics.median(client.call("GET", "/healthz")[0] for _ in range(50))
    load_before = os.getloadavg()[0]
    rows = []
    seq = 0
    run_id = None
    for size in sizes:
        started = time.perf_counter()
        while seq < size:
            batch = [step(rng, seq + i) for i in range(min(500, size - seq))]
            run_id = client.call("POST", f"{base}/steps", {"steps": batch})[2]["run_id"]
            seq += len(batch)
        fill = time.perf_counter() - started
        appends, checks = [], []
        for _ in range(calls):
            appends.append(client.call("POST", f"{base}/steps", {"steps": [step(rng, seq)]}))
            seq += 1
            nxt = step(rng, seq)
            body = {"tool": nxt.get("tool") or "read_file", "args": nxt.get("args")}
            checks.append(client.call("POST", f"{base}/check", body))
        replays = []
        for _ in range(3 if size >= 100_000 else 10):
            body = {"run_id": run_id, "tool": "read_file", "args": {"path": "src/m1.py", "n": 1}}
            replays.append(client.call("POST", "/api/check", body))
        rows.append((size, fill, appends, checks, replays))
        print(f"  {size:>7,} steps: filled in {fill:.1f} s", file=sys.stderr, flush=True)
    load = f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"\nload average (1 min): {load}")
    print(f"baseline GET /healthz, client round trip: {baseline:.2f} ms (median)")
    print("ms; server = Server-Timing (the view); client-base = client round trip - baseline")
    head = ("steps", "append server p50/p99", "append client-base p50/p99",
            "check server p50/p99", "check client-base p50/p99", "replay /api/check client-base p50/max")  # fmt: skip
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for size, _fill, appends, checks, replays in rows:

        def both(samples, index):
            values = [s[index] - (baseline if index == 0 else 0) for s in samples]
            return f"{pct(values, 0.5):.2f} / {pct(values, 0.99):.2f}"

        replay = [r[0] - baseline for r in replays]
        print(
            f"{size:,} | {both(appends, 1)} | {both(appends, 0)} | {both(checks, 1)} | "
            f"{both(checks, 0)} | {statistics.median(replay):.1f} / {max(replay):.1f}"
        )
    size, _fill, appends, checks, _replays = rows[-1]
    worst = max(pct([s[1] for s in samples], 0.99) for samples in (appends, checks))
    verdict = "met" if worst < 10 else "not met"
    print(f"target, server p99 < 10 ms at {size:,} steps: {verdict} (worst p99 {worst:.2f} ms)")


if __name__ == "__main__":
    main()
