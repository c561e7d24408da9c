"""Time the pages on big data: the runs list at 100k runs, the run page at 100k steps.

    .venv/bin/python bench/bench_pages.py [--runs 100000] [--steps 100000] [--repeat 7] [--fresh]

Uses its own database (the configured one's name + "_bench", created when missing; the
embedded PostgreSQL when DATABASE_URL is unset), fills it with COPY, analyzes the big run with
the real engine, then times each page through Django's test Client (server time: URL
resolution, views, queries, templates; no network), beside /healthz as the baseline.
Prints median and p95 in milliseconds and the number of queries per page.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOOLS = [
    "web_search", "fetch_url", "read_file", "write_file", "edit_file", "bash", "grep", "glob",
    "list_dir", "run_tests", "git_diff", "git_status", "python", "sql_query", "http_get",
    "get_job_status", "deploy", "create_ticket", "send_email", "calendar_lookup",
    "mcp__github__search_issues", "mcp__github__get_pr", "mcp__slack__post", "browser_click",
    "browser_type", "browser_screenshot", "vector_search", "summarize", "translate", "todo_write",
]  # fmt: skip
DETECTORS = ["repeat", "oscillation", "result_stall", "near_repeat", "mutating_failure"]


def bench_database_url() -> str:
    """Return the bench database's URL (created if missing)."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        from loopboard import embedded

        url = embedded.database_url()
        os.environ["LOOPBOARD_EMBEDDED"] = "true"
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "loopboard"
    bench = urlunsplit(parts._replace(path="/" + name + "_bench"))
    admin = urlunsplit(parts._replace(path="/postgres"))
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name + "_bench",)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}_bench"')
    return bench


def make_runs(project_id: int, count: int) -> None:
    """Insert `count` analyzed-looking runs with COPY and fill their search vectors."""
    from django.db import connection

    from runs.services import storage
    from runs.services.summary import RunSummary, Strip

    rng = random.Random(7)
    now = datetime.now(UTC)
    columns = [
        "project_id", "external_id", "name", "format", "metadata", "step_count",
        "tool_call_count", "verdict", "stall_score", "waste_steps", "waste_tokens",
        "waste_cost", "waste_seconds", "detectors", "tools", "summary", "started_at",
        "ended_at", "created_at", "analyzed_at",
    ]  # fmt: skip

    def rows():
        for i in range(count):
            verdict = rng.choices(["ok", "warn", "stop"], [70, 20, 10])[0]
            steps = rng.randint(5, 400)
            tools = sorted(rng.sample(TOOLS, rng.randint(1, 6)))
            flagged = verdict != "ok"
            detectors = sorted(rng.sample(DETECTORS, rng.randint(1, 2))) if flagged else []
            cells = tuple(rng.choice([0, 0, 0, 1, 2, 3, 4]) if flagged else 0 for _ in range(48))
            fired = (rng.randint(0, 47),) if flagged else ()
            created = now - timedelta(seconds=rng.randint(0, 90 * 86400))
            waste = rng.randint(1, steps) if flagged else 0
            yield (
                project_id, f"run-{i}", f"agent-session-{i:06d}.jsonl", "native", "{}",
                steps, steps // 2, verdict, round(rng.random() * (0.9 if flagged else 0.2), 4),
                waste, waste * 900 if flagged else None, waste * 0.003 if flagged else None,
                waste * 4.0 if flagged else None, "{" + ",".join(detectors) + "}",
                "{" + ",".join(tools) + "}",
                json.dumps(RunSummary(strip=Strip(cells, fired)).to_json()),
                created, created + timedelta(seconds=steps * 3), created, created,
            )  # fmt: skip

    storage.copy_rows("runs_run", columns, rows())
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET search = to_tsvector('simple', "
            "array_to_string(tools, ' ') || ' ' || external_id) WHERE project_id = %s",
            [project_id],
        )
        cursor.execute("ANALYZE runs_run")


def make_big_run(project, steps: int):
    """Insert one run of `steps` steps (turns, progress, long loops) and analyze it."""
    import detection
    from runs.models import Run
    from runs.services import analysis, storage
    from runs.services.policy import engine_policy

    start = datetime(2026, 1, 1, tzinfo=UTC)
    run = Run.objects.create(
        project=project,
        external_id="big",
        name=f"big-run-{steps}-steps.jsonl",
        format="native",
        metadata={"model": "bench-model", "agent": "bench-agent"},
        step_count=steps,
        started_at=start,
        ended_at=start + timedelta(seconds=steps),
        created_at=start - timedelta(days=365),  # keep it off the first page of the list
    )
    epoch = start.timestamp()
    calls = 0

    def engine_steps():
        nonlocal calls
        for seq in range(steps):
            at = epoch + seq
            block, offset = divmod(seq, 1000)
            if offset == 0:
                yield detection.Step(seq, "user", text=f"Task {block}", started_at=at, ended_at=at)
                continue
            if offset % 10 == 1:
                yield detection.Step(seq, "assistant", text=f"Thinking about step {seq}",
                                     started_at=at, ended_at=at, tokens_in=50, tokens_out=20,
                                     cost=0.0002)  # fmt: skip
                continue
            calls += 1
            if offset < 400:  # progress: new arguments every time
                tool, args, result = "read_file", {"path": f"src/f{seq}.py"}, f"line {seq}"
            else:  # a long loop: the same search, nothing new
                tool, args, result = "web_search", {"query": f"q{block}"}, {"results": []}
            yield detection.Step(seq, "tool_call", tool=tool, args=args, result=result,
                                 started_at=at, ended_at=at + 0.4, tokens_in=900, tokens_out=40,
                                 cost=0.003)  # fmt: skip

    policy = engine_policy(project)
    rows = (storage.step_values(run.pk, step, policy)[0] for step in engine_steps())
    storage.copy_rows("runs_step", storage.STEP_COLUMNS, rows)
    Run.objects.filter(pk=run.pk).update(tool_call_count=calls)
    began = time.perf_counter()
    analysis.analyze_run(run.pk, policy)
    print(f"analyze_run on {steps} steps: {time.perf_counter() - began:.2f} s")
    run.refresh_from_db()
    return run


