"""Time labels at scale: the export, re-analysis deleting labeled findings, and the scoring.

    .venv/bin/python bench/bench_labels.py [--runs 20000] [--labels 100000] [--findings 300000]

Uses bench_pages.py's database (the configured one's name + "_bench", created when missing),
fills a project of its own with COPY, and prints each figure beside its baseline:

- export: `labels.export` rows encoded as `GET /api/labels` sends them, beside PostgreSQL
  reading the same rows as JSON in one query (the floor for any export);
- re-analysis: deleting the findings of 1,000 labeled runs as `analysis.write` does (one
  DELETE; PostgreSQL sets the labels' finding NULL), beside what a Python-level SET_NULL
  foreign key would make Django do (load the findings, UPDATE the labels, DELETE by id);
  and deleting the findings of 1,000 runs nobody labeled, with the foreign key and without it
  (what it cost before labels); each in a transaction that is rolled back;
- scoring: `scoring.score` of `--findings` findings against the labels, beside one pass over
  the same findings building nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import bench_database_url  # noqa: E402

TOOLS = ["web_search", "fetch", "bash", "read_file", "grep", "get_job_status", "sql_query"]
DETECTORS = ["repeat", "oscillation", "result_stall", "near_repeat", "mutating_failure"]
PER_RUN = 5  # findings per run
FK = "label_finding_set_null"  # migration 0014


def timed(work: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Return the median seconds of `repeat` runs of `work`, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def make_runs(project, count: int, prefix: str = "run") -> list:
    """Insert `count` runs with PER_RUN findings each; return the runs."""
    from runs.models import Finding, Run

    rng = random.Random(16)
    made = Run.objects.bulk_create(
        (
            Run(project=project, external_id=f"{prefix}-{i}", name=f"{prefix}-{i}",
                format="native", verdict="stop")
            for i in range(count)
        ),
        batch_size=5000,
    )  # fmt: skip
    Finding.objects.bulk_create(
        (
            Finding(run=run, detector=DETECTORS[k], severity="warn", tool=rng.choice(TOOLS),
                    signature=f"sig{k}", seqs=list(range(10 * k, 10 * k + 5)), count=5,
                    threshold=3, fired_at=10 * k + 2, message="called the same tool again")
            for run in made
            for k in range(PER_RUN)
        ),
        batch_size=5000,
    )  # fmt: skip
    return made


def fill(project, runs: int, labels: int) -> None:
    """Insert `runs` runs with PER_RUN findings each, and `labels` labels on them (by COPY)."""
    from django.db import connection

    from runs.models import Finding, Label

    rng = random.Random(16)
    made = make_runs(project, runs)
    table = Finding._meta.db_table
    with connection.cursor() as cursor:
        run_ids = [run.pk for run in made]
        cursor.execute(
            f"SELECT id, run_id, detector, tool, signature, seqs FROM {table} "
            f"WHERE run_id = ANY(%s) ORDER BY id",
            [run_ids],
        )
        findings = cursor.fetchall()
        columns = ("project_id", "run_id", "finding_id", "detector", "tool", "signature",
                   "fingerprint", "severity", "fired_at", "seq_first", "seq_last", "verdict",
                   "reason", "text", "created_at", "policy_version")  # fmt: skip
        with cursor.copy(f"COPY {Label._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
            for finding_id, run_id, detector, tool, signature, seqs in rng.sample(
                findings, min(labels, len(findings))
            ):
                real = rng.random() < 0.6
                copy.write_row((
                    project.pk, run_id, finding_id, detector, tool, signature, "", "warn",
                    seqs[2], seqs[0], seqs[-1], "real" if real else "false",
                    "" if real else "polling", "", "now", 0,
                ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="Time the label export, deletes and scoring.")
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--labels", type=int, default=100_000)
    parser.add_argument("--findings", type=int, default=300_000, help="for the scoring")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    import detection
    from runs.models import Finding, Label, Project
    from runs.services import labels as labels_service
    from runs.services.scoring import score

    call_command("migrate", verbosity=0)
    project, _ = Project.objects.get_or_create(slug="bench-labels", defaults={"name": "labels"})
    if Label.objects.filter(project=project).count() != min(args.labels, args.runs * PER_RUN):
        project.runs.all().delete()
        began = time.perf_counter()
        fill(project, args.runs, args.labels)
        print(f"filled {args.runs} runs and their labels in {time.perf_counter() - began:.1f} s")
    plain = project.runs.filter(external_id__startswith="plain-")
    if plain.count() != 1000:
        plain.delete()
        make_runs(project, 1000, "plain")
    plain_ids = list(plain.values_list("pk", flat=True))
    count = Label.objects.filter(project=project).count()
    print(f"{count} labels on {project.runs.count()} runs ({PER_RUN} findings each)\n")

    def export() -> int:
        return sum(len(json.dumps(row)) + 1 for row in labels_service.export(project))

    def export_floor() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT row_to_json(l)::text FROM {Label._meta.db_table} l WHERE project_id = %s",
                [project.pk],
            )
            return sum(len(row[0]) + 1 for row in cursor.fetchall())

    seconds, size = timed(export, args.repeat)
    floor, _ = timed(export_floor, args.repeat)
    print(f"export of {count} labels ({size / 1e6:.1f} MB JSONL)")
    print(f"  labels.export          {seconds:8.3f} s  {count / seconds:10,.0f} labels/s")
    print(f"  baseline: one query    {floor:8.3f} s  {count / floor:10,.0f} labels/s\n")

    run_ids = list(
        Label.objects.filter(project=project).values_list("run_id", flat=True).distinct()[:1000]
    )

    class Rollback(Exception):
        pass

    def in_rollback(work: Callable[[], None], prepare: Callable[[], None] | None = None) -> float:
        """Seconds `work` takes in a transaction rolled back after it (`prepare` not timed)."""
        elapsed = 0.0
        try:
            with transaction.atomic():
                if prepare is not None:
                    prepare()
                began = time.perf_counter()
                work()
                elapsed = time.perf_counter() - began
                raise Rollback
        except Rollback:
            return elapsed

    def median_ms(work: Callable[[], None], prepare: Callable[[], None] | None = None) -> float:
        return 1000 * statistics.median(in_rollback(work, prepare) for _ in range(args.repeat))

    def one_delete() -> None:  # what analysis.write does
        Finding.objects.filter(run_id__in=run_ids).delete()

    def python_set_null() -> None:  # what Django does for on_delete=SET_NULL
        doomed = list(Finding.objects.filter(run_id__in=run_ids))
        pks = [f.pk for f in doomed]
        Label.objects.filter(finding_id__in=pks).update(finding=None)
        Finding.objects.filter(pk__in=pks).delete()

    def delete_unlabeled() -> None:
        Finding.objects.filter(run_id__in=plain_ids).delete()

    def drop_foreign_key() -> None:  # before labels: no foreign key into the findings
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {Label._meta.db_table} DROP CONSTRAINT {FK}")

    findings = Finding.objects.filter(run_id__in=run_ids).count()
    print(
        f"re-analysis: delete the findings of 1,000 runs ({findings} labeled or {PER_RUN}000 not)"
    )
    for name, work, prepare in (
        ("all labeled: one DELETE, PostgreSQL sets NULL", one_delete, None),
        ("baseline: all labeled, Python-level SET_NULL", python_set_null, None),
        ("none labeled: one DELETE", delete_unlabeled, None),
        (
            "baseline: none labeled, no foreign key (before labels)",
            delete_unlabeled,
            drop_foreign_key,
        ),
    ):
        print(f"  {name:<56} {median_ms(work, prepare):8.1f} ms")
    print()

    judged = list(
        labels_service.labels_for_runs(project.runs.values_list("pk", flat=True)).values()
    )
    judged = [j for js in judged for j in js]
    rng = random.Random(3)
    keys = [j.run for j in judged] or [0]
    made = []
    for i in range(args.findings):
        first = rng.randrange(0, 50)
        made.append((
            keys[i % len(keys)],
            detection.Finding(DETECTORS[i % 5], "warn", rng.choice(TOOLS), "s",
                              tuple(range(first, first + 5)), 5, 3, first, "m", "r"),
        ))  # fmt: skip
    seconds, result = timed(lambda: score(made, judged), args.repeat)
    baseline, _ = timed(lambda: sum(1 for _, f in made if f.severity in ("warn", "stop")), 3)
    print(f"scoring {len(made):,} findings against {len(judged):,} labels: {result}")
    print(f"  scoring.score          {seconds:8.3f} s  {len(made) / seconds:12,.0f} findings/s")
    print(f"  baseline: one pass     {baseline:8.3f} s  {len(made) / baseline:12,.0f} findings/s")


if __name__ == "__main__":
    main()
