"""A long run through the worker: spooled, COPYed as it is read, analyzed as it is read back,
and stored exactly as the same run held whole."""

import pytest

from runs.importers.kit import spool
from runs.models import Trace
from runs.services import analysis, ingest, queue, raw, storage
from tests.importers.test_spool import _native

pytestmark = pytest.mark.django_db

FINDING_FIELDS = ("detector", "severity", "tool", "signature", "seqs", "count", "threshold",
                  "fired_at", "stop_at", "started_at", "rule", "message", "waste_steps", "loop",
                  "lead")  # fmt: skip
RUN_FIELDS = ("external_id", "name", "format", "step_count", "tool_call_count", "tools",
              "started_at", "ended_at", "verdict", "stall_score", "waste_steps", "detectors",
              "summary")  # fmt: skip


def _import(project, data: bytes, monkeypatch):
    """Store, import and analyze a trace as the worker does (analysis in batches)."""
    queued: list[int] = []
    monkeypatch.setattr(queue, "queue_analysis", lambda ids, bulk=False: queued.extend(ids))
    monkeypatch.setattr(queue, "queue_batch", lambda ids, again=False: queued.extend(ids))
    trace, _ = ingest.store_trace(project, data, name="long.jsonl")
    ingest.ingest_trace(trace.pk)
    while queued:
        batch = list(queued)
        queued.clear()
        analysis.analyze_batch(batch)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED, trace.error
    run = trace.runs.get()
    steps = list(run.steps.order_by("seq").values_list(*storage.STEP_COLUMNS[1:]))
    findings = list(run.findings.order_by("fired_at", "detector", "pk").values(*FINDING_FIELDS))
    summary = {field: getattr(run, field) for field in RUN_FIELDS}
    return steps, findings, summary


def test_a_spooled_run_is_stored_and_analyzed_as_the_same_run_held_whole(
    project, other_project, monkeypatch
):
    data = _native(3000, seed=7)
    whole = _import(project, data, monkeypatch)
    monkeypatch.setattr(spool, "WINDOW", 40)  # the run leaves memory 40 steps behind
    monkeypatch.setattr(analysis, "STREAM_STEPS", 100)  # and is analyzed as it is read back
    read_back = []
    real = storage.iter_steps
    monkeypatch.setattr(
        storage, "iter_steps", lambda run_id: read_back.append(run_id) or real(run_id)
    )
    spooled = _import(other_project, data, monkeypatch)
    assert read_back, "the long run was analyzed from a cursor, not read whole"
    assert spooled == whole
    steps, findings, summary = whole
    assert len(steps) == summary["step_count"] > 2500
    assert findings and summary["verdict"] != "ok"


def test_a_trace_is_stored_and_unpacked_a_chunk_at_a_time(project, monkeypatch):
    data = _native(500, seed=2)
    monkeypatch.setattr(raw, "WRITE_CHUNK", 999)  # many statements append to Trace.raw
    monkeypatch.setattr(raw, "RAW_CHUNK", 1000)  # many slices of the compressed bytes
    monkeypatch.setattr(raw, "RAW_IN_MEMORY", 4096)  # and a file, not memory
    monkeypatch.setattr(queue, "queue_analysis", lambda ids, bulk=False: None)
    trace, _ = ingest.store_trace(project, data, name="t.jsonl")
    trace = Trace.objects.get(pk=trace.pk)
    assert trace.raw_encoding == "zstd" and len(trace.raw) > 3 * 1000
    assert trace.raw_bytes() == data  # the appended slices make the one zstd frame
    with raw.open_raw(Trace.objects.defer("raw").get(pk=trace.pk)) as received:
        assert received.read() == data
    assert b"".join(raw.chunks(trace)) == data
