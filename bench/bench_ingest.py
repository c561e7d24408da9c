"""OTLP ingest benchmark: spans in over OTLP/HTTP until every run is stored *and analyzed*.

    .venv/bin/python bench/bench_ingest.py --runs 1000            # 50,000 spans
    .venv/bin/python bench/bench_ingest.py --runs 200 --mlflow    # 10,000 spans, MLflow beside
    .venv/bin/python bench/bench_ingest.py --runs 4000            # 200,000 spans
    .venv/bin/python bench/bench_ingest.py --url http://HOST:8000 --key lb_... --dsn postgres://...

Generates the runs with bench/gen_traces.py (protobuf batches of 500 spans, 50 spans per
run; GEN_TRACES names another copy), starts its own loopboard (gunicorn + Celery worker, like
`loopboard serve`) against a scratch database (real PostgreSQL on 127.0.0.1:5432 and Redis on
6379 when they answer, else the embedded ones), sends the batches from 2 connections, and
polls the database until every run has a verdict. Meanwhile it samples the run page's and
`GET /api/runs/{id}`'s latency and the RSS of the web and worker process trees. Prints a JSON
summary and a table side by side with Arize Phoenix's numbers, measured with the same
generator (bench/README.md). The Redis database it uses (and flushes) is BENCH_REDIS_DB
(default 9).

With --mlflow it then stops loopboard and sends the same batch files to MLflow (pinned
MLFLOW_VERSION, 3.17.2; installed from PyPI on first use into var/bench/mlflow, its own
virtualenv: the only download, and only with this flag): `mlflow server` on a SQLite file
(4 workers, a free port; its job runner off, its bundled model price list instead of a fetch
from the internet, which offline cost each worker ~22 s of retries on its first model span),
OTLP/HTTP to `/v1/traces` with `x-mlflow-experiment-id`, timed until its search traces API
(`/api/3.0/mlflow/traces/search`) lists every trace; the spans are then counted back with
batchGet (not timed). MLflow only stores the spans: no analysis.

Measured on the shared 2-core machine (other engineers' tests running; loopboard's detection
engine as plain Python, no build/speedups in that checkout). "CPU" is loopboard's own: web +
worker + PostgreSQL, the CPU seconds per span the machine must give, whatever the load (the
web's share includes the run pages and API reads this script samples every 0.5 s).

| 2 cores | 10,000 spans | 50,000 spans |
| --- | --- | --- |
| loopboard before (f6f766f), load 6.1 / 5.7 | 5.65 s, 1,770 spans/s | 35.3 s, 1,415 spans/s |
| MLflow 3.17.2 in the same runs, load 6.3 / 7.2 | 8.03 s, 1,245 spans/s | 40.1 s, 1,248 spans/s |
| loopboard before, interleaved with after, load 3.2 / 2.2 | 3.77 s, 2,651 spans/s | 16.4 s, 3,049 spans/s; CPU 278 us/span |
| loopboard after (bd355b7), interleaved, load 2.9 / 3.0 | 3.65 s, 2,737 spans/s | 14.6 s, 3,415 spans/s; CPU 246 us/span |
| loopboard after, one --mlflow run, load 2.9 / 4.0 | 2.71 s, 3,689 spans/s | 14.4 s, 3,467 spans/s; CPU 244 us/span |
| MLflow 3.17.2 in those runs, load 2.5 / 4.2 | 6.87 s, 1,455 spans/s | 18.8 s, 2,659 spans/s; CPU 620 us/span |
| loopboard after, a second --mlflow run, load 1.4 / 2.3 | 4.05 s, 2,468 spans/s | 12.9 s, 3,866 spans/s; CPU 226 us/span |
| MLflow 3.17.2 in that run, load 1.8 / 2.9 | 6.41 s, 1,561 spans/s | 16.0 s, 3,124 spans/s; CPU 582 us/span |

So loopboard, analyzing, is 1.6-2.5x (10k) and 1.2-1.3x (50k) MLflow's speed storing only,
with 2.5x less CPU per span; the wall-clock lead at 50k is small because other processes (this script's
client among them) took ~1.1 cores during loopboard's run and ~0.2 during MLflow's. The target, 20,000 spans/s on 2 cores,
leaves 100 us of CPU per span for web, worker and PostgreSQL together; loopboard spends
226-246, so even alone on the machine it tops out near 8,000-9,000 spans/s. bench/profile_ingest.py shows
where: the receiver 27 us/span in-process (decode, run keys, SHA-256, zstd, 7 statements per
request; gunicorn and Django add ~30), the assembly ~130 us/span in-process (`--split`, 50k spans, load
1.5): decode + convert 25.5, spans to steps 27.0, ingest.store_runs 63.6 (step rows 8.2,
the engine 21.2 as plain Python, COPY 6.1, analysis.write 19.3 of which issues.group_runs
13.5), the rest (~13) locks, group rows and the other statements (27 per task of 10 runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[1]
GEN = Path(os.environ.get("GEN_TRACES") or Path(__file__).with_name("gen_traces.py"))
PG = "postgres://postgres@127.0.0.1:5432"
REDIS = ("127.0.0.1", 6379)
USER, PASSWORD = "bench", "bench-password-1"


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(runs: int, steps: int, out: Path) -> dict:
    stats = out / "stats.json"
    subprocess.run(
        [sys.executable, str(GEN), "--runs", str(runs), "--steps", str(steps),
         "--batch-spans", "500", "--base-time", "now", "--otlp-proto", str(out / "batches"),
         "--stats", str(stats)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return json.loads(stats.read_text())


class Server:
    """A scratch database plus gunicorn and a Celery worker, like `loopboard serve`."""

    def __init__(self, web_workers: int, worker_concurrency: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="loopboard.settings",
                        SECRET_KEY="bench-only", LOOPBOARD_API_RATE="100000",
                        LOOPBOARD_API_BURST="100000", LOOPBOARD_OTLP_ROOT_GRACE="1",
                        LOOPBOARD_OTLP_QUIET_SECONDS="10", LOG_LEVEL="WARNING",
                        # plain http on 127.0.0.1: secure-only cookies would never come back,
                        # and the run page would answer the login redirect forever
                        SECURE_COOKIES="0")  # fmt: skip
        self.web_workers, self.concurrency = web_workers, worker_concurrency
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        if answers("127.0.0.1", 5432):
            name = f"loopboard_bench_{os.getpid()}"
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")
                conn.execute(f"CREATE DATABASE {name}")
            self.env["DATABASE_URL"] = f"{PG}/{name}"
            self.scratch = name
        else:
            self.scratch = None  # embedded PostgreSQL (var/pg), its default database
        if answers(*REDIS):
            db = os.environ.get("BENCH_REDIS_DB", "9")
            self.env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:6379/{db}"
            subprocess.run(["redis-cli", "-n", db, "flushdb"], stdout=subprocess.DEVNULL)
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=self.env, check=True)
        script = (
            "from django.contrib.auth import get_user_model;"
            "from runs.models import Project, Membership, ApiKey;"
            "p,_=Project.objects.get_or_create(slug='bench', defaults={'name':'Bench'});"
            f"u=get_user_model().objects.filter(username='{USER}').first() or "
            f"get_user_model().objects.create_user('{USER}', password='{PASSWORD}');"
            "Membership.objects.get_or_create(project=p, user=u);"
            "print(ApiKey.issue(p, 'bench')[1])"
        )
        out = subprocess.run([*manage, "shell", "-c", script], env=self.env, check=True,
                             capture_output=True, text=True)  # fmt: skip
        self.key = out.stdout.strip().splitlines()[-1]
        self.dsn = self._dsn()
        bin_dir = Path(sys.executable).parent
        log = open(ROOT / "var" / "bench-ingest.log", "wb")  # noqa: SIM115
        self.web = subprocess.Popen(
            [str(bin_dir / "gunicorn"), "loopboard.wsgi", "--bind", f"127.0.0.1:{self.port}",
             "--workers", str(self.web_workers), "--threads", "2", "--timeout", "120"],
            env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.worker = subprocess.Popen(
            [str(bin_dir / "celery"), "-A", "loopboard.celery", "worker", "--loglevel",
             "WARNING", "--concurrency", str(self.concurrency), "--without-gossip",
             "--without-mingle"],
            env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs = [self.web, self.worker]
        for _ in range(100):
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit("the web server did not come up; see var/bench-ingest.log")

    def _dsn(self) -> str:
        if self.env.get("DATABASE_URL"):
            return self.env["DATABASE_URL"]
        script = (
            "from django.db import connection as c; s=c.settings_dict;"
            "print(s['HOST'], s['PORT'] or 5432, s['NAME'], s['USER'])"
        )
        out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", script],
                             env=self.env, check=True, capture_output=True, text=True)  # fmt: skip
        host, port, name, user = out.stdout.strip().splitlines()[-1].split()
        return f"host={host} port={port} dbname={name} user={user}"

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.scratch:
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {self.scratch} WITH (FORCE)")


def tree_rss(pid: int) -> int:
    try:
        proc = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
    except psutil.Error:
        return 0


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live children."""
    try:
        proc = psutil.Process(pid)
        return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])
    except psutil.Error:
        return 0.0


