"""GET /metrics: the Prometheus exposition, parsed with the official client's parser, after
ingesting real traces; who may scrape; what a key-scoped scrape shows."""

from __future__ import annotations

import os
from datetime import timedelta

import psycopg
import pytest
import redis
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from runs.models import ApiKey, Channel, Delivery, Finding, Run, Trace
from runs.services import analysis, ingest, metrics
from tests.helpers import call, healthy_trace, looping_trace, message, native_jsonl

pytestmark = pytest.mark.django_db

TOKEN = "operator-metrics-token-0123456789"


@pytest.fixture(autouse=True)
def operator_token(settings):
    settings.LOOPBOARD_METRICS_TOKEN = TOKEN


def costly_loop(times: int) -> bytes:
    """A loop whose calls carry tokens and cost, so that it has waste in both."""
    return native_jsonl(
        message("user", "find it"),
        *[
            call(
                "web_search",
                {"q": "same"},
                {"results": []},
                tokens_in=900,
                tokens_out=100,
                cost=0.02,
            )
            for _ in range(times)
        ],
    )


def scrape(client, token: str) -> dict[tuple[str, frozenset], float]:
    """GET /metrics with a bearer token; return {(sample name, labels): value}."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_metrics_refuse_a_request_without_a_token_or_key(client, settings):
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"] == "Bearer"
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    settings.LOOPBOARD_METRICS_TOKEN = ""  # unset: never open, not even to an empty bearer
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 401
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


def test_a_revoked_key_may_not_scrape(client, project):
    row, plain = ApiKey.issue(project, "prometheus", scope=ApiKey.Scope.READ)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code == 200
    ApiKey.objects.filter(pk=row.pk).update(revoked_at=row.created_at)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code == 403


def test_metrics_count_runs_findings_and_waste_of_ingested_traces(client, project, key, process):
    process(project, looping_trace(6), name="loop.jsonl")
    process(project, costly_loop(9), name="loop2.jsonl")
    process(project, healthy_trace(), name="ok.jsonl")
    runs = Run.objects.filter(project=project)
    assert runs.count() == 3 and runs.filter(verdict__in=["warn", "stop"]).count() == 2

    samples = scrape(client, key)
    assert value(samples, "loopboard_runs_ingested_total", project="agents", format="native") == 3
    for verdict in ("pending", "ok", "warn", "stop"):
        assert value(samples, "loopboard_runs", project="agents", verdict=verdict) == (
            runs.filter(verdict=verdict).count()
        )
    assert value(samples, "loopboard_runs", project="agents", verdict="ok") == 1
    for detector in {d for run in runs for d in run.detectors}:
        assert value(samples, "loopboard_runs_flagged", project="agents", detector=detector) == (
            runs.filter(detectors__contains=[detector]).count()
        )
    findings = Finding.objects.filter(run__project=project)
    assert findings.exists()
    for detector, severity in set(findings.values_list("detector", "severity")):
        assert (
            value(
                samples,
                "loopboard_findings",
                project="agents",
                detector=detector,
                severity=severity,
            )
            == findings.filter(detector=detector, severity=severity).count()
        )
    tokens = sum(run.waste_tokens or 0 for run in runs)
    assert value(samples, "loopboard_waste_tokens", project="agents") == tokens > 0
    cost = sum(run.waste_cost or 0 for run in runs)
    assert cost > 0
    assert value(samples, "loopboard_waste_cost_dollars", project="agents") == pytest.approx(cost)
    assert value(samples, "loopboard_live_runs", project="agents") == 0
    for name in ("loopboard_ingest_latency_seconds", "loopboard_analysis_latency_seconds"):
        assert value(samples, f"{name}_count", project="agents") == 3
        assert value(samples, f"{name}_bucket", project="agents", le="+Inf") == 3


def test_re_analysis_and_deletion_keep_the_figures_true(client, project, key, process):
    trace = process(project, costly_loop(6))
    run = trace.runs.get()
    before = scrape(client, key)
    assert value(before, "loopboard_waste_tokens", project="agents") == run.waste_tokens > 0
    for _ in range(2):
        analysis.analyze_run(run.pk)
    after = scrape(client, key)
    assert after == before  # findings rewritten, not doubled; latency observed once

    run.delete()
    gone = scrape(client, key)
    assert value(gone, "loopboard_runs", project="agents", verdict=run.verdict) == 0
    assert not [k for k in gone if k[0] == "loopboard_findings" and gone[k] != 0]
    assert value(gone, "loopboard_waste_tokens", project="agents") == 0
    # A counter never goes down: the run was ingested all the same.
    assert value(gone, "loopboard_runs_ingested_total", project="agents", format="native") == 1


def test_latency_histograms_put_each_run_in_its_bucket(client, project, key):
    trace, _ = ingest.store_trace(project, looping_trace(6), name="slow.jsonl")
    # Received 3 s before the worker stores its runs.
    Trace.objects.filter(pk=trace.pk).update(created_at=trace.created_at - timedelta(seconds=3))
    ingest.ingest_trace(trace.pk)
    run = trace.runs.get()
    # Analyzed 40 s after it was stored (a queue backlog).
    Run.objects.filter(pk=run.pk).update(created_at=run.created_at - timedelta(seconds=40))
    analysis.analyze_run(run.pk)

    samples = scrape(client, key)
    ingest_bucket = "loopboard_ingest_latency_seconds_bucket"
    assert value(samples, ingest_bucket, project="agents", le="2.5") == 0
    assert value(samples, ingest_bucket, project="agents", le="5.0") == 1
    assert value(samples, "loopboard_ingest_latency_seconds_sum", project="agents") >= 3
    analysis_bucket = "loopboard_analysis_latency_seconds_bucket"
    assert value(samples, analysis_bucket, project="agents", le="30.0") == 0
    assert value(samples, analysis_bucket, project="agents", le="60.0") == 1
    assert value(samples, analysis_bucket, project="agents", le="+Inf") == 1


def test_the_triggers_and_the_collector_share_the_bucket_bounds(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT runs_metric_buckets()")
        assert tuple(cursor.fetchone()[0]) == metrics.LATENCY_BUCKETS


def test_a_key_scoped_scrape_shows_only_its_project(
    client, project, key, other_project, other_key, process
):
    process(project, looping_trace(6), name="mine.jsonl")
    process(other_project, looping_trace(7, tool="secret_tool"), name="theirs.jsonl")
    process(other_project, healthy_trace(), name="theirs-ok.jsonl")

    mine = scrape(client, key)
    # Every sample is labelled with alice's project; the queue depth (global) is left out.
    assert {dict(labels).get("project") for _, labels in mine} == {"agents"}
    assert not [name for name, _ in mine if "secret" in name]
    assert value(mine, "loopboard_runs_ingested_total", project="agents", format="native") == 1
    theirs = scrape(client, other_key)
    assert value(theirs, "loopboard_runs_ingested_total", project="secret", format="native") == 2

    everything = scrape(client, TOKEN)
    for slug, count in (("agents", 1), ("secret", 2)):
        assert (
            value(everything, "loopboard_runs_ingested_total", project=slug, format="native")
            == count
        )


def test_alert_deliveries_are_counted_by_status(client, project, key, other_project):
    from runs.models import Alert

    channel = Channel.objects.create(project=project, name="hook", kind=Channel.Kind.WEBHOOK)
    alert = Alert.objects.create(rule=None, key="test:1", payload={})
    for attempt, status in enumerate(["retrying", "retrying", "sent"], start=1):
        Delivery.objects.create(
            alert=alert, channel=channel, attempt=attempt, status=status, payload_sha256="0" * 64
        )
    theirs = Channel.objects.create(project=other_project, name="x", kind=Channel.Kind.WEBHOOK)
    Delivery.objects.create(
        alert=alert, channel=theirs, attempt=1, status="failed", payload_sha256="0" * 64
    )
    samples = scrape(client, key)
    counter = "loopboard_alert_deliveries_total"
    assert value(samples, counter, project="agents", status="retrying") == 2
    assert value(samples, counter, project="agents", status="sent") == 1
    assert value(samples, counter, project="agents", status="failed") is None


def test_compaction_folds_the_rows_without_changing_a_figure(client, project, key, process):
    process(project, looping_trace(6))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_metric_delta WHERE project_id = %s", [project.pk])
        assert cursor.fetchone()[0] > 0
        figures = [f.values for f in metrics.read(project)]
        assert metrics.compact() is True
        cursor.execute("SELECT count(*) FROM runs_metric_delta WHERE project_id = %s", [project.pk])
        assert cursor.fetchone()[0] == 0
        assert [f.values for f in metrics.read(project)] == figures


def test_compaction_steps_aside_while_another_process_compacts(db, settings):
    db_settings = connection.settings_dict
    other = psycopg.connect(
        dbname=db_settings["NAME"], user=db_settings["USER"], host=db_settings["HOST"],
        port=db_settings["PORT"] or 5432, autocommit=True,
    )  # fmt: skip
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [metrics.COMPACT_LOCK])
        assert metrics.compact() is False
        other.execute("SELECT pg_advisory_unlock(%s)", [metrics.COMPACT_LOCK])
        assert metrics.compact() is True
    finally:
        other.close()


def test_the_operator_scrape_shows_the_filesystem_queue_depth(client, settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    names = ("1_a.interactive.msg", "2_b.celery.msg", "3_c.bulk.msg", "4_d.other.msg",
             "5_e.delivery.msg", "6_f.delivery.msg")  # fmt: skip
    for name in names:
        (tmp_path / name).write_bytes(b"{}")
    samples = scrape(client, TOKEN)
    # what still waits in the old `celery` queue counts as interactive: that pool drains it
    assert value(samples, "loopboard_queue_depth", queue="interactive") == 2
    assert value(samples, "loopboard_queue_depth", queue="bulk") == 1
    assert value(samples, "loopboard_queue_depth", queue="delivery") == 2


def test_the_operator_scrape_shows_the_redis_queue_depth(client, settings):
    configured = os.environ.get("CELERY_BROKER_URL", "")
    url = configured if configured.startswith("redis://") else "redis://127.0.0.1:6379/14"
    settings.CELERY_BROKER_URL = url
    broker = redis.Redis.from_url(url)
    # kombu names every list with the broker's key prefix (one per pytest-xdist worker)
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    names = ("interactive", "celery", "bulk", "delivery", "interactive\x06\x166")
    lists = [prefix + name for name in names]
    broker.delete(*lists)
    try:
        broker.rpush(prefix + "interactive", b"task-1", b"task-2")
        broker.rpush(prefix + "interactive\x06\x166", b"task-3")  # a priority-6 message
        broker.rpush(prefix + "celery", b"task-4")  # left in the old queue
        broker.rpush(prefix + "delivery", b"task-5")
        samples = scrape(client, TOKEN)
        assert value(samples, "loopboard_queue_depth", queue="interactive") == 4
        assert value(samples, "loopboard_queue_depth", queue="bulk") == 0
        assert value(samples, "loopboard_queue_depth", queue="delivery") == 1
    finally:
        broker.delete(*lists)


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_runs_stored_before_it(client, project, key, process):
    import importlib

    # The metric migrations' own SQL, undone and done again around rows stored meanwhile
    # (migrating the whole app back would also drop the columns the code writes now).
    sql = [importlib.import_module(f"runs.migrations.{name}")
           for name in ("0019_metrics", "0022_stopped_call_metric", "0030_overview_totals")]  # fmt: skip
    process(project, looping_trace(6), name="before.jsonl")
    with connection.cursor() as cursor:
        for migration in reversed(sql):
            cursor.execute(migration.REVERSE_SQL)
    try:
        # Stored while no trigger counted anything.
        process(project, costly_loop(9), name="meanwhile.jsonl")
        process(project, healthy_trace(), name="meanwhile-ok.jsonl")
    finally:
        with connection.cursor() as cursor:
            for migration in sql:
                cursor.execute(migration.SQL)

    samples = scrape(client, key)
    runs = Run.objects.filter(project=project)
    assert value(samples, "loopboard_runs_ingested_total", project="agents", format="native") == 3
    summed = metrics.summed([project.pk])  # the Overview's all-time totals (0030)
    assert summed["steps"][()] == sum(run.step_count for run in runs)
    assert summed["waste_steps"][()] == sum(run.waste_steps for run in runs) > 0
    for verdict in ("ok", "warn", "stop"):
        assert value(samples, "loopboard_runs", project="agents", verdict=verdict) == (
            runs.filter(verdict=verdict).count()
        )
    findings = Finding.objects.filter(run__project=project)
    for detector, severity in set(findings.values_list("detector", "severity")):
        assert (
            value(
                samples,
                "loopboard_findings",
                project="agents",
                detector=detector,
                severity=severity,
            )
            == findings.filter(detector=detector, severity=severity).count()
        )
    tokens = sum(run.waste_tokens or 0 for run in runs)
    assert value(samples, "loopboard_waste_tokens", project="agents") == tokens > 0
    # The histograms count what happens from the migration on.
    assert value(samples, "loopboard_ingest_latency_seconds_count", project="agents") == 0


def test_live_runs_open_are_counted_until_they_end(client, project, key):
    from runs.services import live

    search = {"tool": "web_search", "args": {"q": "same"}, "result": {"results": []}}
    live.append_steps(project, "session-1", [search])
    live.append_steps(project, "session-2", [search])
    live.append_steps(project, "session-2", [search, search])  # appends change nothing here
    assert value(scrape(client, key), "loopboard_live_runs", project="agents") == 2
    live.end_run(project, "session-1")
    samples = scrape(client, key)
    assert value(samples, "loopboard_live_runs", project="agents") == 1
    assert value(samples, "loopboard_runs_ingested_total", project="agents", format="live") == 2


def test_a_deleted_projects_figures_are_dropped(project, other_project, process):
    process(other_project, looping_trace(6))
    metrics.compact()
    gone = other_project.pk
    other_project.delete()
    metrics.compact()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM runs_metric_total WHERE project_id = %s)"
            " + (SELECT count(*) FROM runs_metric_delta WHERE project_id = %s)",
            [gone, gone],
        )
        assert cursor.fetchone()[0] == 0
    assert [f.slug for f in metrics.read()] == ["agents"]


@pytest.mark.django_db(transaction=True)
def test_the_beats_fold_reclaims_the_folded_rows_space(client, project, key, process):
    from runs import tasks

    process(project, looping_trace(6))
    before = scrape(client, key)

    def delta_bytes() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_relation_size('runs_metric_delta')")
            return cursor.fetchone()[0]

    metrics.compact()
    assert delta_bytes() > 0  # deleted rows still take their pages until a vacuum
    process(project, healthy_trace())
    tasks.compact_metrics()
    assert delta_bytes() == 0
    after = scrape(client, key)
    assert value(after, "loopboard_runs_ingested_total", project="agents", format="native") == 2
    assert value(after, "loopboard_runs", project="agents", verdict="ok") == (
        value(before, "loopboard_runs", project="agents", verdict="ok") + 1
    )


def test_calls_the_live_guard_stopped_are_counted(client, project, key):
    from runs.services import live

    failing = {"tool": "Bash", "args": {"command": "make"}, "result": "exit 2", "status": "error"}
    for i in range(3):
        live.append_steps(project, "guarded", [{**failing, "id": f"f{i}"}])
    counter = "loopboard_guard_stopped_calls_total"
    assert value(scrape(client, key), counter, project="agents") == 0
    for _ in range(2):  # asked twice at one point: two calls not made
        assert live.check_live(project, "guarded", "Bash", {"command": "make"}).verdict == "stop"
    live.append_steps(project, "guarded", [{**failing, "id": "f3"}])
    live.check_live(project, "guarded", "Bash", {"command": "make"})  # at the next point
    assert value(scrape(client, key), counter, project="agents") == 3
    Run.objects.filter(external_id="guarded").delete()  # a counter: it never goes down
    assert value(scrape(client, key), counter, project="agents") == 3
