"""The Overview's all-time totals come from the metric triggers' rows (migration 0030), not
from a scan of every run, and stay equal to that scan through everything that changes a run:
imports, analyses, edits, live runs (counted once they end, open ones added), deletions and
retention."""

from __future__ import annotations

import importlib

from django.db import connection
from django.db.models import Count, Q, Sum
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import Run
from runs.services import deletion, live, metrics
from runs.web import overview
from tests.helpers import healthy_trace, looping_trace

NEW_ROWS = ("steps", "waste_steps", "waste_seconds")


def scanned(project_ids) -> dict:
    """The totals as the Overview counted them before: an aggregate over every run."""
    row = Run.objects.filter(project_id__in=project_ids).aggregate(
        runs=Count("id"),
        flagged=Count("id", filter=Q(verdict__in=["warn", "stop"])),
        steps=Sum("step_count"),
        waste_steps=Sum("waste_steps"),
        waste_tokens=Sum("waste_tokens"),
        waste_cost=Sum("waste_cost"),
        waste_seconds=Sum("waste_seconds"),
    )
    return {
        "runs": row["runs"],
        "flagged": row["flagged"],
        "steps": row["steps"] or 0,
        "waste_steps": row["waste_steps"] or 0,
        "waste_tokens": row["waste_tokens"] or None,
        "waste_cost": row["waste_cost"] or None,
        "waste_seconds": row["waste_seconds"] or None,
    }


def assert_same(project_ids) -> None:
    got, want = overview.all_time_totals(project_ids), scanned(project_ids)
    for name in ("waste_cost", "waste_seconds"):
        assert (got[name] is None) == (want[name] is None), (name, got, want)
        if want[name] is not None:
            assert abs(got[name] - want[name]) < 1e-6, (name, got, want)
    assert {k: v for k, v in got.items() if k not in ("waste_cost", "waste_seconds")} == {
        k: v for k, v in want.items() if k not in ("waste_cost", "waste_seconds")
    }


def test_the_totals_equal_a_scan_of_every_run_through_every_change(project, other_project, process):
    ids = [project.pk]
    assert_same(ids)
    for times in (4, 6, 9):
        process(project, looping_trace(times, tool=f"tool_{times}"))
    process(project, healthy_trace())
    process(other_project, looping_trace(7))
    assert overview.all_time_totals(ids)["waste_steps"] > 0
    assert_same(ids)
    assert_same([project.pk, other_project.pk])
    metrics.compact()
    assert_same(ids)
    # An edit to the counted columns alone (an analysis writes them so).
    run = Run.objects.filter(project=project).order_by("pk").first()
    Run.objects.filter(pk=run.pk).update(waste_seconds=12.5, waste_cost=0.25, step_count=77)
    assert_same(ids)
    # Live runs: their appends are not counted by the triggers until the run ends; the open
    # ones' figures are added by the Overview.
    search = {"tool": "web_search", "args": {"q": "same"}, "result": {"results": []}}
    for _ in range(4):
        live.append_steps(project, "session-1", [search])
    live.append_steps(project, "session-2", [search, search])
    assert Run.objects.filter(project=project, live=True).count() == 2
    assert_same(ids)
    live.end_run(project, "session-1")
    assert_same(ids)
    # Deleting runs, a live one among them.
    deletion.delete_runs(
        Run.objects.filter(pk__in=[run.pk, live.find_run(project, "session-2").pk])
    )
    assert_same(ids)
    metrics.compact()
    assert_same(ids)
    assert_same([other_project.pk])
    assert overview.all_time_totals([]) == scanned([])


def test_the_overview_reads_no_run_but_the_open_live_ones(client_in, project, process):
    """The one query of runs_run the totals send is over the open live runs."""
    process(project, looping_trace(6))
    with CaptureQueriesContext(connection) as queries:
        page = client_in.get(reverse("runs:overview"))
    assert page.status_code == 200
    totals = [q["sql"] for q in queries if 'SUM("runs_run"."step_count")' in q["sql"]]
    assert len(totals) == 1 and '"runs_run"."live"' in totals[0]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + totals[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # An index answers it (at scale, the partial index of the live runs, run_live_quiet; on a
    # table this small the planner may take the project's index and filter live).
    assert "Index" in plan and "Seq Scan" not in plan, plan


def test_the_migration_counts_the_stored_runs_as_the_triggers_do(project, process):
    for times in (4, 8):
        process(project, looping_trace(times))
    process(project, healthy_trace())
    Run.objects.filter(project=project).update(waste_seconds=3.5)
    before = metrics.summed([project.pk])
    assert all(before[name].get((), 0) > 0 for name in NEW_ROWS)
    migration = importlib.import_module("runs.migrations.0030_overview_totals")
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM runs_metric_total WHERE name = ANY(%s); "
            "DELETE FROM runs_metric_delta WHERE name = ANY(%s)",
            [list(NEW_ROWS)] * 2,
        )
        cursor.execute(migration.BACKFILL)
    after = metrics.summed([project.pk])
    assert {n: after[n] for n in NEW_ROWS} == {n: before[n] for n in NEW_ROWS}
    assert migration.REVERSE_FUNCTION != migration.FUNCTION
    assert "'steps'" not in migration.REVERSE_FUNCTION
