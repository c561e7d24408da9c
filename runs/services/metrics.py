"""The figures `GET /metrics` serves to Prometheus, read from PostgreSQL at scrape time.

Web and worker processes are many, so no figure is counted in a process's memory. Triggers
(migration 0019) add signed rows to `runs_metric_delta` on every write to runs, findings and
deliveries; `compact` folds them into `runs_metric_total`; `read` sums both tables, so a
scrape is exact and costs a couple of small queries whatever the number of runs. The queue
depth comes from the broker (`queue.depths`).

`MetricsCollector(project)` yields the metric families for one project (a key-scoped scrape)
or for all of them (the `LOOPBOARD_METRICS_TOKEN` scrape, which alone shows the queue depth).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import connection, transaction
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..models import Project, Verdict
from . import queue, usage

# The histogram bucket bounds in seconds (+Inf aside); the triggers' `runs_metric_buckets()`.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
COMPACT_LOCK = 0x6C62_6D74  # pg advisory lock id ("lbmt"): one folder at a time

FOLD = """
    WITH moved AS (DELETE FROM runs_metric_delta RETURNING project_id, name, labels, value)
    INSERT INTO runs_metric_total AS t (project_id, name, labels, value)
    SELECT project_id, name, labels, sum(value) FROM moved GROUP BY 1, 2, 3
    ON CONFLICT (project_id, name, labels) DO UPDATE SET value = t.value + EXCLUDED.value
"""
DROP_GONE = """
    DELETE FROM runs_metric_total t
    WHERE NOT EXISTS (SELECT 1 FROM runs_project p WHERE p.id = t.project_id)
"""
READ = """
    SELECT project_id, name, labels, sum(value) FROM (
        SELECT project_id, name, labels, value FROM runs_metric_total {where}
        UNION ALL
        SELECT project_id, name, labels, value FROM runs_metric_delta {where}
    ) m GROUP BY 1, 2, 3
"""

SUMMED = """
    SELECT name, labels, sum(value) FROM (
        SELECT name, labels, value FROM runs_metric_total WHERE project_id = ANY(%s)
        UNION ALL
        SELECT name, labels, value FROM runs_metric_delta WHERE project_id = ANY(%s)
    ) m GROUP BY 1, 2
"""


def compact(*, vacuum: bool = False) -> bool:
    """Fold the delta rows into the totals; return False when another process is at it.

    The DELETE ... RETURNING takes exactly the rows it folds, so rows that writers commit
    meanwhile stay for the next fold, and a row is never counted twice. With vacuum=True
    (the beat, outside any transaction) the folded rows' space is reclaimed at once, so that
    scans of the delta table stay small even where autovacuum is slow or off.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [COMPACT_LOCK])
        if not cursor.fetchone()[0]:
            return False
        cursor.execute(FOLD)
        cursor.execute(DROP_GONE)
    if vacuum and not connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM runs_metric_delta")
    return True


@dataclass
class Figures:
    """One project's figures: values by metric name, then by label tuple."""

    slug: str
    values: dict[str, dict[tuple[str, ...], float]] = field(
        default_factory=lambda: defaultdict(dict)
    )

    def get(self, name: str, *labels: str) -> float:
        return self.values[name].get(labels, 0.0)


def read(project: Project | None = None) -> list[Figures]:
    """Return the figures of one project, or of every project, in slug order."""
    projects = Project.objects.order_by("slug")
    if project is not None:
        projects = projects.filter(pk=project.pk)
    figures = {pk: Figures(slug) for pk, slug in projects.values_list("pk", "slug")}
    where, params = ("WHERE project_id = %s", [project.pk] * 2) if project else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(READ.format(where=where), params)
        for project_id, name, labels, value in cursor.fetchall():
            if project_id in figures:
                figures[project_id].values[name][tuple(labels)] = value
    return list(figures.values())


def summed(project_ids: list[int]) -> dict[str, dict[tuple[str, ...], float]]:
    """Return these projects' figures added together: values by metric name, then by label
    tuple (the Overview's all-time totals; a few index reads, not a scan of every run)."""
    values: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    if not project_ids:
        return values
    with connection.cursor() as cursor:
        cursor.execute(SUMMED, [list(project_ids)] * 2)
        for name, labels, value in cursor.fetchall():
            values[name][tuple(labels)] = value
    return values


def histogram(figures: Figures, name: str) -> tuple[list[tuple[str, float]], float]:
    """Return the cumulative buckets (with +Inf) and the sum of a latency histogram."""
    counts = figures.values[f"{name}_bucket"]
    buckets, total = [], 0.0
    for bound in LATENCY_BUCKETS:
        total += counts.get((_bound(bound),), 0.0)
        buckets.append((str(bound), total))
    buckets.append(("+Inf", total + counts.get(("+Inf",), 0.0)))
    return buckets, figures.get(f"{name}_sum")


def _bound(bound: float) -> str:
    """A bound as PostgreSQL prints a double precision: 1 not 1.0, 0.05 as 0.05."""
    return f"{bound:g}"


