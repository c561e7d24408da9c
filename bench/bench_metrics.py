"""Time a Prometheus scrape of GET /metrics at a million runs, beside the GROUP BY queries
that would compute the same figures from the runs, findings and traces tables.

    .venv/bin/python bench/bench_metrics.py [--runs 1000000] [--repeat 7] [--new 1000]

Uses its own database (the configured one's name + "_bench", as bench_pages.py does). Fills
it with SQL (a trace per run, five projects, two findings per flagged run) with the metric
triggers off, has migration 0019 count them as on an existing install, and prints:
- the time that migration takes;
- the baseline: the same figures by GROUP BY over the tables, per scrape;
- a scrape through Django's test Client (view, auth, queries, exposition), with `--new`
  runs (and their findings) inserted between scrapes, so each scrape folds fresh rows, and
  the beat's fold and VACUUM before each (it runs every minute);
- what the triggers add to writing runs and findings, per 1,000 runs, and to importing and
  analyzing a trace as the worker does (with and without them, in transactions rolled back).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import bench_database_url  # noqa: E402

PROJECTS = 5
TOKEN = "bench-metrics-token"

# Runs: 70% ok, 20% warn, 10% stop; four formats; stored 0-0.3 s after their trace and
# analyzed 0-2 s after that. Flagged runs waste 10 steps, 9,000 tokens, $0.03.
FILL = """
WITH projects AS (
    SELECT array_agg(id ORDER BY id) AS ids FROM runs_project WHERE slug LIKE 'metrics-bench-%%'
), traces AS (
    INSERT INTO runs_trace (project_id, name, sha256, size, raw, declared_format, format, status,
        error, skipped_lines, import_attempts, warnings, source, created_at, updated_at,
        agent_version)
    SELECT ids[1 + i %% %(projects)s], 'trace-' || i, md5(random()::text || i), 100, '\\x00'::bytea,
        '', 'native', 'analyzed', '', 0, 1, '[]', 'api',
        now() - (i || ' seconds')::interval, now(), ''
    FROM projects, generate_series(1, %(count)s) i
    RETURNING id, project_id, created_at
), runs AS (
    INSERT INTO runs_run (project_id, trace_id, external_id, name, format, metadata, step_count,
        tool_call_count, verdict, stall_score, waste_steps, waste_tokens, waste_cost,
        detectors, tools, summary, created_at, analyzed_at, live, next_seq, version,
        agent, agent_version)
    SELECT project_id, id, 'run-' || id, 'run ' || id,
        (ARRAY['native', 'otlp', 'claude-code', 'langfuse'])[1 + id %% 4], '{}', 50, 20,
        v, 0.1, CASE WHEN v = 'ok' THEN 0 ELSE 10 END,
        CASE WHEN v = 'ok' THEN NULL ELSE 9000 END, CASE WHEN v = 'ok' THEN NULL ELSE 0.03 END,
        CASE WHEN v = 'ok' THEN '{}'::varchar[] ELSE '{repeat,oscillation}'::varchar[] END,
        '{bash,read_file}', '{}', created_at + random() * interval '0.3 s',
        created_at + random() * interval '2.3 s', false, 0, 0, '', ''
    FROM (
        SELECT *, (ARRAY['ok','ok','ok','ok','ok','ok','ok','warn','warn','stop'])[1 + id %% 10] v
        FROM traces
    ) t
    RETURNING id, verdict, detectors
)
INSERT INTO runs_finding (run_id, detector, severity, tool, signature, seqs, count, threshold,
    fired_at, rule, message, waste_steps, waste_tokens, waste_cost, fingerprint)
SELECT r.id, d, CASE WHEN r.verdict = 'stop' THEN 'stop' ELSE 'warn' END, 'bash', 'sig',
    '{1,2,3,4,5}', 5, 3, 3, 'defaults', 'bash repeated 5 times with the same arguments', 10,
    9000, 0.03, ''
FROM runs r, unnest(r.detectors) d
"""

# The same figures without the metric tables: what a scrape would cost counting rows.
BASELINE = [
    """SELECT project_id, format, verdict, count(*), sum(waste_tokens), sum(waste_cost),
        count(*) FILTER (WHERE live),
        count(*) FILTER (WHERE analyzed_at - created_at <= interval '0.5 s'),
        count(*) FILTER (WHERE analyzed_at - created_at <= interval '1 s'),
        count(*) FILTER (WHERE analyzed_at - created_at <= interval '5 s'),
        sum(extract(epoch FROM analyzed_at - created_at))
    FROM runs_run GROUP BY 1, 2, 3""",
    """SELECT project_id, d, count(*) FROM runs_run, unnest(detectors) d
    WHERE verdict IN ('warn', 'stop') GROUP BY 1, 2""",
    """SELECT r.project_id, f.detector, f.severity, count(*)
    FROM runs_finding f JOIN runs_run r ON r.id = f.run_id GROUP BY 1, 2, 3""",
    """SELECT r.project_id,
        count(*) FILTER (WHERE r.created_at - t.created_at <= interval '0.1 s'),
        count(*) FILTER (WHERE r.created_at - t.created_at <= interval '0.25 s'),
        sum(extract(epoch FROM r.created_at - t.created_at))
    FROM runs_run r JOIN runs_trace t ON t.id = r.trace_id GROUP BY 1""",
    """SELECT c.project_id, d.status, count(*)
    FROM runs_delivery d JOIN runs_channel c ON c.id = d.channel_id GROUP BY 1, 2""",
]


def fill(count: int, *, batch: int = 100_000) -> None:
    from django.db import connection, transaction

    for start in range(0, count, batch):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(FILL, {"projects": PROJECTS, "count": min(batch, count - start)})
        print(f"  {start + min(batch, count - start):,} runs", end="\r", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_run")
        cursor.execute("VACUUM ANALYZE runs_finding")
        cursor.execute("VACUUM ANALYZE runs_trace")
    print()


def timed(action, repeat: int) -> tuple[float, float]:
    """Median and worst wall time of `action()` in milliseconds."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), max(times)


