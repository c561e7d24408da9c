"""Proof at scale: a year of runs (10 million steps) in one database, and what the pages cost.

    .venv/bin/python bench/bench_scale.py [--steps 10000000] [--database NAME] [--reuse]
        [--repeat 9] [--otlp-spans 5000] [--drop]

Uses its own database (`--database`, default the configured one's name + "_scale"; created
afresh and migrated with the project's migrations unless `--reuse` finds it filled with the
same `--steps` and `--seed`). The fill:

- three projects, runs spread over the last 365 days (more on weekdays, growing over the
  year), run sizes log-normal (median about 40 steps, 5 to 2,000);
- templates: a few hundred runs made by `gen_traces.py` (OTLP/JSON, healthy, repeating and
  oscillating agents), each stored as a Trace and taken through the real pipeline in this
  process, as the worker would (`ingest.ingest_trace`, `analysis.analyze_run`: importer,
  steps by COPY, engine, findings, ledger, loop issues);
- every other run copies one template of its project with PostgreSQL COPY: its trace, run
  row, steps (times shifted to its own), findings (with their fingerprint and issue) and
  ledger rows; then `issues.group_runs` folds the copies into their loop issues in batches
  (the counters, IssueRun, IssueDay and IssueFacet rows the worker would write), a share of
  the loops get labels through `labels.label_finding`, `metrics.compact` folds the metric
  triggers' rows, and each project gets a StorageDay a day (today's by `usage.measure`, the
  days before scaled from it by what was stored by then);
- raw bytes as retention leaves them: the traces of the last 30 days hold their bytes
  (the template's file with the run's own session id, zstd as `pack_raw` stores it), older
  ones are emptied (`raw_expired_at`; their sha256 is made from the template's and the
  run's id, since the bytes are gone);
- then VACUUM ANALYZE, as autovacuum would have done by then.

Then, with `gunicorn loopboard.wsgi -w 2` on the filled database, each page is requested
`--repeat` times over HTTP (logged in) and its median and p95 printed beside `/healthz` in the
same run: the runs list (first page and page 1,000 by its keyset cursor), a run page (the
biggest flagged run), the Issues page, the biggest issue's page, the Overview; a back-test of
the last 7 days of the biggest project (`backtest.start` + `run_job`, the worker's body).
Last, the retention purge (`retention.apply`, the beat's body) after the projects' retention
is cut to 350 days for steps and 358 for runs, while a thread polls `/healthz` every 75 ms:
rows deleted per second, and the worst and median `/healthz` latency during the purge.

OTLP ingest (`--otlp-spans`, 5,000 by default; 0 skips it, and the purge then runs alone): a
Celery worker (concurrency 2, broker Redis db 10, flushed first) is started on the filled
database beside the gunicorn, three projects of their own get an ingest API key each, and the
batches are made and sent as `bench_ingest.py` makes and sends them (its `generate`, 50 spans
a run in protobuf batches of 500, and `send`, 2 connections to `POST /v1/traces`), timed until
every run of the project is stored and analyzed (no run `pending`): once untimed, to warm the
worker and gunicorn up, then with the database idle, just before the purge, and last started
with the purge (so it overlaps the purge only as long as the purge lasts), each round into its
own project. Printed: spans/s both ways and `/healthz` (median, max) while each ran; the purge's
figures then are those of a purge with that ingest beside it (the ingest's rows not counted).

The default is 10 million steps, not 100 million: filled this way, 10.5 million steps took
6.2 GiB on disk (541 bytes a step with its indexes, gen_traces' mix of small chat steps and
tool calls), so 100 million would need about 60 GB besides WAL and the index builds' room, on
a disk shared with other work that had 74-79 GB free, and the fill (about 10,000 steps/s on
the 2 shared cores) would take about three hours, longer than a session here.

Measured at 2 million steps, not 10.5 million (`--steps 2000000 --drop`, 2026-12-04; load
average 1.3 at its start, 3.6-4.2 during the fill, the script's own work, and 1.9-3.6 during
the timings, on the 2 shared cores; engine as plain Python): 1,838,564 steps stored in 27,681
runs, 6,986 findings, 94 loop issues, 73 labels; 1.1 GiB on disk (steps 0.9 GiB, 542 B a step
with indexes, 405 B without). Fill 86 s: COPY of 1,818,650 steps 31 s + step indexes 7 s
(47,379 steps/s), 300 runs (19,914 steps) through the pipeline 37 s, issues 2 s, labels 1 s,
VACUUM ANALYZE 6 s. Median / p95 over 11 requests, and the median against `/healthz`
(1.0 / 4.0 ms): runs list first page 42.8 / 60.7 ms (44x), page 553 52.4 / 62.7 ms (54x); the
biggest flagged run (434 steps) 77.2 / 99.9 ms (80x), the newest (92 steps) 45.1 / 57.0 ms
(47x); Issues 42.5 / 47.0 ms (44x); the biggest issue (485 runs) 45.8 / 53.6 ms (47x);
Overview 48.6 / 53.3 ms (50x). Back-test of 7 days: 429 runs in 2.0 s (211 runs/s). OTLP
ingest of 5,000 spans (100 runs) with the database idle: 2.5 s, 1,991 spans/s, `/healthz`
4.8 ms median, 22.1 ms max (31 polls). The purge with the ingest beside it (628 runs' steps,
278 runs): 2.5 s, 16,658 rows/s (38,918 steps, 15,303 steps/s), `/healthz` 9.0 ms median,
164.3 ms max (26 polls; idle 2.3 ms). The ingest started with it: 3.7 s, 1,344 spans/s,
`/healthz` 9.3 ms median, 164.3 ms max (38 polls); the purge lasted only the first 2.5 s of it.

At 10.4 million steps (`--steps 10000000 --drop`, 2026-12-06, compiled engine, load 1.7-3.8):
10,428,110 steps in 137,554 runs, 41,031 findings, 102 loop issues, 465 labels; 6.2 GiB on
disk (541 B a step with indexes, 406 B without). Fill 329 s (COPY 164 s + step indexes 53 s,
47,842 steps/s; pipeline 57 s; issues 36 s). Medians against `/healthz` (1.9 ms): runs list
first page 30.7 ms (16x), page 1,000 30.5 ms (16x); the biggest flagged run (1,182 steps)
46.3 ms (25x), the newest (290 steps) 45.2 ms (24x); Issues 29.7 ms (16x); the biggest issue
(1,646 runs) 36.2 ms (19x); Overview 96.1 ms (52x). Back-test of 7 days: 2,152 runs in 5.3 s
(407 runs/s). OTLP ingest idle 1,691 spans/s; the purge beside it 34,950 rows/s (206,258
steps of 2,747 runs, 1,303 runs) with `/healthz` at most 53.2 ms; the ingest started with the
purge 1,607 spans/s.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import http.client
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402
import gen_traces  # noqa: E402

DAYS = 365
RAW_DAYS = 30  # the projects' raw retention: older traces have had their bytes emptied
PROJECTS = [("checkout-agent", 0.55), ("support-bot", 0.30), ("code-review", 0.15)]
LOOP_SHARE = 0.25  # of the templates: repeating or oscillating agents
LABEL_SHARE = 0.015  # of the flagged copies: a person labeled their loop
MAX_LABELS = 3000
GROUP_BATCH = 500  # runs per issues.group_runs call
PURGE_STEP_DAYS, PURGE_RUN_DAYS = 350, 358
POLL_SECONDS = 0.075
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The OTLP step: its worker's broker (Redis db 10) and bench_ingest.py's server settings.
OTLP_ENV = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/10", "LOOPBOARD_API_RATE": "100000",
            "LOOPBOARD_API_BURST": "100000", "LOOPBOARD_OTLP_ROOT_GRACE": "1",
            "LOOPBOARD_OTLP_QUIET_SECONDS": "10"}  # fmt: skip


def scale_database_url(name: str | None) -> tuple[str, str, str]:
    """Return (the scale database's URL, its name, the server's admin URL)."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        from loopboard import embedded

        url = embedded.database_url()
        os.environ["LOOPBOARD_EMBEDDED"] = "true"
    parts = urlsplit(url)
    name = name or (parts.path.lstrip("/") or "loopboard") + "_scale"
    return (
        urlunsplit(parts._replace(path="/" + name)),
        name,
        urlunsplit(parts._replace(path="/postgres")),
    )


