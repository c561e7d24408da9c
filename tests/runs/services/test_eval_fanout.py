"""Issue 25, "What breaks" 2: an Inspect `.eval` of 20,000 samples became 20,000 runs and
20,000 analysis tasks, so the next upload sat in `received` for hours. Any format's runs are
now one analysis message per upload and a chain of bounded batches (runs/services/analysis.py,
analyze_batch); here with an `.eval` zip, the case the red team used."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from runs import task_names
from runs.models import Finding, Trace
from runs.services import analysis, ingest
from tests.runs.services.test_batched_analysis import drain, sent


def eval_zip(samples: int, calls: int = 6) -> bytes:
    """An Inspect `.eval` log of `samples` samples, each the same failing call `calls` times."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(
            "header.json",
            json.dumps({"version": 2, "status": "success", "eval": {"task": "t", "model": "m"}}),
        )
        for sample in range(1, samples + 1):
            events = [
                {"event": "tool", "id": f"c{n}", "function": "web_search",
                 "arguments": {"query": "same"}, "result": "no results",
                 "timestamp": "2025-01-01T00:00:00+00:00"}
                for n in range(calls)
            ]  # fmt: skip
            body = {"id": sample, "epoch": 1, "events": events, "messages": []}
            archive.writestr(f"samples/{sample}_epoch_1.json", json.dumps(body))
    return buffer.getvalue()


@pytest.mark.django_db
def test_an_eval_of_many_samples_is_one_analysis_message_and_bounded_batches_not_a_task_a_sample(
    project, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(analysis, "BATCH_RUNS", 100)
    trace, _ = ingest.store_trace(project, eval_zip(250), name="many-samples.eval")
    with django_capture_on_commit_callbacks() as callbacks:
        ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    assert trace.format == "inspect-ai" and trace.runs.count() == 250, trace.error
    [(name, ids)] = sent(callbacks)  # one message carrying all 250 runs, not 250 tasks
    assert name == task_names.ANALYZE_RUNS and len(ids) == 250
    sizes = drain(ids, django_capture_on_commit_callbacks)
    assert sizes == [100, 100, 50]  # each message holds the queue for one batch only
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED
    assert not trace.runs.filter(verdict="pending").exists()
    assert Finding.objects.filter(run__trace=trace, detector="repeat").count() == 250