def timed(client, url: str, repeat: int, warm: bool = True) -> tuple[float, float, int, int]:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    if warm:
        client.get(url)  # warm caches (templates, plans)
    times = []
    queries = 0
    for _ in range(repeat):
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            began = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - began) * 1000)
        queries = len(captured)
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    return statistics.median(times), p95, queries, len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description="Time the runs list and the run page.")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--fresh", action="store_true", help="drop the bench data first")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from runs.models import Membership, Project, Run

    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    if args.fresh:
        Project.objects.filter(slug="bench").delete()
    user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_staff": True})
    project, _ = Project.objects.get_or_create(slug="bench", defaults={"name": "bench"})
    Membership.objects.get_or_create(project=project, user=user)
    have = Run.objects.filter(project=project).exclude(external_id="big").count()
    if have < args.runs:
        began = time.perf_counter()
        make_runs(project.pk, args.runs - have)
        print(f"inserted {args.runs - have} runs in {time.perf_counter() - began:.1f} s")
    big = Run.objects.filter(project=project, external_id="big", step_count=args.steps).first()
    if big is None:
        Run.objects.filter(project=project, external_id="big").delete()
        began = time.perf_counter()
        big = make_big_run(project, args.steps)
        print(f"big run ready in {time.perf_counter() - began:.1f} s")
    total = Run.objects.filter(project=project).count()
    deep = (
        Run.objects.filter(project=project)
        .order_by("-created_at", "-id")
        .values_list("created_at", "id")[total * 9 // 10]
    )
    deep_cursor = f"{deep[0].isoformat()}~{deep[1]}".replace("+", "%2B")
    finding = big.findings.exclude(severity="info").first()

    client = Client()
    client.force_login(user)
    pages = [
        ("baseline /healthz", "/healthz"),
        ("runs list, newest", "/"),
        ("runs list, by stall score", "/?sort=score"),
        ("runs list, by waste", "/?sort=waste"),
        ("runs list, flagged + detector", "/?verdict=flagged&detector=oscillation"),
        ("runs list, tool filter", "/?tool=mcp__slack__post"),
        ("runs list, free text", "/?q=github+search"),
        ("runs list, date range", "/?since=2026-11-01&until=2026-11-15"),
        ("runs list, page at 90% depth", f"/?after={deep_cursor}"),
        (f"run page, {big.step_count} steps", big.get_absolute_url()),
        ("run page, window at step 50000", big.get_absolute_url() + "?from=50000"),
        ("run page, focus a finding", big.get_absolute_url() + f"?focus={finding.pk}" if finding else big.get_absolute_url()),
        ("unfold a band (htmx)", big.get_absolute_url() + "?from=1400&to=2000&flat=1"),
        ("step detail + diff", f"/runs/{big.pk}/steps/1500/"),
        ("run tree (cold)", f"/runs/{big.pk}/tree/"),
        ("ledger", f"/runs/{big.pk}/ledger/?from=50000"),
        ("overview", "/overview/"),
    ]  # fmt: skip
    print(f"\n{total} runs in the bench project; big run: {big.step_count} steps, "
          f"{big.findings.count()} findings, verdict {big.verdict}\n")  # fmt: skip
    print(f"{'page':40} {'median ms':>10} {'p95 ms':>8} {'queries':>8} {'KB':>7}")
    from runs.web import tree

    for label, url in pages:
        cold = "tree" in url
        if cold:
            tree._CACHE.clear()
        median, p95, queries, size = timed(client, url, 1 if cold else args.repeat, warm=not cold)
        print(f"{label:40} {median:10.1f} {p95:8.1f} {queries:8d} {size / 1024:7.1f}")
    median, p95, queries, size = timed(client, f"/runs/{big.pk}/tree/?node=0", args.repeat)
    print(
        f"{'run tree (cached), expand a node':40} {median:10.1f} {p95:8.1f} {queries:8d} {size / 1024:7.1f}"
    )


if __name__ == "__main__":
    main()