# -- the fill -----------------------------------------------------------------------------------


def run_size(rng: random.Random) -> int:
    """A run's stored steps: log-normal, median 40, 5 to 2,000."""
    return max(5, min(2000, round(rng.lognormvariate(math.log(40), 1.1))))


@dataclass
class Template:
    """One run taken through the real pipeline, as COPY text to repeat."""

    project_id: int
    run_id: int
    session: str
    data: bytes  # the OTLP/JSON file (its session id is replaced in a copy's file)
    sha256: str
    start_us: int  # the run's started_at, epoch microseconds
    steps: int
    flagged: bool
    run_cols: dict[str, str] = field(default_factory=dict)
    trace_cols: dict[str, str] = field(default_factory=dict)
    # Each step's columns but its times, and its times as (day after the run's first, the
    # rest of the text): a copy moves whole days, so only the date is written anew.
    step_lines: list[tuple[str, int, str, int, str]] = field(default_factory=list)
    start_day: date | None = None
    length_us: int = 0
    days: int = 1
    finding_lines: list[str] = field(default_factory=list)
    ledger_lines: list[str] = field(default_factory=list)

    def day_and_time(self, text: str) -> tuple[int, str]:
        """A COPY timestamptz as (days after start_day, " HH:MM:SS...+00"); NULL as (-1, "")."""
        if text == "\\N":
            return -1, ""
        return (date.fromisoformat(text[:10]) - self.start_day).days, text[10:]


def schedule(rng: random.Random, target: int, now: datetime, shares: list[float]):
    """Return the runs to make, oldest first: (created_at, project index, stored steps)."""
    runs, total = [], 0
    while total < target:
        size = run_size(rng)
        runs.append((rng.choices(range(len(shares)), shares)[0], size))
        total += size
    start = now - timedelta(days=DAYS)
    times = []
    while len(times) < len(runs):
        day = rng.random() * (DAYS - 0.1)  # the last run ends before now
        when = start + timedelta(days=day)
        weight = (0.5 + day / DAYS) * (0.4 if when.weekday() >= 5 else 1.0)
        if rng.random() < weight / 1.5:
            times.append(when)
    times.sort()
    return [(when, p, size) for when, (p, size) in zip(times, runs, strict=True)]


