"""Time what alerts add: to a live append that fires, to each alert, and to the every-minute
evaluation of rate rules, each beside a baseline without alerts.

    .venv/bin/python bench/bench_alerts.py [--appends 200] [--fires 500] [--runs 100000]

Uses the bench database of bench_pages.py (the configured one's name + "_bench"), migrates it,
and makes projects of its own. Needs the broker (CELERY_BROKER_URL, or the embedded one): the
alert tasks an append or a fire queues are really sent; no worker takes them, and the queues
are purged at the end.

- live append: a new live run per append, five identical calls in one append, so every
  append fires a stop finding. Baseline: a project with no rule; beside it, taking turns, a
  project with one enabled run rule (one more query, and the alert task sent when the append
  commits). p50 and p99 in ms.
- fire: `alerts.fire` with distinct keys on a rule with one channel (row lock, hourly count,
  INSERT ... ON CONFLICT, delivery queued), beside `Alert.objects.create` of the same payload.
- rate rules: `evaluate_rate_rules` with one rule per metric over a window of `--runs` runs
  (a tenth of them flagged, with one stop finding each), beside a bare COUNT of the window.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import bench_database_url  # noqa: E402


def setup_django() -> None:
    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.setdefault("SECRET_KEY", "bench-alerts")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", "--noinput", verbosity=0)


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms"


def new_project(name: str):  # type: ignore[no-untyped-def]
    from runs.models import Project

    return Project.objects.create(name=name, slug=f"{name}-{time.time_ns()}")


def time_append(project, external_id: str) -> float:  # type: ignore[no-untyped-def]
    from runs.services import live

    calls = [{"tool": "web_search", "args": {"q": "same"}, "result": {"results": []}}] * 5
    start = time.perf_counter()
    appended = live.append_steps(project, external_id, calls)
    elapsed = time.perf_counter() - start
    assert appended.findings, "the append must fire"
    return elapsed


def bench_live(count: int) -> None:
    """Appends to the two projects take turns, so a busy machine slows both alike."""
    from runs.models import AlertRule, Channel

    quiet = new_project("alerts-bench-none")
    ruled = new_project("alerts-bench-rule")
    channel = Channel.objects.create(project=ruled, name="c", kind="webhook", enabled=False)
    rule = AlertRule.objects.create(project=ruled, name="stops", kind="run")
    rule.channels.add(channel)
    without, with_rule = [], []
    for i in range(count):
        without.append(time_append(quiet, f"bench-{i}"))
        with_rule.append(time_append(ruled, f"bench-{i}"))
    print(f"live append that fires ({count} appends each, a new run each, taking turns)")
    print(f"  baseline, no rule   {ms(without)}")
    print(f"  with a run rule     {ms(with_rule)}")


def bench_fire(count: int) -> None:
    from django.db import transaction

    from runs.models import Alert, AlertRule, Channel
    from runs.services import alerts

    project = new_project("alerts-bench-fire")
    channel = Channel.objects.create(project=project, name="c", kind="webhook")
    rule = AlertRule.objects.create(project=project, name="r", kind="run", max_per_hour=0)
    rule.channels.add(channel)
    payload = {"kind": "run", "title": "Run reached stop", "text": "x" * 300}
    plain, fired = [], []
    for i in range(count):
        start = time.perf_counter()
        Alert.objects.create(rule=rule, key=f"plain:{i}", payload=payload)
        plain.append(time.perf_counter() - start)
    for i in range(count):
        start = time.perf_counter()
        with transaction.atomic():  # as its callers do: delivery is queued on commit
            alerts.fire(rule, f"run:{i}", payload)
        fired.append(time.perf_counter() - start)
    again = []
    for i in range(min(count, 100)):
        start = time.perf_counter()
        assert alerts.fire(rule, f"run:{i}", payload) is None
        again.append(time.perf_counter() - start)
    print(f"alert ({count} of them)")
    print(f"  baseline, Alert.objects.create   {ms(plain)}")
    print(f"  alerts.fire, new key             {ms(fired)}")
    print(f"  alerts.fire, key already fired   {ms(again)}")


FILL = """
INSERT INTO runs_run (project_id, external_id, name, format, metadata, step_count,
    tool_call_count, verdict, stall_score, waste_steps, waste_tokens, waste_cost, detectors,
    tools, summary, created_at, analyzed_at, live, next_seq, version, agent, agent_version)
SELECT %(project)s, 'r' || i, 'run ' || i, 'native', '{}', 20, 10,
    CASE WHEN i %% 10 = 0 THEN 'stop' ELSE 'ok' END, 0, CASE WHEN i %% 10 = 0 THEN 8 ELSE 0 END,
    CASE WHEN i %% 10 = 0 THEN 4000 END, CASE WHEN i %% 10 = 0 THEN 0.02 END, '{}', '{}', '{}',
    now() - (i * 50 || ' milliseconds')::interval, now(), false, 0, 0, '', ''
FROM generate_series(1, %(count)s) i
"""
FINDINGS = """
INSERT INTO runs_finding (run_id, detector, severity, tool, signature, seqs, count, threshold,
    fired_at, rule, message, waste_steps, fingerprint)
SELECT id, 'repeat', 'stop', 'web_search', '', '{}', 5, 5, 3, 'defaults', 'same call', 8, ''
FROM runs_run WHERE project_id = %(project)s AND verdict = 'stop'
"""


def bench_rates(count: int, repeat: int = 5) -> None:
    from django.db import connection
    from django.utils import timezone

    from runs.models import AlertRule, Run
    from runs.services import alerts

    project = new_project("alerts-bench-rate")
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"project": project.pk, "count": count})
        cursor.execute(FINDINGS, {"project": project.pk})
        cursor.execute("ANALYZE runs_run; ANALYZE runs_finding")
    window = max(1, int(count * 0.05 / 60) + 1)  # minutes that hold all the runs
    for metric in AlertRule.Metric.values:
        AlertRule.objects.create(
            project=project, name=metric, kind="rate", metric=metric, window_minutes=window,
            warn_threshold=1e12,  # never crossed: this times the measuring, not a fire
        )  # fmt: skip
    now = timezone.now() + timedelta(seconds=1)
    start_at = now - timedelta(minutes=window)
    baseline, evaluation = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        Run.objects.filter(project=project, created_at__gte=start_at, created_at__lt=now).count()
        baseline.append(time.perf_counter() - start)
        start = time.perf_counter()
        alerts.evaluate_rate_rules(now)
        evaluation.append(time.perf_counter() - start)
    # other projects' rules from earlier bench runs are evaluated too: time only ours
    rules = AlertRule.objects.filter(kind="rate", enabled=True).exclude(project=project).count()
    print(f"rate rules over a window of {count:,} runs ({window} min), {repeat} evaluations")
    print(f"  baseline, COUNT of the window           {ms(baseline)}")
    print(f"  evaluate_rate_rules, 4 rules ({rules} other) {ms(evaluation)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--fires", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    setup_django()
    from runs.models import AlertRule

    AlertRule.objects.filter(kind="rate", project__slug__startswith="alerts-bench-").update(
        enabled=False
    )  # earlier bench runs' rate rules stay out of this one's timing
    try:
        bench_live(args.appends)
        bench_fire(args.fires)
        bench_rates(args.runs)
    finally:
        from loopboard.celery import app

        app.control.purge()  # the tasks queued above: no worker is meant to take them


if __name__ == "__main__":
    main()
