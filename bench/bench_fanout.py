"""Analysis fan-out benchmark: one native file of many small runs, from upload to every run
analyzed, with the per-run fan-out of before (a git worktree of the commit before batched
analysis) and the batched analysis of now, on the embedded filesystem broker and on Redis.

    .venv/bin/python bench/bench_fanout.py                      # 10,000 runs x 12 steps
    .venv/bin/python bench/bench_fanout.py --runs 2000 --brokers embedded
    .venv/bin/python bench/bench_fanout.py --baseline abc1234 --timeout 300

Generates the file with bench/gen_traces.py (--jsonl: one tool-call event a line, `run_id`
on each), and for each (code, broker) pair: a scratch PostgreSQL database on
127.0.0.1:5432, migrated by that code; one Celery worker with 2 processes, started as its
own process from that code's tree (consuming every queue that code has); the file stored
with `manage.py ingest` (the upload path: stored, then the worker imports it and queues
the analysis). Then it polls the database until every run has a verdict, and stores a small
upload into another project two seconds after the big one, to time how long that one waits.
Prints one table with both codes side by side. The Redis database used (and flushed) is
BENCH_REDIS_DB (default 1). A baseline that is not done at --timeout is reported with the
runs it analyzed by then.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
GEN = Path(__file__).with_name("gen_traces.py")
PG = "postgres://postgres@127.0.0.1:5432"
REDIS_DB = os.environ.get("BENCH_REDIS_DB", "1")


def baseline_commit() -> str:
    """The parent of the commit that brought batched analysis (`analyze_batch`)."""
    found = subprocess.run(
        ["git", "log", "--format=%H", "--reverse", "-S", "def analyze_batch", "--",
         "runs/services/analysis.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not found:
        raise SystemExit("no commit brings analyze_batch: give --baseline")
    return subprocess.run(["git", "rev-parse", f"{found[0]}^"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def generate(runs: int, steps: int, out: Path) -> Path:
    path = out / "fanout.jsonl"
    subprocess.run(
        [sys.executable, str(GEN), "--runs", str(runs), "--steps", str(steps), "--jsonl",
         str(path), "--result-bytes", "60"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return path


def small_file(out: Path) -> Path:
    path = out / "small.jsonl"
    lines = ['{"type": "message", "role": "user", "content": "find it"}'] + [
        '{"type": "tool_call", "tool": "web_search", "args": {"q": "x"}, "result": []}'
    ] * 5
    path.write_text("\n".join(lines) + "\n")
    return path


def environment(code: Path, broker: str, db: str, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "PYTHONPATH")}
    env |= {
        "DATABASE_URL": f"{PG}/{db}",
        "SECRET_KEY": "bench-secret-key-not-for-production",
        "DJANGO_SETTINGS_MODULE": "loopboard.settings",
        "LOOPBOARD_SPEEDUPS_DIR": str(ROOT / "build" / "speedups"),
        "PYTHONPATH": str(code),
        "LOG_LEVEL": "WARNING",
    }
    if broker == "redis":
        env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:6379/{REDIS_DB}"
    else:
        env["LOOPBOARD_BROKER_DIR"] = str(tmp / f"broker-{code.name}")
    return env


def reset(broker: str, db: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}"')
    if broker == "redis":
        subprocess.run(["redis-cli", "-n", REDIS_DB, "flushdb"], check=True, capture_output=True)


def manage(code: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(code / "manage.py"), *args], cwd=code, env=env,
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip


def counts(db: str, project: str) -> tuple[int, int, str, float | None]:
    """(runs, runs analyzed, trace status, seconds from the trace's store to its last run's
    analysis) of the project's first trace: database timestamps, so no process start-up
    of the polling or of `manage.py` counts."""
    with psycopg.connect(f"{PG}/{db}", autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(r.id), count(r.id) FILTER (WHERE r.verdict <> 'pending'), t.status, "
            "extract(epoch FROM max(r.analyzed_at) - t.created_at) "
            "FROM runs_trace t JOIN runs_project p ON p.id = t.project_id "
            "LEFT JOIN runs_run r ON r.trace_id = t.id WHERE p.slug = %s "
            "GROUP BY t.id ORDER BY t.id LIMIT 1",
            [project],
        ).fetchone()
    if row is None:
        return 0, 0, "", None
    return row[0], row[1], row[2], float(row[3]) if row[3] is not None else None


def measure(code: Path, broker: str, big: Path, small: Path, runs: int, timeout: float,
            tmp: Path) -> dict:  # fmt: skip
    db = f"bench_fanout_{code.name.replace('-', '_')}_{broker}"
    reset(broker, db)
    env = environment(code, broker, db, tmp)
    manage(code, env, "migrate", "--noinput", "-v", "0")
    logs = ROOT / "var" / "bench-fanout"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"worker-{code.name}-{broker}.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "loopboard.celery", "worker", "--concurrency",
         "2", "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        cwd=code, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        time.sleep(8)  # the worker is up
        started = time.monotonic()
        manage(code, env, "ingest", str(big), "--project", "big")
        stored = time.monotonic() - started
        time.sleep(2)
        manage(code, env, "ingest", str(small), "--project", "other")
        other = analyzed_at = None
        done = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            total, done, status, took = counts(db, "big")
            if other is None:
                _, _, other_status, other_took = counts(db, "other")
                if other_status == "analyzed":
                    other = other_took
            if analyzed_at is None and status == "analyzed" and done >= runs:
                analyzed_at = took
            if analyzed_at is not None and other is not None:
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started - stored
        return {"stored": stored, "analyzed": analyzed_at, "done": done, "elapsed": elapsed,
                "other": other}  # fmt: skip
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--brokers", default="embedded,redis")
    parser.add_argument("--baseline", help="git commit of the per-run fan-out (default: auto)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per measurement, after the store")  # fmt: skip
    parser.add_argument("--only", choices=["before", "after"], help="measure one code only")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    rev = args.baseline or baseline_commit()
    before = tmp / "before"
    codes: list[tuple[str, Path]] = []
    if args.only != "after":
        subprocess.run(["git", "worktree", "add", "--detach", str(before), rev], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        codes.append((f"before ({rev[:12]}: a task per run)", before))
    if args.only != "before":
        codes.append(("after (batches)", ROOT))
    try:
        big = generate(args.runs, args.steps, tmp)
        small = small_file(tmp)
        size = big.stat().st_size / 1e6
        load = os.getloadavg()[0]
        print(f"{args.runs:,} runs x {args.steps} steps, native JSONL, {size:.1f} MB; one worker, "
              f"2 processes; {os.cpu_count()} cores, load {load:.1f}", flush=True)  # fmt: skip
        rows = []
        for broker in args.brokers.split(","):
            for label, code in codes:
                result = measure(code, broker, big, small, args.runs, args.timeout, tmp)
                rows.append((broker, label, result))
                rate = result["done"] / max(result["analyzed"] or result["elapsed"], 0.1)
                print(f"  {broker:8} {label:38} `manage.py ingest` {seconds(result['stored'])}, "
                      f"stored to all analyzed "
                      f"{seconds(result['analyzed'])} ({result['done']:,} done, "
                      f"~{rate:,.0f} runs/s); another project's upload "
                      f"{seconds(result['other'])}", flush=True)  # fmt: skip
        print()
        print(f"| broker | code | `manage.py ingest` | stored to all {args.runs:,} analyzed | "
              "another project's upload |")  # fmt: skip
        print("| --- | --- | --- | --- | --- |")
        for broker, label, result in rows:
            analyzed = seconds(result["analyzed"])
            if result["analyzed"] is None:
                analyzed = f"not done at {result['elapsed']:.0f} s ({result['done']:,} analyzed)"
            other = seconds(result["other"]) if result["other"] is not None else "still waiting"
            # another project's small upload, stored 2 s after the big one: stored to analyzed
            print(f"| {broker} | {label} | {seconds(result['stored'])} | {analyzed} | {other} |")
    finally:
        if before.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT,
                           capture_output=True)  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