def ingest_template(project, rng: random.Random, index: int, when: datetime, size: int, user):
    """Make one run with gen_traces and take it through the real pipeline; return its id,
    session id and file."""
    from django.utils import timezone

    from runs.models import Run, Trace
    from runs.services import analysis, ingest

    calls = max(2, (size - 2) // 2)  # gen_traces: 2 steps per call, plus two
    loop = rng.random() < LOOP_SHARE
    pattern = rng.choice(["repeat", "oscillate"]) if loop else "healthy"
    base = int(when.timestamp() * 1e9)
    seed = rng.randrange(1 << 30)
    made = None
    for candidate in gen_traces.generate(
        2, calls, 1.0 if loop else 0.0, seed, base_time_ns=base, run_id_prefix=project.slug
    ):
        if candidate.pattern == pattern:
            made = candidate
            break
    data = json.dumps(gen_traces.to_otlp_json([made])).encode()
    version = f"2.{when.month}.0"
    trace, _ = ingest.store_trace(
        project, data, name=f"{made.run_id}.json", user=user, version=version
    )
    ingest.ingest_trace(trace.pk)
    for run_id in Run.objects.filter(trace=trace).values_list("pk", flat=True):
        analysis.analyze_run(run_id)
    run = Run.objects.get(trace=trace)
    # Received when it ended, as if the pipeline had been running all year.
    received = (run.ended_at or when) + timedelta(seconds=1)
    Run.objects.filter(pk=run.pk).update(
        created_at=received, analyzed_at=received + timedelta(seconds=2)
    )
    Trace.objects.filter(pk=trace.pk).update(
        created_at=received, updated_at=received + timedelta(seconds=2)
    )
    if received < timezone.now() - timedelta(days=RAW_DAYS):  # the raw retention emptied it
        Trace.objects.filter(pk=trace.pk).update(
            raw=b"", raw_encoding="", raw_expired_at=received + timedelta(days=RAW_DAYS)
        )
    return run.pk, made.run_id, data, trace.sha256


def copy_out(cursor, sql: str, params=()) -> list[str]:
    """Return the COPY text lines of a query."""
    out: list[bytes] = []
    with cursor.copy(f"COPY ({sql}) TO STDOUT", params) as copy:
        for chunk in copy:
            out.append(bytes(chunk))
    text = b"".join(out).decode()
    return text.split("\n")[:-1] if text else []


def columns(cursor, table: str) -> list[str]:
    cursor.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
        "ORDER BY ordinal_position",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def to_us(text: str) -> int | None:
    """Epoch microseconds of a COPY timestamptz ('\\N': None)."""
    if text == "\\N":
        return None
    value = datetime.fromisoformat(text.replace(" ", "T"))
    delta = value - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def ts(us: int) -> str:
    return (EPOCH + timedelta(microseconds=us)).isoformat()


class Layout:
    """The tables' columns, as COPY writes them."""

    def __init__(self, cursor) -> None:
        self.run = [c for c in columns(cursor, "runs_run")]
        self.trace = [c for c in columns(cursor, "runs_trace")]
        step = [c for c in columns(cursor, "runs_step") if c not in ("id", "run_id")]
        self.step_mid = [c for c in step if c not in ("started_at", "ended_at")]
        self.step = ["run_id", *self.step_mid, "started_at", "ended_at"]
        self.finding = ["run_id", *[c for c in columns(cursor, "runs_finding")
                                    if c not in ("id", "run_id")]]  # fmt: skip
        self.ledger = ["run_id", *[c for c in columns(cursor, "runs_ledgerrow")
                                   if c not in ("id", "run_id")]]  # fmt: skip


def load_template(cursor, layout: Layout, t: Template) -> None:
    """Read a template's rows back as COPY text."""
    [line] = copy_out(cursor, f"SELECT {', '.join(layout.run)} FROM runs_run WHERE id = {t.run_id}")
    t.run_cols = dict(zip(layout.run, line.split("\t"), strict=True))
    t.start_us = to_us(t.run_cols["started_at"]) or to_us(t.run_cols["created_at"])
    t.start_day = (EPOCH + timedelta(microseconds=t.start_us)).date()
    t.length_us = max(0, (to_us(t.run_cols["ended_at"]) or t.start_us) - t.start_us)
    trace_id = t.run_cols["trace_id"]
    [line] = copy_out(
        cursor, f"SELECT {', '.join(layout.trace)} FROM runs_trace WHERE id = {trace_id}"
    )
    t.trace_cols = dict(zip(layout.trace, line.split("\t"), strict=True))
    t.trace_cols["raw"] = ""  # not copied: made per copy
    mid = ", ".join(layout.step_mid)
    for line in copy_out(
        cursor,
        f"SELECT {mid}, started_at, ended_at FROM runs_step WHERE run_id = {t.run_id} ORDER BY seq",
    ):
        *rest, started, ended = line.split("\t")
        t.step_lines.append(("\t".join(rest), *t.day_and_time(started), *t.day_and_time(ended)))
        t.days = max(t.days, t.step_lines[-1][1] + 1, t.step_lines[-1][3] + 1)
    t.steps = len(t.step_lines)
    t.finding_lines = [
        line.split("\t", 1)[1]
        for line in copy_out(
            cursor,
            f"SELECT {', '.join(layout.finding)} FROM runs_finding "
            f"WHERE run_id = {t.run_id} ORDER BY id",
        )  # fmt: skip
    ]
    t.ledger_lines = [
        line.split("\t", 1)[1]
        for line in copy_out(
            cursor,
            f"SELECT {', '.join(layout.ledger)} FROM runs_ledgerrow "
            f"WHERE run_id = {t.run_id} ORDER BY seq",
        )  # fmt: skip
    ]
    t.flagged = t.run_cols["verdict"] in ("warn", "stop")


def bytea(data: bytes) -> str:
    return "\\\\x" + data.hex()


class Writer:
    """COPY streams fed text in blocks: the steps through one long COPY on a connection of
    their own (written by a thread while the rows are made), the other tables in blocks of
    FLUSH bytes on Django's connection, parents first."""

    FLUSH = 4 << 20
    ORDER = ["runs_trace", "runs_run", "runs_finding", "runs_ledgerrow"]

    def __init__(self, cursor, layout: Layout, url: str) -> None:
        self.cursor, self.layout, self.url = cursor, layout, url
        self.buffers: dict[str, list[str]] = defaultdict(list)
        self.sizes: dict[str, int] = defaultdict(int)
        self.columns = {"runs_trace": layout.trace, "runs_run": layout.run,
                        "runs_finding": layout.finding, "runs_ledgerrow": layout.ledger}  # fmt: skip
        self.steps: list[str] = []
        self.steps_size = 0

    def __enter__(self):
        import psycopg
        from psycopg.copy import QueuedLibpqWriter

        self.conn = psycopg.connect(self.url)
        cursor = self.conn.cursor()
        cols = ", ".join(self.layout.step)
        self.copying = cursor.copy(
            f"COPY runs_step ({cols}) FROM STDIN", writer=QueuedLibpqWriter(cursor)
        )
        self.copy = self.copying.__enter__()
        return self

    def add_steps(self, text: str) -> None:
        self.steps.append(text)
        self.steps_size += len(text)
        if self.steps_size > 1 << 20:
            self.copy.write("".join(self.steps))
            self.steps.clear()
            self.steps_size = 0

    def add(self, table: str, text: str) -> None:
        self.buffers[table].append(text)
        self.sizes[table] += len(text)
        if self.sizes[table] > self.FLUSH:
            self.flush(table)

    def flush(self, table: str) -> None:
        # Parents first: a finding's run must exist when its COPY checks it.
        for name in self.ORDER[: self.ORDER.index(table) + 1]:
            if self.buffers[name]:
                cols = ", ".join(self.columns[name])
                with self.cursor.copy(f"COPY {name} ({cols}) FROM STDIN") as copy:
                    copy.write("".join(self.buffers[name]))
                self.buffers[name].clear()
                self.sizes[name] = 0

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.flush(self.ORDER[-1])
            self.copy.write("".join(self.steps))
        self.copying.__exit__(*exc)
        if exc[0] is None:
            self.conn.commit()
        self.conn.close()


def drop_step_indexes(cursor) -> list[str]:
    """Drop the step table's constraints and indexes for the COPY (as pg_restore loads a
    table: building an index once costs half of keeping it up to date row by row); return
    the statements that make them again, exactly as the migrations left them."""
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid), contype FROM pg_constraint "
        "WHERE conrelid = 'runs_step'::regclass AND contype IN ('f', 'u') "
        "ORDER BY contype = 'u', conname"
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index i "
        "WHERE indrelid = 'runs_step'::regclass AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) ORDER BY 1"
    )
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    for name, _, _ in constraints:  # the foreign key first; the primary key stays
        cursor.execute(f'ALTER TABLE runs_step DROP CONSTRAINT "{name}"')
    remake = [f'ALTER TABLE runs_step ADD CONSTRAINT "{name}" {definition}'
              for name, definition, _ in reversed(constraints)]  # fmt: skip
    return remake + [definition for _, definition in indexes]


