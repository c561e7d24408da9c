"""What stays true after a retention purge (issue 28 part 1): labeled runs keep their steps for
back-tests until the run itself expires, and /metrics, the loop issues' days and the
Overview's totals describe the runs still stored (counters never go down)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum
from prometheus_client.parser import text_string_to_metric_families

from runs.models import Finding, IssueDay, IssueRun, Label, LoopIssue, Run, Step
from runs.services import labels, metrics, retention
from runs.web import overview
from tests.helpers import looping_trace
from tests.runs.services.test_retention import keep, stored_run
from tests.runs.web.test_overview_totals import assert_same

pytestmark = pytest.mark.django_db


def scrape(client, key: str) -> dict[tuple[str, frozenset], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200, response.content
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"project": "agents", **labels}.items())))


def test_a_labeled_run_keeps_its_steps_until_the_run_itself_expires(project, user):
    labeled, other = stored_run(project), stored_run(project, looping_trace(9))
    finding = labeled.findings.exclude(severity="info").first()
    labels.label_finding(user, finding, "real")
    keep(project, steps=90)
    assert retention.apply()["steps"] == 1
    assert Step.objects.filter(run=labeled).exists()
    assert Run.objects.get(pk=labeled.pk).steps_expired_at is None
    assert not Step.objects.filter(run=other).exists()
    keep(project, steps=90, runs=365)
    assert retention.apply()["runs"] == 2
    assert not Run.objects.filter(pk=labeled.pk).exists()
    assert not Label.objects.filter(project=project).exists()  # its labels went with it


def test_after_the_purge_the_figures_describe_the_runs_kept(project, client, key):
    gone = [stored_run(project), stored_run(project, looping_trace(7))]
    steps_gone = stored_run(project, looping_trace(9), age=timedelta(days=200))
    kept = stored_run(project, looping_trace(11), age=timedelta(days=2))
    ingested = value(scrape(client, key), "loopboard_runs_ingested_total", format="native")
    assert ingested == 4
    keep(project, steps=90, runs=365)
    assert retention.apply() == {"raw": 0, "steps": 3, "runs": 2}
    assert not Run.objects.filter(pk__in=[r.pk for r in gone]).exists()
    assert Run.objects.get(pk=steps_gone.pk).steps_expired_at is not None
    for compact in (False, True):
        if compact:
            metrics.compact()
        samples = scrape(client, key)

        # The gauges follow what is stored; the counter keeps every run ever ingested.
        runs = Run.objects.filter(project=project)
        for verdict in ("ok", "warn", "stop"):
            assert (value(samples, "loopboard_runs", verdict=verdict) or 0) == runs.filter(
                verdict=verdict
            ).count()
        findings = Finding.objects.filter(run__project=project)
        for detector, severity in set(findings.values_list("detector", "severity")):
            assert value(samples, "loopboard_findings", detector=detector, severity=severity) == (
                findings.filter(detector=detector, severity=severity).count()
            )
        tokens = sum(run.waste_tokens or 0 for run in runs)
        assert (value(samples, "loopboard_waste_tokens") or 0) == tokens
        assert value(samples, "loopboard_runs_ingested_total", format="native") == ingested
        assert_same([project.pk])
        assert overview.all_time_totals([project.pk])["runs"] == 2
    # Loop issues: their counters and days count the two runs kept, steps expired or not.
    for issue in LoopIssue.objects.filter(project=project):
        shares = IssueRun.objects.filter(issue=issue)
        assert set(shares.values_list("run_id", flat=True)) <= {steps_gone.pk, kept.pk}
        assert issue.run_count == shares.count()
        days = IssueDay.objects.filter(issue=issue).aggregate(runs=Sum("runs"), f=Sum("findings"))
        assert (days["runs"] or 0) == shares.count()
        assert (days["f"] or 0) == (shares.aggregate(f=Sum("findings"))["f"] or 0)
    assert LoopIssue.objects.filter(project=project).aggregate(n=Sum("run_count"))["n"] >= 2