def postgres_cpu() -> float:
    """CPU seconds of every process of the local PostgreSQL server (run by user postgres)."""
    total = 0.0
    for proc in psutil.process_iter(["username", "name", "cpu_times"]):
        if proc.info["username"] == "postgres" and "postgres" in (proc.info["name"] or ""):
            total += sum(proc.info["cpu_times"][:2]) if proc.info["cpu_times"] else 0.0
    return total


def busy_cpu() -> float:
    """CPU seconds the whole machine spent busy (all processes, all cores)."""
    times = psutil.cpu_times()
    return times.user + times.system + getattr(times, "nice", 0.0)


def send(url: str, headers: dict[str, str], files: list[Path], connections: int = 2) -> float:
    """POST the protobuf batches from `connections` keep-alive connections; return seconds."""
    headers = {**headers, "Content-Type": "application/x-protobuf"}
    chunks = [files[i::connections] for i in range(connections)]

    def one(paths: list[Path]) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            for path in paths:
                response = client.post("/v1/traces", content=path.read_bytes())
                if response.status_code != 200:
                    raise RuntimeError(f"{path.name}: {response.status_code} {response.text}")

    started = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(one, chunks))
    return time.perf_counter() - started


def login(url: str) -> httpx.Client:
    """Return a client logged in to the web pages (login form with its CSRF token)."""
    page = httpx.Client(base_url=url, timeout=30)
    page.get("/accounts/login/")
    response = page.post("/accounts/login/", data={
        "username": USER, "password": PASSWORD,
        "csrfmiddlewaretoken": page.cookies.get("csrftoken", "")})  # fmt: skip
    if response.status_code != 302:
        raise RuntimeError(f"login failed: {response.status_code}")
    for cookie in page.cookies.jar:  # a server with secure cookies, reached over http
        cookie.secure = False
    return page