def step_schema(cursor) -> list[tuple[str, str]]:
    cursor.execute(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
        "WHERE indrelid = 'runs_step'::regclass UNION ALL SELECT conname, "
        "pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'runs_step'::regclass "
        "AND contype <> 'n' ORDER BY 1, 2"
    )
    return cursor.fetchall()


def fill(args, now: datetime) -> dict:
    """Fill the database; return what was made and how long it took."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from runs import models as m
    from runs.models import Finding, Membership, Project, Run, StorageDay
    from runs.services import issues, labels, metrics, usage

    rng = random.Random(args.seed)
    began = time.perf_counter()
    user = get_user_model().objects.create_user("bench", password="bench", is_staff=True)
    projects = []
    for slug, _share in PROJECTS:
        project = Project.objects.create(
            name=slug, slug=slug, raw_retention_days=RAW_DAYS, step_retention_days=DAYS,
            run_retention_days=DAYS,
        )  # fmt: skip
        Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
        projects.append(project)
    plan = schedule(rng, args.steps, now, [share for _, share in PROJECTS])
    per_project = max(10, min(args.templates, len(plan) // 40) // len(PROJECTS))
    # Templates: runs of the plan spread over the year, each project's own.
    templates: dict[int, list[Template]] = defaultdict(list)
    chosen: set[int] = set()
    for p in range(len(PROJECTS)):
        mine = [i for i, (_, q, _) in enumerate(plan) if q == p]
        step = max(1, len(mine) // per_project)
        chosen.update(mine[::step][:per_project])
    t0 = time.perf_counter()
    template_steps = 0
    for n, i in enumerate(sorted(chosen)):
        when, p, size = plan[i]
        project = projects[p]
        run_id, session, data, sha = ingest_template(project, rng, n, when, size, user)
        templates[p].append(Template(project.pk, run_id, session, data, sha, 0, 0, False))
        template_steps += size
    template_seconds = time.perf_counter() - t0
    with connection.cursor() as django_cursor:
        cursor = django_cursor.cursor
        layout = Layout(cursor)
        for group in templates.values():
            for t in group:
                load_template(cursor, layout, t)
        template_steps = sum(t.steps for g in templates.values() for t in g)
        print(f"templates: {sum(map(len, templates.values()))} runs, {template_steps:,} steps "
              f"through the real pipeline in {template_seconds:.1f} s", flush=True)  # fmt: skip
        cursor.execute("SELECT COALESCE(max(id), 0) FROM runs_run")
        next_run = cursor.fetchone()[0] + 1
        cursor.execute("SELECT COALESCE(max(id), 0) FROM runs_trace")
        next_trace = cursor.fetchone()[0] + 1
        copies = [(when, p) for i, (when, p, _) in enumerate(plan) if i not in chosen]
        schema = step_schema(cursor)
        remake = drop_step_indexes(cursor)
        flagged_ids: list[int] = []
        made_steps = 0
        t0 = time.perf_counter()
        raw_cutoff = now - timedelta(days=RAW_DAYS)
        now_us = int(now.timestamp() * 1e6)
        with Writer(cursor, layout, os.environ["DATABASE_URL"]) as out:
            for n, (when, p) in enumerate(copies):
                t = rng.choice(templates[p])
                run_id, trace_id = next_run + n, next_trace + n
                session = f"{PROJECTS[p][0]}-r{n:08d}"
                # The copy runs on its own day at the template's time of day.
                days = (when.date() - t.start_day).days
                when_us = t.start_us + days * 86_400_000_000
                if when_us + t.length_us + 61_000_000 > now_us:  # not in the future
                    days -= 1
                    when_us -= 86_400_000_000
                shift = days * 86_400_000_000
                when = EPOCH + timedelta(microseconds=when_us)
                received = ts(when_us + t.length_us + 1_000_000 * (1 + rng.random() * 60))
                trace = dict(t.trace_cols)
                trace["id"], trace["name"] = str(trace_id), session + ".json"
                trace["created_at"] = trace["updated_at"] = received
                trace["agent_version"] = f"2.{when.month}.0"
                if when >= raw_cutoff:
                    data = t.data.replace(t.session.encode(), session.encode())
                    packed, encoding = m.pack_raw(data)
                    trace["sha256"] = hashlib.sha256(data).hexdigest()
                    trace["size"], trace["raw"], trace["raw_encoding"] = (
                        str(len(data)), bytea(packed), encoding,
                    )  # fmt: skip
                    trace["raw_expired_at"] = "\\N"
                else:  # emptied by the raw retention 30 days after it came
                    trace["sha256"] = hashlib.sha256(f"{t.sha256}:{session}".encode()).hexdigest()
                    trace["raw"], trace["raw_encoding"] = "\\\\x", ""
                    trace["raw_expired_at"] = ts(when_us + RAW_DAYS * 86_400_000_000)
                out.add("runs_trace", "\t".join(trace[c] for c in layout.trace) + "\n")
                run = dict(t.run_cols)
                run["id"], run["trace_id"] = str(run_id), str(trace_id)
                run["external_id"], run["name"] = session, session
                run["agent_version"] = trace["agent_version"]
                run["metadata"] = run["metadata"].replace(t.session, session)
                for col in ("started_at", "ended_at"):
                    if run[col] != "\\N":
                        run[col] = ts(to_us(run[col]) + shift)
                run["created_at"] = received
                run["analyzed_at"] = ts(to_us(received) + 2_000_000)
                out.add("runs_run", "\t".join(run[c] for c in layout.run) + "\n")
                rid = str(run_id)
                dates = [(t.start_day + timedelta(days=days + i)).isoformat()
                         for i in range(t.days)] + ["\\N"]  # fmt: skip
                out.add_steps("".join(
                    f"{rid}\t{mid}\t{dates[sd]}{st}\t{dates[ed]}{et}\n"
                    for mid, sd, st, ed, et in t.step_lines
                ))  # fmt: skip
                if t.finding_lines:
                    out.add("runs_finding", "".join(f"{rid}\t{line}\n" for line in t.finding_lines))
                    flagged_ids.append(run_id)
                if t.ledger_lines:
                    out.add(
                        "runs_ledgerrow", "".join(f"{rid}\t{line}\n" for line in t.ledger_lines)
                    )
                made_steps += t.steps
                if n % 20000 == 0 and n:
                    rate = made_steps / (time.perf_counter() - t0)
                    print(f"  {n:,} runs, {made_steps:,} steps ({rate:,.0f} steps/s)", flush=True)
        copy_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        cursor.execute("SET maintenance_work_mem = '1GB'")
        for statement in remake:
            cursor.execute(statement)
        index_seconds = time.perf_counter() - t0
        assert step_schema(cursor) == schema, "the step table's indexes were not made again"
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('runs_run', 'id'), (SELECT max(id) FROM runs_run))"
        )
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('runs_trace', 'id'), "
            "(SELECT max(id) FROM runs_trace))"
        )
    print(f"COPY: {len(copies):,} runs, {made_steps:,} steps in {copy_seconds:.1f} s "
          f"({made_steps / copy_seconds:,.0f} steps/s), the step indexes made again in "
          f"{index_seconds:.1f} s", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    for start in range(0, len(flagged_ids), GROUP_BATCH):
        batch = flagged_ids[start : start + GROUP_BATCH]
        with transaction.atomic():
            issues.group_runs(list(Run.objects.filter(pk__in=batch).only("id", "project_id")))
    group_seconds = time.perf_counter() - t0
    print(f"loop issues: {len(flagged_ids):,} copied runs with findings grouped in "
          f"{group_seconds:.1f} s", flush=True)  # fmt: skip
    # Labels: a person judged the loop of some flagged runs (one in ten a false alarm).
    t0 = time.perf_counter()
    wanted = sorted(rng.sample(flagged_ids, min(MAX_LABELS, int(len(flagged_ids) * LABEL_SHARE))))
    leads = Finding.objects.filter(run_id__in=wanted, lead=True).exclude(severity="info")
    first: dict[int, Finding] = {}
    for finding in leads.order_by("run_id", "fired_at", "id"):
        first.setdefault(finding.run_id, finding)
    for n, finding in enumerate(first.values()):
        if n % 10 == 0:
            labels.label_finding(user, finding, "false", "polling")
        else:
            labels.label_finding(user, finding, "real")
    label_seconds = time.perf_counter() - t0
    metrics.compact()
    # Daily figures: today's measured, the days before scaled by what was stored by then.
    for project in projects:
        today = usage.measure(project, now)
        with connection.cursor() as c:
            c.execute(
                "SELECT (created_at AT TIME ZONE 'UTC')::date, sum(step_count) FROM runs_run "
                "WHERE project_id = %s GROUP BY 1 ORDER BY 1",
                [project.pk],
            )
            per_day = c.fetchall()
        total = sum(n for _, n in per_day) or 1
        rows, running, window = [], 0, []
        for day, steps in per_day:
            running += steps
            window.append((day, steps))
            window = [(d, s) for d, s in window if (day - d).days < RAW_DAYS]
            raw_share = sum(s for _, s in window)
            if day >= today.day:
                continue
            rows.append(StorageDay(
                project=project, day=day, measured_at=datetime.combine(day, datetime.min.time(), UTC),
                raw_bytes=int(today.raw_bytes * raw_share / max(1, recent_steps(per_day, today.day))),
                step_bytes=int(today.step_bytes * running / total),
                finding_bytes=int(today.finding_bytes * running / total),
            ))  # fmt: skip
        StorageDay.objects.bulk_create(rows)
    t0 = time.perf_counter()
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE")
    vacuum_seconds = time.perf_counter() - t0
    return {
        "seconds": time.perf_counter() - began,
        "copy_seconds": copy_seconds,
        "copy_steps": made_steps,
        "index_seconds": index_seconds,
        "template_seconds": template_seconds,
        "template_steps": template_steps,
        "group_seconds": group_seconds,
        "label_seconds": label_seconds,
        "labels": len(first),
        "vacuum_seconds": vacuum_seconds,
    }


def recent_steps(per_day, today) -> int:
    return sum(s for d, s in per_day if (today - d).days < RAW_DAYS) or 1


# -- timing -------------------------------------------------------------------------------------


class Web:
    """gunicorn on the filled database, and a logged-in HTTP client for it."""

    def __init__(self, env: dict[str, str], cookie: str, workers: int = 2) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.cookie = cookie
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "loopboard.wsgi", "-w", str(workers),
             "--bind", f"127.0.0.1:{self.port}", "--timeout", "600", "--log-level", "warning"],
            env=env, cwd=ROOT,
        )  # fmt: skip
        for _ in range(150):
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("gunicorn did not answer")

    def get(self, path: str) -> tuple[float, int]:
        """GET a path; return (milliseconds, bytes)."""
        began = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("GET", path, headers={"Cookie": f"sessionid={self.cookie}"})
        response = conn.getresponse()
        body = response.read()
        elapsed = (time.perf_counter() - began) * 1000
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return elapsed, len(body)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def time_page(web: Web, path: str, repeat: int) -> tuple[float, float, int]:
    for _ in range(3):  # warm both workers: templates, plans, the page cache of the rows
        web.get(path)
    times, size = [], 0
    for _ in range(repeat):
        elapsed, size = web.get(path)
        times.append(elapsed)
    return statistics.median(times), pct(times, 0.95), size


class Poller(threading.Thread):
    """GET /healthz every POLL_SECONDS until stopped; keeps each latency."""

    def __init__(self, web: Web) -> None:
        super().__init__(daemon=True)
        self.web, self.times, self.at, self.halt = web, [], [], threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.at.append(time.perf_counter())
            self.times.append(self.web.get("/healthz")[0])
            self.halt.wait(POLL_SECONDS)

    def stop(self) -> list[float]:
        self.halt.set()
        self.join()
        return self.times

    def between(self, start: float, end: float) -> list[float]:
        """The latencies of the polls sent from start to end (perf_counter)."""
        return [t for at, t in zip(self.at, self.times, strict=True) if start <= at <= end]


def start_worker(env: dict[str, str]) -> subprocess.Popen:
    """A Celery worker on the filled database (as bench_ingest.py starts one), once it answers."""
    from loopboard.celery import app

    subprocess.run(["redis-cli", "-u", env["CELERY_BROKER_URL"], "flushdb"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "loopboard.celery", "worker",
         "--loglevel", "WARNING", "--concurrency", "2", "--without-gossip", "--without-mingle"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL,  # its banner; warnings go to stderr
    )  # fmt: skip
    for _ in range(60):
        if app.control.ping(timeout=1):
            return worker
    raise RuntimeError("the Celery worker did not answer")


def otlp_ingest(web: Web, key: str, files: list[Path], project, runs: int) -> tuple[float, float]:
    """POST the batches (bench_ingest.send) and wait until every run of the project is stored
    and analyzed; return when it started and ended (perf_counter)."""
    from django.db import connection

    from runs.models import Run

    started = time.perf_counter()
    bench_ingest.send(f"http://127.0.0.1:{web.port}", {"Authorization": f"Bearer {key}"}, files)
    mine = Run.objects.filter(project=project)
    while mine.count() < runs or mine.filter(verdict="pending").exists():
        if time.perf_counter() - started > 900:
            raise RuntimeError(f"OTLP ingest into {project.slug}: not analyzed in 900 s")
        time.sleep(0.2)
    ended = time.perf_counter()
    connection.close()  # run in a thread: its own connection
    return started, ended


def counts(skip: tuple[int, ...] = ()) -> dict[str, int]:
    """Rows per table, but those of the projects `skip` (the OTLP step's own)."""
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table in ("runs_run", "runs_step", "runs_finding", "runs_ledgerrow", "runs_trace",
                      "runs_issuerun", "runs_label"):  # fmt: skip
            where = ("project_id <> ALL(%s)" if table in ("runs_run", "runs_trace") else
                     "run_id NOT IN (SELECT id FROM runs_run WHERE project_id = ANY(%s))")  # fmt: skip
            cursor.execute(f"SELECT count(*) FROM {table} WHERE {where}", [list(skip)])
            out[table] = cursor.fetchone()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000_000)
    parser.add_argument("--database", help="default: the configured database's name + _scale")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--templates", type=int, default=300, help="runs through the pipeline")
    parser.add_argument("--repeat", type=int, default=11, help="requests per page")
    parser.add_argument("--reuse", action="store_true", help="keep a database filled alike")
    parser.add_argument("--no-purge", action="store_true", help="skip the retention purge")
    parser.add_argument("--otlp-spans", type=int, default=5000, help="OTLP ingest (0: none)")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    args = parser.parse_args()

    url, name, admin = scale_database_url(args.database)
    import psycopg

    marker = f"bench_scale steps={args.steps} seed={args.seed} templates={args.templates}"
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [name],
        ).fetchone()
        reuse = args.reuse and row is not None and row[0] == marker
        if not reuse:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    if args.otlp_spans:
        os.environ.update(OTLP_ENV)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    os.environ.setdefault("SECRET_KEY", "bench")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    import detection
    from runs.models import ApiKey, LoopIssue, Project, Run
    from runs.services import backtest, retention

    now = timezone.now()
    if reuse:
        print(f"reusing {name} ({marker})")
        made = None
    else:
        call_command("migrate", verbosity=0)
        made = fill(args, now)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{marker}'")
    before = counts()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database()), "
                       "pg_total_relation_size('runs_step'), pg_relation_size('runs_step')")  # fmt: skip
        db_bytes, step_bytes, step_heap = cursor.fetchone()
    user = get_user_model().objects.get(username="bench")
    client = Client()
    client.force_login(user)
    env = dict(os.environ, DATABASE_URL=url)
    web = Web(env, client.cookies["sessionid"].value)
    results: list[tuple[str, str, str, str]] = []
    worker, tmp, skip = None, Path(tempfile.mkdtemp(prefix="bench-scale-")), ()
    try:
        rows_per_page = 50
        page = min(1000, max(2, (before["runs_run"] - 1) // rows_per_page))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT created_at, id FROM runs_run ORDER BY created_at DESC, id DESC "
                "OFFSET %s LIMIT 1",
                [(page - 1) * rows_per_page - 1],
            )
            created, pk = cursor.fetchone()
        deep = "/?after=" + quote(f"{created.isoformat()}~{pk}")
        biggest = (
            Run.objects.filter(verdict__in=["warn", "stop"]).order_by("-step_count", "id").first()
        )
        issue = LoopIssue.objects.order_by("-run_count", "id").first()
        newest = Run.objects.order_by("-created_at", "-id").first()
        pages = [
            ("/healthz (baseline)", "/healthz"),
            ("runs list, first page", "/"),
            (f"runs list, page {page:,}", deep),
            (f"run page ({biggest.step_count:,} steps, {biggest.verdict})", biggest.get_absolute_url()),
            (f"run page, newest ({newest.step_count:,} steps)", newest.get_absolute_url()),
            ("Issues page", "/issues/"),
            (f"issue page ({issue.run_count:,} runs)", issue.get_absolute_url()),
            ("Overview", "/overview/"),
        ]  # fmt: skip
        base = None
        for label, path in pages:
            median, p95, size = time_page(web, path, args.repeat)
            base = base or median
            results.append((label, f"{median:,.1f} ms", f"{p95:,.1f} ms", f"{median / base:,.1f}x"))
            print(f"  {label}: {median:.1f} ms (p95 {p95:.1f}), {size / 1024:.0f} KB", flush=True)
        healthz = base
        # A back-test of the last 7 days in the biggest project, as the worker runs it.
        project = Project.objects.get(slug=PROJECTS[0][0])
        draft = {"defaults": {"warn": 2, "stop": 4}, "tools": {}}
        job = backtest.start(project, user, draft, now - timedelta(days=7), now)
        t0 = time.perf_counter()
        job = backtest.run_job(job.pk)
        seconds = time.perf_counter() - t0
        results.append((f"back-test, 7 days ({job.total:,} runs, {job.status})",
                        f"{seconds * 1000:,.0f} ms", "", f"{job.total / seconds:,.0f} runs/s"))  # fmt: skip
        print(f"  back-test: {job.total} runs in {seconds:.1f} s", flush=True)
        if args.otlp_spans:  # OTLP ingest into a project of its own, the database idle
            otlp_runs = max(1, args.otlp_spans // 50)  # bench_ingest's 24 tool steps: 50 spans
            spans = bench_ingest.generate(otlp_runs, 24, tmp)["spans"]
            files = sorted((tmp / "batches").iterdir())
            otlp = [Project.objects.create(name=f"otlp-{n}", slug=f"otlp-{n}")
                    for n in ("warm-up", "idle", "purge")]  # fmt: skip
            keys = [ApiKey.issue(p, "bench_scale", user)[1] for p in otlp]
            skip = tuple(p.pk for p in otlp)
            worker = start_worker(env)
            otlp_ingest(web, keys[0], files, otlp[0], otlp_runs)  # the warm-up, untimed
            poller = Poller(web)
            poller.start()
            start, end = otlp_ingest(web, keys[1], files, otlp[1], otlp_runs)
            polled = poller.stop()

            def ingest_row(when: str, start: float, end: float, polled: list[float]) -> None:
                results.append((f"OTLP ingest, {when} ({spans:,} spans)",
                                f"{(end - start) * 1000:,.0f} ms", "",
                                f"{spans / (end - start):,.0f} spans/s"))  # fmt: skip
                results.append((f"  /healthz during it ({len(polled)} polls)",
                                f"{statistics.median(polled):,.1f} ms",
                                f"max {max(polled):,.1f} ms", ""))  # fmt: skip
                print(f"  OTLP ingest, {when}: {spans} spans in {end - start:.1f} s", flush=True)

            ingest_row("database idle", start, end, polled)
        if not args.no_purge:
            Project.objects.update(
                step_retention_days=PURGE_STEP_DAYS, run_retention_days=PURGE_RUN_DAYS
            )
            idle = Poller(web)
            idle.start()
            time.sleep(3)
            idle_times = idle.stop()
            poller = Poller(web)
            poller.start()
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                beside = None
                if args.otlp_spans:  # into its other project, from the purge's start
                    beside = pool.submit(otlp_ingest, web, keys[2], files, otlp[2], otlp_runs)
                done = retention.apply(timezone.now())
                seconds = time.perf_counter() - t0
                start, end = beside.result() if beside else (0, 0)
            poller.stop()
            polled = poller.between(t0, t0 + seconds)
            after = counts(skip)  # not the OTLP projects' rows
            gone = {table: before[table] - after[table] for table in before}
            rows = sum(gone[t] for t in ("runs_run", "runs_step", "runs_finding", "runs_ledgerrow",
                                         "runs_trace", "runs_issuerun"))  # fmt: skip
            results.append((f"retention purge ({done['steps']:,} runs' steps, {done['runs']:,} runs)"
                            + (", OTLP ingest beside" if beside else ""),
                            f"{seconds * 1000:,.0f} ms", "", f"{rows / seconds:,.0f} rows/s"))  # fmt: skip
            results.append(("  of which steps", f"{gone['runs_step']:,}", "",
                            f"{gone['runs_step'] / seconds:,.0f} steps/s"))  # fmt: skip
            results.append((f"/healthz during the purge ({len(polled)} polls)",
                            f"{statistics.median(polled):,.1f} ms", f"max {max(polled):,.1f} ms",
                            f"idle {statistics.median(idle_times):,.1f} ms"))  # fmt: skip
            if beside:
                ingest_row(f"started with the purge, done at {end - t0:.1f} s", start, end,
                           poller.between(start, end))  # fmt: skip
    finally:
        if worker:
            worker.terminate()
            worker.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
        web.close()
    print()
    if made:
        rate = made["copy_steps"] / (made["copy_seconds"] + made["index_seconds"])
        print(f"fill: {before['runs_step']:,} steps in {before['runs_run']:,} runs "
              f"(3 projects, {DAYS} days) in {made['seconds']:.0f} s: COPY "
              f"{made['copy_steps']:,} steps in {made['copy_seconds']:.0f} s + step indexes "
              f"{made['index_seconds']:.0f} s ({rate:,.0f} steps/s); "
              f"{made['template_steps']:,} steps through the pipeline in "
              f"{made['template_seconds']:.0f} s; issues {made['group_seconds']:.0f} s; "
              f"{made['labels']} labels {made['label_seconds']:.0f} s; VACUUM ANALYZE "
              f"{made['vacuum_seconds']:.0f} s")  # fmt: skip
    print(f"database {db_bytes / 2**30:.1f} GiB on disk; steps {step_bytes / 2**30:.1f} GiB "
          f"with indexes ({step_bytes / max(1, before['runs_step']):,.0f} B a step, "
          f"{step_heap / max(1, before['runs_step']):,.0f} B without); "
          f"{before['runs_finding']:,} findings, {LoopIssue.objects.count():,} loop issues, "
          f"{before['runs_label']:,} labels; engine "
          f"{'compiled' if detection.COMPILED else 'plain Python'}")  # fmt: skip
    print(f"\n{'':52} {'median':>12} {'p95':>14} {'vs /healthz':>16}")
    for label, median, p95, ratio in results:
        print(f"{label:52} {median:>12} {p95:>14} {ratio:>16}")
    print(f"(/healthz median {healthz:.1f} ms; {args.repeat} requests a page over HTTP, "
          f"gunicorn -w 2)")  # fmt: skip
    if args.drop:
        connection.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}"')
        print(f"dropped {name}")


if __name__ == "__main__":
    main()
