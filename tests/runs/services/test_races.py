"""Work that several workers share, raced for real on PostgreSQL (one connection per thread)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from runs.models import Run, Trace, Verdict
from runs.services import analysis, ingest
from tests.helpers import call, message, native_jsonl

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