MLFLOW_VERSION = "3.17.2"
MLFLOW_VENV = ROOT / "var" / "bench" / "mlflow"
SEARCH = "/api/3.0/mlflow/traces/search"
BATCH_GET = "/api/3.0/mlflow/traces/batchGet"
EXPERIMENT = "0"  # the Default experiment every new MLflow store has (warm-up requests)


def one_span(seed: int) -> bytes:
    """Return an ExportTraceServiceRequest of one root span (to warm a server up)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = (seed + 1).to_bytes(16, "big")
    span.span_id = (seed + 1).to_bytes(8, "big")
    span.name = "warm-up"
    span.start_time_unix_nano = time.time_ns()
    span.end_time_unix_nano = span.start_time_unix_nano + 1000
    return request.SerializeToString()


def mlflow_bin(version: str) -> Path:
    """Return the `mlflow` of var/bench/mlflow, installing MLflow `version` there from PyPI
    first when it is not that version (the one download this benchmark makes, opt-in)."""
    python = MLFLOW_VENV / "bin" / "python"
    probe = [str(python), "-c", "import mlflow; print(mlflow.__version__)"]
    if python.exists():
        have = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        if have == version:
            return MLFLOW_VENV / "bin" / "mlflow"
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(MLFLOW_VENV)],
                       check=True)  # fmt: skip
        subprocess.run([str(python), "-m", "ensurepip", "--upgrade"], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    print(f"installing mlflow=={version} into {MLFLOW_VENV} ...", file=sys.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"mlflow=={version}"], check=True)
    return MLFLOW_VENV / "bin" / "mlflow"


class MlflowServer:
    """`mlflow server` on a SQLite file in a temporary folder, on a free port."""

    def __init__(self, version: str, workers: int, folder: Path) -> None:
        self.bin, self.workers, self.folder = mlflow_bin(version), workers, folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.experiment = EXPERIMENT

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(ROOT / "var" / "bench-ingest-mlflow.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(self.bin), "server", "--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db",
             "--default-artifact-root", str(self.folder / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", str(self.workers)],
            cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true",
                     # no background job runner: ingest only, as the notes measured it
                     MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
                     # its bundled model price list: no fetch from the internet at run time
                     # (offline, each worker's first model span waited ~22 s for retries)
                     MLFLOW_MODEL_CATALOG_URI=""),
        )  # fmt: skip
        for _ in range(300):
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("mlflow server stopped; see var/bench-ingest-mlflow.log")
            time.sleep(0.2)
        else:
            raise SystemExit("mlflow server did not come up; see var/bench-ingest-mlflow.log")
        self.warm_up()

    def warm_up(self) -> None:
        """Make the experiment the benchmark sends to, send a one-span request to each worker
        (into the Default experiment), and wait until the server is idle: /health answers
        while the other workers still import MLflow."""
        with httpx.Client(base_url=self.url, timeout=60) as client:
            made = client.post("/api/2.0/mlflow/experiments/create", json={"name": "bench"})
            self.experiment = made.json()["experiment_id"]

        def one(i: int) -> None:  # a connection each, at once, so that every worker gets some
            headers = {"Content-Type": "application/x-protobuf",
                       "x-mlflow-experiment-id": EXPERIMENT}  # fmt: skip
            with httpx.Client(base_url=self.url, timeout=120) as client:
                client.post("/v1/traces", content=one_span(i), headers=headers)

        with ThreadPoolExecutor(4 * self.workers) as pool:
            list(pool.map(one, range(4 * self.workers)))
        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline:
            before = tree_cpu(self.proc.pid)
            time.sleep(1)
            if tree_cpu(self.proc.pid) - before < 0.1:
                return

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 15)  # the server and its uvicorn workers: its own group
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)


def mlflow_trace_ids(client: httpx.Client, experiment: str) -> list[str]:
    """Return the ids of every trace MLflow's search traces API lists in the experiment."""
    ids: list[str] = []
    token = None
    while True:
        body = {"locations": [{"type": "MLFLOW_EXPERIMENT",
                               "mlflow_experiment": {"experiment_id": experiment}}],
                "max_results": 500, **({"page_token": token} if token else {})}  # fmt: skip
        page = client.post(SEARCH, json=body).json()
        ids += [trace["trace_id"] for trace in page.get("traces", [])]
        token = page.get("next_page_token")
        if not token:
            return ids


