"""The worker's OTLP assembly holds about what the file importer holds for a span: the steps
of the trace it builds, and one stored request at a time (its bytes, its decoded body and
its spans), not every request's spans at once."""

from __future__ import annotations

import gc
import importlib.util
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

from runs import tasks
from runs.models import OtlpSpanGroup, Run
from runs.services import ingest, otlp

ROOT = Path(__file__).resolve().parents[3]
KB = 1024
PER_SPAN = int(1.5 * KB)  # each span of the trace (measured 1.1-1.4 KB: its step, held)
PER_REQUEST_SPAN = 6 * KB  # each span of the one request being decoded (measured ~4.9 KB)
REQUEST_SPANS = 250


def gen_traces():
    """bench/gen_traces.py, the benchmarks' span generator, as a module."""
    spec = importlib.util.spec_from_file_location("gen_traces", ROOT / "bench" / "gen_traces.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules["gen_traces"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def send_trace(client, key, calls: int, seed: int) -> int:
    """Send one gen_traces run (2 * calls + 2 spans, its session named) in requests of
    REQUEST_SPANS spans, the root last as exporters send it; return its span count."""
    gen = gen_traces()
    (run,) = gen.generate(1, calls, 0.0, seed)
    spans = [*run.spans[1:], run.spans[0]]
    for start in range(0, len(spans), REQUEST_SPANS):
        body = gen.to_otlp_proto([replace(run, spans=spans[start : start + REQUEST_SPANS])])
        response = client.post("/v1/traces", body, content_type="application/x-protobuf",
                               HTTP_AUTHORIZATION=f"Bearer {key}")  # fmt: skip
        assert response.status_code == 200
    return len(spans)


def pending_keys() -> list[str]:
    rows = OtlpSpanGroup.objects.filter(assembled=False)
    return sorted(set(rows.values_list("trace_id", flat=True)))


@pytest.mark.django_db(transaction=True)
def test_assembling_a_trace_holds_its_steps_and_one_request_at_a_time(
    client, key, project, monkeypatch
):
    monkeypatch.setattr(tasks.assemble_otlp, "apply_async", lambda *a, **k: None)  # by hand
    send_trace(client, key, 20, seed=1)
    otlp.assemble(project.pk, pending_keys())  # warm up: imports, compiled patterns, caches
    spans = send_trace(client, key, 1499, seed=2)  # 3,000 spans in 12 requests
    (session,) = pending_keys()
    assert session.startswith(otlp.SESSION_PREFIX)

    built = {}  # the peak up to the runs being stored: decoding, collecting, building
    store_runs = ingest.store_runs

    def measured(*args, **kwargs):
        built["peak"] = tracemalloc.get_traced_memory()[1]
        return store_runs(*args, **kwargs)

    monkeypatch.setattr(ingest, "store_runs", measured)
    gc.collect()
    tracemalloc.start()
    try:
        (run_id,) = otlp.assemble(project.pk, [session])
    finally:
        tracemalloc.stop()
    bound = spans * PER_SPAN + REQUEST_SPANS * PER_REQUEST_SPAN
    assert built["peak"] <= bound, f"{built['peak'] / spans:.0f} bytes a span"
    run = Run.objects.get(pk=run_id)
    assert run.step_count == spans and run.verdict != "pending"
