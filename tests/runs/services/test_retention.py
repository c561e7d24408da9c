"""Retention deletes what a project keeps no longer, in batches, and lies about nothing."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.models import Finding, LoopIssue, Run, Step, Trace
from runs.services import analysis, ingest, issues, retention
from tests.helpers import looping_trace

OLD = timedelta(days=400)


def stored_run(project, data: bytes | None = None, age: timedelta = OLD) -> Run:
    trace, _ = ingest.store_trace(project, data or looping_trace(8), name="loop.jsonl")
    ingest.ingest_trace(trace.pk)
    run = trace.runs.get()
    analysis.analyze_run(run.pk)
    past = timezone.now() - age
    Run.objects.filter(pk=run.pk).update(created_at=past)
    Trace.objects.filter(pk=trace.pk).update(created_at=past)
    run.refresh_from_db()
    return run


def keep(project, raw=None, steps=None, runs=None) -> None:
    project.raw_retention_days, project.step_retention_days = raw, steps
    project.run_retention_days = runs
    project.save()


@pytest.mark.django_db
def test_expired_steps_go_and_the_run_keeps_its_verdict_findings_and_summary(project, client_in):
    run = stored_run(project)
    findings = list(run.findings.values_list("detector", "signature", "count"))
    assert run.verdict in ("warn", "stop") and findings and Step.objects.filter(run=run).exists()
    keep(project, steps=90)
    assert retention.apply()["steps"] == 1
    after = Run.objects.get(pk=run.pk)
    assert after.steps_expired_at is not None and not Step.objects.filter(run=run).exists()
    assert after.verdict == run.verdict and after.summary == run.summary
    assert list(after.findings.values_list("detector", "signature", "count")) == findings
    page = client_in.get(run.get_absolute_url())
    assert page.status_code == 200 and b"steps expired" in page.content


@pytest.mark.django_db
def test_a_run_whose_steps_expired_is_never_analyzed_again(project):
    run = stored_run(project)
    keep(project, steps=90)
    retention.apply()
    before = list(Finding.objects.filter(run=run).values_list("pk", "issue_id"))
    with pytest.raises(issues.StepsExpired):
        analysis.analyze_run(run.pk)
    assert list(Finding.objects.filter(run=run).values_list("pk", "issue_id")) == before
    assert Run.objects.get(pk=run.pk).verdict == run.verdict


@pytest.mark.django_db
def test_recent_runs_and_keep_forever_keep_everything(project):
    recent = stored_run(project, age=timedelta(days=1))
    old = stored_run(project, looping_trace(9))
    keep(project)  # None: kept for ever
    assert retention.apply() == {"raw": 0, "steps": 0, "runs": 0}
    keep(project, raw=30, steps=90, runs=365)
    retention.apply()
    assert Step.objects.filter(run=recent).exists() and Trace.objects.get(pk=recent.trace_id).raw
    assert not Run.objects.filter(pk=old.pk).exists()


@pytest.mark.django_db
def test_expired_raw_bytes_are_removed_and_their_download_says_so(project, client_in, api):
    run = stored_run(project)
    keep(project, raw=30)
    assert retention.apply()["raw"] == 1
    trace = Trace.objects.get(pk=run.trace_id)
    assert trace.raw_expired_at is not None and bytes(trace.raw) == b""
    assert client_in.get(f"/traces/{trace.pk}/raw").status_code == 410
    assert Run.objects.get(pk=run.pk).verdict == run.verdict  # the runs stay


@pytest.mark.django_db
def test_expired_runs_go_and_their_loop_issue_counts_the_runs_kept(project):
    old, recent = stored_run(project), stored_run(project, looping_trace(9), timedelta(days=2))
    issue = LoopIssue.objects.get(project=project)
    assert issue.run_count == 2
    keep(project, runs=365)
    assert retention.apply()["runs"] == 1
    issue.refresh_from_db()
    assert issue.run_count == 1 and issue.last_run_id == recent.pk
    assert not Run.objects.filter(pk=old.pk).exists()
    assert not Trace.objects.filter(pk=old.trace_id).exists()


@pytest.mark.django_db
def test_steps_go_in_bounded_batches(project, monkeypatch):
    run = stored_run(project, looping_trace(30))
    monkeypatch.setattr(retention, "BATCH", 7)
    keep(project, steps=90)
    retention.apply()
    assert not Step.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_a_reanalysis_racing_the_purge_neither_crashes_nor_changes_the_run(project):
    """Retention deletes the steps (in batches of 3, passing again as the beat would) while re-analyses of the run run on
    other connections: each re-analysis either writes the same findings (it read every step)
    or stops with StepsExpired having written nothing; the run keeps one set of findings."""
    run = stored_run(project, looping_trace(40))
    before = sorted(run.findings.values_list("detector", "signature", "count", "issue_id"))
    issue = LoopIssue.objects.get(project=project)
    counted = (issue.run_count, issue.finding_count, issue.waste_steps)
    keep(project, steps=90)
    retention.BATCH, saved = 3, retention.BATCH
    start, errors, outcomes = threading.Barrier(4), [], []

    def reanalyze() -> None:
        try:
            start.wait()
            for _ in range(5):
                try:
                    analysis.analyze_run(run.pk)
                    outcomes.append("analyzed")
                except issues.StepsExpired:
                    outcomes.append("refused")
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    def purge() -> None:
        try:
            start.wait()
            # A run an analysis holds locked is skipped (skip_locked) until the next pass.
            for _ in range(200):
                retention.apply()
                if not Step.objects.filter(run=run).exists():
                    break
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=t) for t in (reanalyze, reanalyze, reanalyze, purge)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        retention.BATCH = saved
    assert not errors, errors
    after = Run.objects.get(pk=run.pk)
    assert after.steps_expired_at is not None and not Step.objects.filter(run=run).exists()
    assert sorted(after.findings.values_list("detector", "signature", "count", "issue_id")) == (
        before
    )
    assert after.verdict == run.verdict and len(outcomes) == 15
    issue.refresh_from_db()
    assert (issue.run_count, issue.finding_count, issue.waste_steps) == counted


@pytest.mark.django_db(transaction=True)
def test_an_analysis_that_read_the_steps_before_the_purge_writes_nothing_after_it(project):
    """The ordering the race above may or may not hit, made certain: a re-analysis reads
    every step (and runs the engine), then the purge marks the run and deletes its steps,
    then the re-analysis writes. It is refused (StepsExpired), the transaction rolls back,
    and the run keeps its findings and its issue's counts."""
    from runs.services import policy, storage

    run = stored_run(project, looping_trace(12))
    before = sorted(run.findings.values_list("detector", "signature", "count", "issue_id"))
    issue = LoopIssue.objects.get(project=project)
    counted = (issue.run_count, issue.finding_count, issue.waste_steps)
    steps = list(storage.iter_steps(run.pk))[:6]  # what it read: findings it would change
    engine_policy = policy.engine_policy(project)
    prepared = analysis.prepare([(Run.objects.get(pk=run.pk), steps)], engine_policy)
    keep(project, steps=90)
    retention.apply()
    assert not Step.objects.filter(run=run).exists()
    with pytest.raises(issues.StepsExpired):
        analysis.write(prepared)
    after = Run.objects.get(pk=run.pk)
    assert sorted(after.findings.values_list("detector", "signature", "count", "issue_id")) == (
        before
    )
    assert after.verdict == run.verdict and after.step_count == run.step_count
    issue.refresh_from_db()
    assert (issue.run_count, issue.finding_count, issue.waste_steps) == counted