def mlflow_spans(client: httpx.Client, trace_ids: list[str]) -> int:
    """Return how many spans MLflow gives back for these traces (batchGet, 20 at a time)."""
    total = 0
    for start in range(0, len(trace_ids), 20):
        params = [("trace_ids", t) for t in trace_ids[start : start + 20]]
        traces = client.get(BATCH_GET, params=params).json().get("traces", [])
        total += sum(len(trace.get("spans", [])) for trace in traces)
    return total


def measure_mlflow(args: argparse.Namespace, files: list[Path], runs: int, spans: int,
                   folder: Path) -> dict:  # fmt: skip
    """Send the same batches to MLflow's OTLP endpoint and time them until its search traces
    API lists every trace; then count the spans it gives back (not timed)."""
    server = MlflowServer(args.mlflow_version, args.mlflow_workers, folder)
    loadavg = [round(x, 2) for x in os.getloadavg()]
    server.start()
    try:
        pid = server.proc.pid
        peak = 0
        done = threading.Event()

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, tree_rss(pid))
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        cpu_before, busy_before = tree_cpu(pid), busy_cpu()
        started = time.perf_counter()
        watcher.start()
        send_seconds = send(server.url, {"x-mlflow-experiment-id": server.experiment}, files)
        listed_at = None
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while time.perf_counter() - started < args.timeout:
                found = len(mlflow_trace_ids(client, server.experiment))
                if found >= runs:
                    listed_at = time.perf_counter() - started
                    break
                time.sleep(0.2)
            cpu = tree_cpu(pid) - cpu_before
            other = max(0.0, busy_cpu() - busy_before - cpu)
            done.set()
            watcher.join(timeout=5)
            ids = mlflow_trace_ids(client, server.experiment)
            returned = mlflow_spans(client, ids)
        elapsed = listed_at or (time.perf_counter() - started)
        return {
            "name": f"MLflow {args.mlflow_version}",
            "spans": spans,
            "traces_listed": len(ids),
            "spans_returned": returned,
            "send_seconds": round(send_seconds, 2),
            "all_queryable_seconds": round(listed_at, 2) if listed_at else None,
            "spans_per_second": round(spans / elapsed),
            "runs_per_second": round(runs / elapsed, 1),
            "peak_rss_mb": round(peak / 2**20),
            "cpu_seconds": {"server": round(cpu, 1), "other processes": round(other, 1)},
            "loadavg_at_start": loadavg,
            "workers": args.mlflow_workers,
            "backend": "SQLite",
        }
    finally:
        server.stop()


