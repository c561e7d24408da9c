"""The worker's analysis of a long stored run keeps the engine's ledger and the findings,
not the steps: a run with a loop in every turn reads the steps of a hundred loops at a time
to fingerprint them, not those of all its loops."""

import tracemalloc

import pytest

from runs.models import Trace
from runs.services import analysis, ingest, queue
from tests.helpers import call, message, native_jsonl

pytestmark = pytest.mark.django_db

TEXT = "def handler(request):\n    return render(request, 'page.html')\n" * 24  # 1.5 KB


def looping_session(turns: int) -> bytes:
    """One session of `turns` user turns, each a read and then the same failing call five
    times (~2.5 KB a step): a loop, and so a finding, in every turn."""
    events = []
    for turn in range(turns):
        events.append(message("user", f"task {turn}"))
        events.append(call("read_file", {"path": f"src/m{turn}.py"}, f"{TEXT}# {turn}"))
        command = {"command": f"pytest tests/test_m{turn}.py", "env": TEXT}
        failed = f"FAILED tests/test_m{turn}.py\n{TEXT}"
        events += [call("bash", command, failed, status="error") for _ in range(5)]
    return native_jsonl(*events)


def analysis_peak(project, turns: int, monkeypatch) -> tuple[int, int]:
    """Import a looping session, then analyze it as the worker does (read back by cursor);
    return its steps and the analysis's peak of traced memory, in bytes."""
    queued: list[int] = []
    monkeypatch.setattr(queue, "queue_analysis", lambda ids, bulk=False: queued.extend(ids))
    trace, _ = ingest.store_trace(project, looping_session(turns), name=f"loops-{turns}.jsonl")
    ingest.ingest_trace(trace.pk)
    [run_id] = queued
    tracemalloc.start()
    try:
        analysis.analyze_batch([run_id])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED, trace.error
    run = trace.runs.get()
    assert run.findings.filter(detector="repeat").count() == turns  # a loop in every turn
    return run.step_count, peak


def test_the_analysis_of_a_stored_run_grows_by_its_ledger_not_by_the_steps_of_its_loops(
    project, monkeypatch
):
    monkeypatch.setattr(analysis, "STREAM_STEPS", 100)  # both runs are read back by cursor
    analysis_peak(project, 20, monkeypatch)  # (first imports and caches out of the figures)
    short_steps, short_peak = analysis_peak(project, 150, monkeypatch)
    long_steps, long_peak = analysis_peak(project, 600, monkeypatch)
    per_step = (long_peak - short_peak) / (long_steps - short_steps)
    # What grows is the ledger (~56 bytes a call) and the findings, two in each turn of seven
    # steps (~1,700 bytes a step here); reading every loop's steps for its fingerprint at
    # once, as the grouping did, cost ~6,300.
    assert per_step < 3000, f"the analysis keeps {per_step:.0f} bytes more a step"
