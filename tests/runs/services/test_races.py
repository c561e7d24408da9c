"""Work that several workers share, raced for real on PostgreSQL (one connection per thread)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from runs.models import LedgerRow, Run, Trace, Verdict
from runs.services import analysis, ingest
from tests.helpers import call, looping_trace, message, native_jsonl

pytestmark = pytest.mark.django_db(transaction=True)


def two_run_trace(project) -> Trace:
    data = native_jsonl(
        {"run_id": "a", **message("user", "go")}, {"run_id": "a", **call("read", {"p": 1}, "x")},
        {"run_id": "b", **message("user", "go")}, {"run_id": "b", **call("read", {"p": 2}, "y")},
    )  # fmt: skip
    trace, _ = ingest.store_trace(project, data, name="two.jsonl")
    ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZING and trace.runs.count() == 2
    return trace


def test_the_last_of_two_parallel_analyses_marks_the_trace_analyzed(project):
    trace = two_run_trace(project)
    first, second = trace.runs.order_by("pk")
    checked, release = threading.Event(), threading.Event()

    def finish(run: Run, hold: bool) -> None:
        try:
            with transaction.atomic():
                Run.objects.filter(pk=run.pk).update(verdict=Verdict.OK)
                analysis.finish_trace(trace.pk)
                if hold:  # the first one checks, then waits to commit
                    checked.set()
                    release.wait(10)
        finally:
            connection.close()

    one = threading.Thread(target=finish, args=(first, True))
    one.start()
    assert checked.wait(10)
    two = threading.Thread(target=finish, args=(second, False))
    two.start()
    two.join(0.5)  # the second waits for the first's lock (or, unlocked, sees it pending)
    release.set()
    one.join(10)
    two.join(10)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED


def test_an_import_skips_a_trace_another_worker_holds_and_nothing_is_doubled(project):
    data = native_jsonl(message("user", "go"), call("read", {"p": 1}, "x"))
    trace, _ = ingest.store_trace(project, data, name="held.jsonl")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:  # a worker in the middle of this trace's import
        try:
            with transaction.atomic():
                Trace.objects.select_for_update().get(pk=trace.pk)
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    ingest.ingest_trace(trace.pk)  # the redelivered message: skips, at once
    assert not Run.objects.filter(trace=trace).exists()
    release.set()
    holder.join(10)
    ingest.ingest_trace(trace.pk)  # what recovery queues later
    ingest.ingest_trace(trace.pk)  # and a duplicate of it
    assert Run.objects.filter(trace=trace).count() == 1
    assert Run.objects.get(trace=trace).step_count == 2


def test_two_analyses_of_one_run_at_once_write_its_findings_once(project):
    trace, _ = ingest.store_trace(project, looping_trace(6), name="loop.jsonl")
    ingest.ingest_trace(trace.pk)
    run = Run.objects.get(trace=trace)
    analysis.analyze_run(run.pk)
    expected = run.findings.count()
    assert expected > 0
    written, release, errors = threading.Event(), threading.Event(), []

    def analyze(hold: bool) -> None:
        try:
            with transaction.atomic():
                analysis.analyze_run(run.pk)
                if hold:
                    written.set()
                    release.wait(10)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=analyze, args=(True,))
    first.start()
    assert written.wait(10)
    second = threading.Thread(target=analyze, args=(False,))
    second.start()
    second.join(0.5)
    release.set()
    first.join(10)
    second.join(10)
    assert errors == []
    assert run.findings.count() == expected
    assert run.ledger_rows.count() == LedgerRow.objects.filter(run=run).count() > 0