# Arize Phoenix's figures on this machine class, from bench/README.md.
PHOENIX = {"name": "Arize Phoenix 20.26", "spans_per_second": 200,
           "note": "stored only, no loop analysis; 50k spans in 240-310 s, 200k in ~1,015 s"}  # fmt: skip
TARGET_SPANS_PER_SECOND = 20000  # issue 28 part 5: with analysis, on 2 cores


def table(summary: dict, mlflow: dict | None = None) -> str:
    """Return the summary as a text table: loopboard, MLflow measured in the same run (with
    --mlflow), and Phoenix's published numbers."""
    phoenix_seconds = summary["spans"] / PHOENIX["spans_per_second"]
    lat = summary["latency_during_load"]
    m = mlflow or {}

    def latency(name: str) -> str:
        values = lat.get(name) or {}
        if not values:
            return f"not measured {summary['latency_failures'].get(name) or ''}".strip()
        return (
            f"{values['median_ms']} / {values['p95_ms']} / {values['max_ms']} ms (n={values['n']})"
        )

    def ml(text: str) -> str:
        return text if mlflow else ""

    rows = [
        ("spans (runs x spans/run)", f"{summary['spans']:,} ({summary['runs']:,} runs)",
         ml(f"{m.get('spans', 0):,}"), f"{summary['spans']:,}"),
        ("sent in (2 connections)", f"{summary['send_seconds']} s",
         ml(f"{m.get('send_seconds')} s"), ""),
        ("all stored + analyzed (MLflow: listed)", f"{summary['all_analyzed_seconds']} s",
         ml(f"{m.get('all_queryable_seconds')} s (stored only)"),
         f"~{phoenix_seconds:,.0f} s (stored only)"),
        ("spans/s", f"{summary['spans_per_second']:,}", ml(f"{m.get('spans_per_second', 0):,}"),
         f"~{PHOENIX['spans_per_second']}"),
        ("runs/s", f"{summary['runs_per_second']}", ml(f"{m.get('runs_per_second')}"), ""),
        ("loopboard / this tool", "1x",
         ml(f"{summary['spans_per_second'] / max(1, m.get('spans_per_second', 1)):.2f}x"),
         f"{summary['spans_per_second'] / PHOENIX['spans_per_second']:.1f}x"),
        (f"target {TARGET_SPANS_PER_SECOND:,} spans/s",
         "met" if summary["spans_per_second"] >= TARGET_SPANS_PER_SECOND else "NOT met", "", ""),
        ("peak RSS web / worker (MLflow: server)",
         f"{summary['peak_rss_mb'].get('web', '?')} / {summary['peak_rss_mb'].get('worker', '?')} MB",
         ml(f"{m.get('peak_rss_mb')} MB"), "~1.1 GB (one process)"),
        ("run page during load (median/p95/max)", latency("run_page"), "", ""),
        ("GET /api/runs/{id} during load", latency("api_run"), "", ""),
        ("CPU s web / worker / postgres / others", " / ".join(
            str(summary["cpu_seconds"].get(k, "?"))
            for k in ("web", "worker", "postgres", "other processes")),
         ml(f"{m.get('cpu_seconds', {}).get('server')} / - / - / "
            f"{m.get('cpu_seconds', {}).get('other processes')}"), ""),
        ("setup", f"PostgreSQL, gunicorn -w {summary['web_workers']}, "
         f"{summary['worker_concurrency']} Celery processes",
         ml(f"{m.get('backend')}, {m.get('workers')} workers"), "SQLite"),
        ("cores", f"{os.cpu_count()}", ml(f"{os.cpu_count()}"), "2 (same machine class)"),
        ("verdicts (truth)", f"{summary['verdicts']}",
         ml(f"{m.get('traces_listed')} traces, {m.get('spans_returned', 0):,} spans returned"),
         f"{summary['truth']}"),
        ("load average at start", f"{summary['loadavg_at_start']}",
         ml(f"{m.get('loadavg_at_start')}"), ""),
    ]  # fmt: skip
    header = ("", "loopboard", m.get("name", "MLflow (--mlflow)"), PHOENIX["name"])
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    if mlflow:
        lines.append("MLflow: measured in this run, after loopboard, with the same batches; "
                     "stored only, no loop analysis; timed until its search traces API lists "
                     "every trace (its OTLP endpoint answers once the spans are written).")  # fmt: skip
    lines.append(f"Phoenix: {PHOENIX['note']} (bench/README.md).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=24, help="tool steps per run (2*S+2 spans)")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--url", help="use a running loopboard (with --key and --dsn)")
    parser.add_argument("--key")
    parser.add_argument("--dsn", help="its database, to see when the runs are analyzed")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--mlflow",
        action="store_true",
        help="also send the same batches to MLflow (installed on first use into "
        "var/bench/mlflow) and print both side by side",
    )
    parser.add_argument("--mlflow-version", default=MLFLOW_VERSION)
    parser.add_argument("--mlflow-workers", type=int, default=4)
    args = parser.parse_args(argv)

    loadavg = [round(x, 2) for x in os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    server = None
    try:
        generated = generate(args.runs, args.steps, tmp)
        files = sorted((tmp / "batches").iterdir())
        if args.url:
            url, key, dsn, pids = args.url, args.key, args.dsn, {}
        else:
            server = Server(args.web_workers, args.worker_concurrency)
            server.start()
            url, key, dsn = server.url, server.key, server.dsn
            pids = {"web": server.web.pid, "worker": server.worker.pid}
        peak = dict.fromkeys(pids, 0)
        latencies: dict[str, list[float]] = {"run_page": [], "api_run": []}
        done = threading.Event()

        failures: dict[str, dict[int, int]] = {"run_page": {}, "api_run": {}}

        def watch() -> None:
            page = login(url)
            api = httpx.Client(base_url=url, timeout=30,
                               headers={"Authorization": f"Bearer {key}"})  # fmt: skip
            while not done.is_set():
                for name, pid in pids.items():
                    peak[name] = max(peak[name], tree_rss(pid))
                items = api.get("/api/runs?limit=1").json().get("items", [])
                if items:
                    run_id = items[0]["id"]
                    for name, client, path in (("run_page", page, f"/runs/{run_id}/"),
                                               ("api_run", api, f"/api/runs/{run_id}")):  # fmt: skip
                        t = time.perf_counter()
                        status = client.get(path).status_code
                        if status == 200:
                            latencies[name].append(time.perf_counter() - t)
                        else:
                            failures[name][status] = failures[name].get(status, 0) + 1
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        cpu_before = {name: tree_cpu(pid) for name, pid in pids.items()}
        cpu_before["postgres"] = postgres_cpu()
        busy_before = busy_cpu()
        started = time.perf_counter()
        watcher.start()
        send_seconds = send(url, {"Authorization": f"Bearer {key}"}, files)
        stored_at = analyzed_at = None
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.perf_counter() - started < args.timeout:
                total, pending = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE verdict = 'pending') FROM runs_run"
                ).fetchone()
                if total >= args.runs and stored_at is None:
                    stored_at = time.perf_counter() - started
                if total >= args.runs and pending == 0:
                    analyzed_at = time.perf_counter() - started
                    break
                time.sleep(0.2)
            verdicts = dict(conn.execute("SELECT verdict, count(*) FROM runs_run GROUP BY 1"))
        cpu = {name: tree_cpu(pid) - cpu_before[name] for name, pid in pids.items()}
        cpu["postgres"] = postgres_cpu() - cpu_before["postgres"]
        cpu["other processes"] = max(0.0, busy_cpu() - busy_before - sum(cpu.values()))
        done.set()
        watcher.join(timeout=10)
        spans = generated["spans"]
        elapsed = analyzed_at or (time.perf_counter() - started)

        def ms(values: list[float]) -> dict:
            if not values:
                return {}
            values = sorted(values)
            return {"n": len(values), "median_ms": round(statistics.median(values) * 1000, 1),
                    "p95_ms": round(values[int(len(values) * 0.95) - 1] * 1000, 1),
                    "max_ms": round(values[-1] * 1000, 1)}  # fmt: skip

        summary = {
            "runs": args.runs,
            "spans": spans,
            "batches": len(files),
            "send_seconds": round(send_seconds, 2),
            "all_stored_seconds": round(stored_at, 2) if stored_at else None,
            "all_analyzed_seconds": round(analyzed_at, 2) if analyzed_at else None,
            "spans_per_second": round(spans / elapsed),
            "runs_per_second": round(args.runs / elapsed, 1),
            "verdicts": verdicts,
            "truth": generated.get("patterns"),
            "peak_rss_mb": {k: round(v / 2**20) for k, v in peak.items()},
            "latency_during_load": {k: ms(v) for k, v in latencies.items()},
            "latency_failures": {k: v for k, v in failures.items() if v},
            "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
            "loadavg_at_start": loadavg,
            "web_workers": args.web_workers,
            "worker_concurrency": args.worker_concurrency,
        }
        if server:
            server.stop()
            server = None
        mlflow = None
        if args.mlflow:
            mlflow = measure_mlflow(args, files, args.runs, spans, tmp / "mlflow")
            summary["mlflow"] = mlflow
        print(json.dumps(summary, indent=2))
        print()
        print(table(summary, mlflow))
        return 0 if analyzed_at else 1
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
