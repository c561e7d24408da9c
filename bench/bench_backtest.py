"""Time a back-test over 100k stored runs, beside the old inline preview's per-run cost.

    .venv/bin/python bench/bench_backtest.py [--runs 100000] [--steps 12] [--fresh]

Uses bench_pages.py's database (the configured one's name + "_bench"; the embedded PostgreSQL
when DATABASE_URL is unset) and its own project, "backtest-bench". Fills it once with COPY:
`--runs` runs of `--steps` steps each over the last 30 days (a fifth of them repeat one call
2 to 6 times), and 2,000 labels on those loops (every tenth a false alarm). Then it runs one
back-test job of a draft (warn at 2 calls, stop at 4) over the last 30 days in this process,
the same `run_job` the worker runs: both policies re-analyzed per run, steps read in chunks,
progress written every second; then a draft of one tool row (only the runs that call that
tool are analyzed twice). The baseline is the old inline preview's loop (one query per
run, one analysis per run, what the Tuning page did for its last 200 runs) over the first
`--baseline` runs, extrapolated to the same number of runs. Prints runs/s, steps/s and seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pages import TOOLS  # noqa: E402
from harness import setup_django  # noqa: E402

DRAFT = {"defaults": {"warn": 2, "stop": 4}, "tools": {}}
TOOL_DRAFT = {"defaults": {}, "tools": {"web_search": {"warn": 2}}}
LABELS = 2_000


def make_runs(project_id: int, count: int, steps: int) -> None:
    """Insert `count` runs with their steps and some labels, with COPY (one transaction)."""
    from django.db import connection, transaction

    import detection
    from runs.models import Label, Run
    from runs.services import storage

    rng = random.Random(11)
    now = datetime.now(UTC)
    policy = detection.Policy()
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM runs_run")
        first_id = cursor.fetchone()[0] + 1
    run_columns, run_defaults = with_defaults(
        Run, ["id", "project_id", "external_id", "name", "format", "step_count",
              "tool_call_count", "verdict", "created_at", "analyzed_at"],
    )  # fmt: skip
    loops: list[tuple[int, str, int, int]] = []

    def run_rows():
        for i in range(count):
            created = now - timedelta(seconds=rng.randint(60, 29 * 86400))
            yield (first_id + i, project_id, f"bt-{i}", f"backtest-run-{i:06d}", "native",
                   steps, steps - 1, "ok", created, created, *run_defaults)  # fmt: skip

    def step_rows():
        for i in range(count):
            run_id = first_id + i
            looping = rng.random() < 0.2
            repeat = rng.randint(2, 6) if looping else 0
            tool = rng.choice(TOOLS)
            yield storage.step_values(
                run_id, detection.Step(seq=0, kind="user", text="do the task"), policy
            )[0]
            for seq in range(1, steps):
                if seq <= repeat:
                    step = detection.Step(seq=seq, kind="tool_call", tool=tool,
                                          args={"q": "same"}, result={"items": []})  # fmt: skip
                else:
                    other = rng.choice(TOOLS)
                    step = detection.Step(seq=seq, kind="tool_call", tool=other,
                                          args={"n": seq, "r": rng.random()}, result=f"ok {seq}")  # fmt: skip
                yield storage.step_values(run_id, step, policy)[0]
            if looping:
                loops.append((run_id, tool, 1, repeat))

    with transaction.atomic():
        storage.copy_rows("runs_run", run_columns, run_rows())
        storage.copy_rows("runs_step", storage.STEP_COLUMNS, step_rows())
        label_columns, label_defaults = with_defaults(
            Label, ["project_id", "run_id", "detector", "tool", "signature", "fingerprint",
                    "severity", "fired_at", "seq_first", "seq_last", "verdict", "reason",
                    "text", "created_at", "policy_version"],
        )  # fmt: skip
        storage.copy_rows(
            "runs_label",
            label_columns,
            (
                (project_id, run_id, "repeat", tool, "", "", "warn", 3, first, last,
                 "false" if n % 10 == 0 else "real", "polling" if n % 10 == 0 else "", "", now, 0,
                 *label_defaults)
                for n, (run_id, tool, first, last) in enumerate(loops[:LABELS])
            ),
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(  # as ingest fills it: the run's distinct tool names
                "UPDATE runs_run r SET tools = ARRAY(SELECT DISTINCT tool FROM runs_step s "
                "WHERE s.run_id = r.id AND tool <> '' ORDER BY tool) WHERE project_id = %s",
                [project_id],
            )
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence('runs_run', 'id'), (SELECT MAX(id) FROM runs_run))"
            )
            cursor.execute("ANALYZE runs_run")
            cursor.execute("ANALYZE runs_step")


def with_defaults(model, columns: list[str]) -> tuple[list[str], tuple]:
    """Return the columns with the model's other NOT NULL ones, and those ones' defaults."""
    import json

    extra, values = [], []
    for f in model._meta.concrete_fields:
        if f.column in columns or f.null or f.primary_key:
            continue
        value = f.get_default()
        if isinstance(value, list):
            value = "{" + ",".join(map(str, value)) + "}"
        elif isinstance(value, dict):
            value = json.dumps(value)
        extra.append(f.column)
        values.append(value)
    return columns + extra, tuple(values)


def old_preview(project, draft: dict, limit: int) -> tuple[int, int, float]:
    """The old inline preview's loop: per run, one query for its steps and one analysis."""
    import detection
    from runs.models import Run
    from runs.services import storage

    policy = detection.Policy.from_dict(draft)
    runs = Run.objects.filter(project=project).only("id", "verdict", "step_count")
    began = time.perf_counter()
    examined = steps = 0
    for run in runs.order_by("-created_at", "-id")[:limit]:
        detection.analyze(storage.iter_steps(run.pk), policy)
        examined += 1
        steps += run.step_count
    return examined, steps, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description="Time a back-test over many stored runs.")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=12, help="steps per run")
    parser.add_argument("--baseline", type=int, default=2_000, help="runs the old loop times")
    parser.add_argument("--fresh", action="store_true", help="drop the bench project first")
    args = parser.parse_args()

    setup_django()
    from django.utils import timezone

    import detection
    from runs.models import Project, Run
    from runs.services import backtest

    if args.fresh:
        Project.objects.filter(slug="backtest-bench").delete()
    project, _ = Project.objects.get_or_create(
        slug="backtest-bench", defaults={"name": "backtest bench"}
    )
    have = Run.objects.filter(project=project).count()
    if have != args.runs:
        Project.objects.filter(pk=project.pk).delete()
        project = Project.objects.create(slug="backtest-bench", name="backtest bench")
        began = time.perf_counter()
        make_runs(project.pk, args.runs, args.steps)
        print(
            f"inserted {args.runs} runs of {args.steps} steps in {time.perf_counter() - began:.1f} s"
        )

    now = timezone.now()
    job = backtest.start(project, None, DRAFT, now - timedelta(days=30), now)
    began = time.perf_counter()
    job = backtest.run_job(job.pk)
    seconds = time.perf_counter() - began
    # A draft of one tool row: the runs without that tool are analyzed once.
    one_row = backtest.start(project, None, TOOL_DRAFT, now - timedelta(days=30), now)
    began = time.perf_counter()
    one_row = backtest.run_job(one_row.pk)
    row_seconds = time.perf_counter() - began
    tally = backtest.Tally.load(job.results)
    steps = job.total * args.steps

    examined, old_steps, old_seconds = old_preview(project, DRAFT, args.baseline)
    old_rate = examined / old_seconds
    current, draft = tally.precision_recall("current"), tally.precision_recall("draft")
    print(f"engine: {'compiled' if detection.COMPILED else 'plain Python'}; job {job.status}")
    print(f"{'':44} {'runs':>8} {'runs/s':>9} {'steps/s':>10} {'seconds':>9}")
    print(f"{'back-test job (2 analyses per run)':44} {job.total:>8} {job.total / seconds:>9,.0f} "
          f"{2 * steps / seconds:>10,.0f} {seconds:>9.1f}")  # fmt: skip
    print(f"{'back-test job, one tool row (web_search)':44} {one_row.total:>8} "
          f"{one_row.total / row_seconds:>9,.0f} {'':>10} {row_seconds:>9.1f}")  # fmt: skip
    print(f"{'old inline preview (1 analysis per run)':44} {examined:>8} {old_rate:>9,.0f} "
          f"{old_steps / old_seconds:>10,.0f} {old_seconds:>9.1f}")  # fmt: skip
    print(f"{'  same loop, extrapolated to the job':44} {job.total:>8} {old_rate:>9,.0f} "
          f"{old_steps / old_seconds:>10,.0f} {job.total / old_rate:>9.1f}")  # fmt: skip
    print(f"{'  ... and with 2 analyses per run':44} {job.total:>8} {old_rate / 2:>9,.0f} "
          f"{old_steps / old_seconds:>10,.0f} {2 * job.total / old_rate:>9.1f}")  # fmt: skip
    print(f"changes: {tally.counts}; labels {tally.labels}; "
          f"precision/recall current {current.precision:.2f}/{current.recall:.2f}, "
          f"draft {draft.precision:.2f}/{draft.recall:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