def write_cost(runs: int, *, triggers: bool) -> float:
    """Milliseconds to write `runs` runs (traces, findings) in a transaction rolled back."""
    from django.db import connection, transaction

    began = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        if not triggers:  # replica mode skips ordinary triggers (superuser)
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(FILL, {"projects": PROJECTS, "count": runs})
        elapsed = (time.perf_counter() - began) * 1000
        transaction.set_rollback(True)
    return elapsed


def import_cost(project, traces: int, *, triggers: bool) -> float:
    """Milliseconds to import and analyze `traces` looping traces the way the worker does
    (store, parse, analyze), in a transaction rolled back."""
    import json

    from django.db import connection, transaction

    from runs.services import analysis, ingest

    began = time.perf_counter()
    with transaction.atomic():
        with connection.cursor() as cursor:
            role = "origin" if triggers else "replica"
            cursor.execute(f"SET LOCAL session_replication_role = {role}")
        for i in range(traces):
            events = [{"type": "message", "role": "user", "content": f"task {i}"}]
            events += [
                {"type": "tool_call", "tool": "web_search", "args": {"q": f"q{n % 3}"},
                 "result": {"hits": []}, "tokens_in": 900, "tokens_out": 100, "cost": 0.02}
                for n in range(40)
            ]  # fmt: skip
            data = "".join(json.dumps(e) + "\n" for e in events).encode()
            trace, _ = ingest.store_trace(project, data, name=f"import-{i}.jsonl")
            ingest.ingest_trace(trace.pk)
            for run_id in trace.runs.values_list("pk", flat=True):
                analysis.analyze_run(run_id)
        elapsed = (time.perf_counter() - began) * 1000
        transaction.set_rollback(True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description="Time GET /metrics at a million runs.")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--new", type=int, default=1000, help="runs inserted between scrapes")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from runs.models import Project, Run
    from runs.services import metrics

    settings.ALLOWED_HOSTS = ["*"]
    settings.LOOPBOARD_METRICS_TOKEN = TOKEN
    call_command("migrate", verbosity=0)
    for i in range(1, PROJECTS + 1):
        Project.objects.get_or_create(slug=f"metrics-bench-{i}", defaults={"name": f"mb {i}"})
    have = Run.objects.count()
    if have < args.runs:
        began = time.perf_counter()
        fill(args.runs - have)
        print(f"inserted {args.runs - have:,} runs in {time.perf_counter() - began:.1f} s")
        call_command("migrate", "runs", "0018_issue_versions", verbosity=0)
        began = time.perf_counter()
        call_command("migrate", "runs", verbosity=0)
        print(f"migration 0019 counts the stored rows: {time.perf_counter() - began:.1f} s")
    began = time.perf_counter()
    metrics.compact(vacuum=True)
    print(f"fold the metric rows waiting: {(time.perf_counter() - began) * 1000:,.0f} ms")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_metric_total")
        totals = cursor.fetchone()[0]
    print(f"\n{Run.objects.count():,} runs in the database; {totals} metric total rows\n")

    def baseline() -> None:
        with connection.cursor() as cursor:
            for query in BASELINE:
                cursor.execute(query)
                cursor.fetchall()

    client = Client()

    def scrape() -> None:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200, response.status_code

    scrape()  # warm: connection, URL resolution, imports
    size = len(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content)
    scrapes = []
    for _ in range(args.repeat):
        metrics.compact(vacuum=True)  # what the beat does every minute
        with connection.cursor() as cursor:
            cursor.execute(FILL, {"projects": PROJECTS, "count": args.new})
        scrapes.append(timed(scrape, 1)[0])
    metrics.compact(vacuum=True)
    quiet = timed(scrape, args.repeat)

    def row(what: str, median: float, worst: float) -> None:
        print(f"{what:58} {median:10.1f} {worst:8.1f}")

    print(f"{'what':58} {'median ms':>10} {'max ms':>8}")
    row("baseline: GROUP BY over runs, findings, traces", *timed(baseline, 3))
    row(
        f"GET /metrics, {args.new:,} new runs folded per scrape",
        statistics.median(scrapes),
        max(scrapes),
    )
    row("GET /metrics, nothing new", *quiet)
    print(f"exposition: {size:,} bytes for {PROJECTS} projects")

    n = 10_000
    with_triggers = statistics.median(write_cost(n, triggers=True) for _ in range(3))
    without = statistics.median(write_cost(n, triggers=False) for _ in range(3))
    print(
        f"\nwriting {n:,} runs with their traces and findings: {without:,.0f} ms without the "
        f"metric triggers, {with_triggers:,.0f} ms with them "
        f"(+{(with_triggers - without) / (n / 1000):.1f} ms per 1,000 runs)"
    )
    project = Project.objects.get(slug="metrics-bench-1")
    traces = 50
    costs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(3):  # alternated, so that a busy moment does not weigh on one side only
        for triggers in (True, False):
            costs[triggers].append(import_cost(project, traces, triggers=triggers))
    with_triggers, without = statistics.median(costs[True]), statistics.median(costs[False])
    print(
        f"importing and analyzing {traces} looping traces (41 steps each) as the worker does: "
        f"{without / traces:.1f} ms a trace without the triggers, "
        f"{with_triggers / traces:.1f} ms with them"
    )


if __name__ == "__main__":
    main()