class MetricsCollector(Collector):
    """The loopboard metric families of one project, or of all (with the queue depth)."""

    def __init__(self, project: Project | None = None) -> None:
        self.project = project

    def collect(self) -> Iterator[Metric]:
        compact()
        projects = read(self.project)
        yield from _run_families(projects)
        yield from _latency_families(projects)
        yield from _storage_families(self.project)
        if self.project is None:
            depths = queue.depths()
            if depths is not None:
                gauge = GaugeMetricFamily(
                    "loopboard_queue_depth",
                    "Tasks waiting in the broker's queue.",
                    labels=["queue"],
                )
                for name, depth in depths.items():
                    gauge.add_metric([name], depth)
                yield gauge


def _run_families(projects: list[Figures]) -> Iterator[Metric]:
    ingested = CounterMetricFamily(
        "loopboard_runs_ingested", "Runs stored, by trace format.", labels=["project", "format"]
    )
    runs = GaugeMetricFamily(
        "loopboard_runs", "Runs stored now, by verdict.", labels=["project", "verdict"]
    )
    flagged = GaugeMetricFamily(
        "loopboard_runs_flagged",
        "Runs flagged now (warn or stop), by detector that fired in them.",
        labels=["project", "detector"],
    )
    findings = GaugeMetricFamily(
        "loopboard_findings",
        "Findings stored now, by detector and severity.",
        labels=["project", "detector", "severity"],
    )
    tokens = GaugeMetricFamily(
        "loopboard_waste_tokens",
        "Tokens the loops spent from their warnings on (their own iterations), summed over the "
        "runs stored now.",
        labels=["project"],
    )
    cost = GaugeMetricFamily(
        "loopboard_waste_cost_dollars",
        "Cost of the loops from their warnings on (as the traces report it), summed over the "
        "runs stored now.",
        labels=["project"],
    )
    live = GaugeMetricFamily(
        "loopboard_live_runs", "Live runs open (taking appends).", labels=["project"]
    )
    deliveries = CounterMetricFamily(
        "loopboard_alert_deliveries",
        "Alert delivery attempts, by outcome.",
        labels=["project", "status"],
    )
    stopped = CounterMetricFamily(
        "loopboard_guard_stopped_calls",
        "Calls the live guard answered stop for (the agent was told not to make them).",
        labels=["project"],
    )
    for p in projects:
        for (format_,), value in sorted(p.values["runs_ingested"].items()):
            ingested.add_metric([p.slug, format_], value)
        for verdict in Verdict.values:
            runs.add_metric([p.slug, verdict], p.get("runs", verdict))
        for (detector,), value in sorted(p.values["runs_flagged"].items()):
            flagged.add_metric([p.slug, detector], value)
        for (detector, severity), value in sorted(p.values["findings"].items()):
            findings.add_metric([p.slug, detector, severity], value)
        tokens.add_metric([p.slug], p.get("waste_tokens"))
        cost.add_metric([p.slug], round(p.get("waste_cost"), 6))
        live.add_metric([p.slug], p.get("runs_live"))
        for (status,), value in sorted(p.values["deliveries"].items()):
            deliveries.add_metric([p.slug, status], value)
        stopped.add_metric([p.slug], p.get("stopped_calls"))
    yield from (ingested, runs, flagged, findings, tokens, cost, live, deliveries, stopped)


def _latency_families(projects: list[Figures]) -> Iterator[Metric]:
    ingest = HistogramMetricFamily(
        "loopboard_ingest_latency_seconds",
        "From a trace received to its runs stored.",
        labels=["project"],
    )
    analysis = HistogramMetricFamily(
        "loopboard_analysis_latency_seconds",
        "From a run stored to its first analysis written.",
        labels=["project"],
    )
    for p in projects:
        ingest.add_metric([p.slug], *histogram(p, "ingest_latency"))
        analysis.add_metric([p.slug], *histogram(p, "analysis_latency"))
    yield from (ingest, analysis)


def _storage_families(project: Project | None) -> Iterator[Metric]:
    """The bytes each project stores by kind and their growth per day, as the hourly
    retention pass last measured them (`usage`)."""
    stored = GaugeMetricFamily(
        "loopboard_stored_bytes",
        "Bytes stored (raw compressed; steps and findings: their share of the tables).",
        labels=["project", "kind"],
    )
    growth = GaugeMetricFamily(
        "loopboard_stored_bytes_growth_per_day",
        "Growth of the stored bytes per day, over up to the last 7 days.",
        labels=["project", "kind"],
    )
    projects = Project.objects.order_by("slug")
    if project is not None:
        projects = projects.filter(pk=project.pk)
    for p in projects:
        figures = usage.figures(p)
        if figures.latest is None:
            continue
        for kind in (*usage.KINDS, "total_bytes"):
            name = kind.removesuffix("_bytes")
            stored.add_metric([p.slug, name], getattr(figures.latest, kind))
            if figures.growth[kind] is not None:
                growth.add_metric([p.slug, name], figures.growth[kind])
    yield from (stored, growth)


def exposition(project: Project | None = None) -> bytes:
    """Return the Prometheus text exposition of one project's metrics, or of all."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(project))
    return generate_latest(registry)
