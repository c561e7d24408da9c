"""Profile loopboard's OTLP ingest path in one process: the receiver, then the assembly.

    .venv/bin/python bench/profile_ingest.py --runs 200            # 10,000 spans
    .venv/bin/python bench/profile_ingest.py --runs 1000 --top 40  # 50,000 spans

Generates protobuf batches of 500 spans with bench/gen_traces.py (as bench_ingest.py does),
then, against a scratch database on the real PostgreSQL (dropped at the end), times and
profiles with cProfile (1) the receiver: each batch through the Django test client's
`POST /v1/traces` (authentication, decoding, `store_request`), and (2) the worker's part:
`otlp.assemble` of every trace id the batches brought, in the chunks the receiver queued them
(decode the stored requests, build the runs, store, analyze). The Celery messages the
receiver queues go to BENCH_REDIS_DB (default 9), which is flushed. Prints each stage's
seconds and spans/s and the top functions by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PG = "postgres://postgres@127.0.0.1:5432"


def report(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


class QueryCounter:
    """Counts the statements sent through Django's connection, by the innermost function of
    runs/ on the stack (psycopg cursors opened by hand are not seen)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        import traceback

        where = "?"
        for frame in reversed(traceback.extract_stack()):
            if "/runs/" in frame.filename:
                where = f"{frame.filename.split('/runs/', 1)[1]}:{frame.name}"
                break
        self.counts[where] = self.counts.get(where, 0) + 1
        return execute(sql, params, many, context)

    def report(self, what: str, per: int) -> str:
        rows = sorted(self.counts.items(), key=lambda item: -item[1])
        total = sum(self.counts.values())
        lines = [f"{what}: {total} statements through Django ({total / per:.1f} per task)"]
        lines += [f"  {count:6d}  {where}" for where, count in rows]
        return "\n".join(lines)


# The assembly's stages, as (label, module, function); a stage inside another is counted in
# both (store_runs holds the analysis and the COPY).
STAGES = [
    ("decode + convert (otlp._items_by_key)", "runs.services.otlp", "_items_by_key"),
    ("spans to steps (otlp._build_runs)", "runs.services.otlp", "_build_runs"),
    ("store + analyze (ingest.store_runs)", "runs.services.ingest", "store_runs"),
    ("  step rows (storage.step_values)", "runs.services.storage", "step_values"),
    ("  engine (analysis.prepare)", "runs.services.analysis", "prepare"),
    ("  COPY steps (storage.copy_rows)", "runs.services.storage", "copy_rows"),
    ("  findings, summary, issues (analysis.write)", "runs.services.analysis", "write"),
    ("    loop issues (issues.group_runs)", "runs.services.issues", "group_runs"),
]


def wrap_stages() -> dict[str, float]:
    """Wrap each stage's function to add up its CPU seconds (outermost call only)."""
    import functools
    import importlib

    spent = dict.fromkeys((label for label, _, _ in STAGES), 0.0)
    for label, module_name, name in STAGES:
        module = importlib.import_module(module_name)
        inner = getattr(module, name)
        depth = [0]

        def timed(*args, _inner=inner, _label=label, _depth=depth, **kwargs):  # type: ignore[no-untyped-def]
            _depth[0] += 1
            started = time.process_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                _depth[0] -= 1
                if not _depth[0]:
                    spent[_label] += time.process_time() - started

        setattr(module, name, functools.wraps(inner)(timed))
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="time only")
    parser.add_argument(
        "--split",
        action="store_true",
        help="the assembly's CPU by stage (wrapped functions, no profiler), us per span",
    )
    parser.add_argument(
        "--queries",
        action="store_true",
        help="count each stage's SQL statements by the runs/ function that sent them",
    )
    parser.add_argument(
        "--per-task",
        type=int,
        default=0,
        help="trace ids per assembly (default: each request's, as queued)",
    )
    args = parser.parse_args()

    name = f"loopboard_prof_{os.getpid()}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    db = os.environ.get("BENCH_REDIS_DB", "9")
    os.environ.update(
        DATABASE_URL=f"{PG}/{name}",
        DJANGO_SETTINGS_MODULE="loopboard.settings",
        SECRET_KEY="bench-only",
        CELERY_BROKER_URL=f"redis://127.0.0.1:6379/{db}",
        LOOPBOARD_API_RATE="100000",
        LOOPBOARD_API_BURST="100000",
        LOG_LEVEL="WARNING",
    )
    tmp = Path(tempfile.mkdtemp(prefix="profile-ingest-"))
    try:
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "gen_traces.py"), "--runs", str(args.runs),
             "--steps", str(args.steps), "--batch-spans", "500", "--base-time", "now",
             "--otlp-proto", str(tmp / "batches"), "--stats", str(tmp / "stats.json")],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        spans = json.loads((tmp / "stats.json").read_text())["spans"]
        bodies = [p.read_bytes() for p in sorted((tmp / "batches").iterdir())]
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from django.db import connection
        from django.test import Client

        from runs.models import ApiKey, OtlpSpanGroup, Project, Run
        from runs.services import otlp

        project = Project.objects.create(slug="prof", name="Prof")
        key = ApiKey.issue(project, "prof")[1]
        client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="127.0.0.1")
        client.post("/v1/traces", data=b"", content_type="application/x-protobuf")  # warm up

        counter = QueryCounter()
        watching = connection.execute_wrapper(counter) if args.queries else None
        if watching:
            watching.__enter__()
        profile = cProfile.Profile()
        started, cpu = time.perf_counter(), time.process_time()
        for body in bodies:
            if not args.no_profile:
                profile.enable()
            response = client.post("/v1/traces", data=body, content_type="application/x-protobuf")
            profile.disable()
            assert response.status_code == 200, response.content
        receive, receive_cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"receiver: {len(bodies)} requests, {spans:,} spans in {receive:.2f} s "
              f"= {spans / receive:,.0f} spans/s; this process's CPU "
              f"{receive_cpu * 1e6 / spans:.0f} us/span")  # fmt: skip
        if not args.no_profile:
            print(report(profile, args.top))
        if watching:
            print(counter.report("receiver", len(bodies)))
            counter.counts.clear()

        spent = wrap_stages() if args.split else {}
        chunks: dict[int, list[str]] = {}
        for request_id, trace_id in OtlpSpanGroup.objects.values_list("request_id", "trace_id"):
            chunks.setdefault(request_id, []).append(trace_id)
        if args.per_task:
            every = sorted({t for ids in chunks.values() for t in ids})
            chunks = {i: every[i : i + args.per_task] for i in range(0, len(every), args.per_task)}
        profile = cProfile.Profile()
        started, cpu = time.perf_counter(), time.process_time()
        for request_id in sorted(chunks):
            if not args.no_profile:
                profile.enable()
            otlp.assemble(project.pk, sorted(chunks[request_id]))
            profile.disable()
        assemble, assemble_cpu = time.perf_counter() - started, time.process_time() - cpu
        runs = Run.objects.count()
        pending = Run.objects.filter(verdict="pending").count()
        print(f"assembly: {len(chunks)} tasks, {runs} runs ({pending} pending), {spans:,} spans "
              f"in {assemble:.2f} s = {spans / assemble:,.0f} spans/s; this process's CPU "
              f"{assemble_cpu * 1e6 / spans:.0f} us/span")  # fmt: skip
        print(f"both in one process: {spans / (receive + assemble):,.0f} spans/s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
        if not args.no_profile:
            print(report(profile, args.top))
        for label, seconds in spent.items():
            print(f"  {label:46s} {seconds * 1e6 / spans:6.1f} us/span")
        if watching:
            print(counter.report("assembly", len(chunks)))
            watching.__exit__(None, None, None)
        connection.close()
    finally:
        subprocess.run(["redis-cli", "-n", db, "flushdb"], stdout=subprocess.DEVNULL)
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        for path in sorted(tmp.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
