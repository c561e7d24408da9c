"""The ingest pipeline: raw bytes kept, runs inserted whole or not at all, verdicts stored."""

import gzip

import pytest

from runs.models import Finding, Run, Step, Trace
from runs.services import ingest
from tests.helpers import call, healthy_trace, looping_trace, message, native_jsonl

pytestmark = pytest.mark.django_db


def test_a_looping_trace_becomes_a_flagged_run_with_its_steps_in_order(project, process):
    trace = process(project, looping_trace(5), name="loop.jsonl")

    assert trace.status == Trace.Status.ANALYZED
    assert trace.format == "native"
    run = trace.runs.get()
    assert run.name == "loop.jsonl"
    assert run.step_count == 6
    assert run.tool_call_count == 5
    assert list(run.steps.values_list("seq", flat=True)) == [0, 1, 2, 3, 4, 5]
    assert run.verdict == "stop"
    assert run.stall_score > 0
    repeat = run.findings.get(detector="repeat")
    assert repeat.tool == "web_search"
    assert repeat.count == 5
    assert repeat.seqs[:3] == [1, 2, 3]
    assert "web_search" in repeat.message


def test_a_healthy_trace_is_ok_with_no_warning(project, process):
    trace = process(project, healthy_trace())
    run = trace.runs.get()
    assert run.verdict == "ok"
    assert not run.findings.exclude(severity="info").exists()


def test_repeated_calls_share_a_signature(project, process):
    run = process(project, looping_trace(3)).runs.get()
    signatures = set(run.steps.filter(kind="tool_call").values_list("call_sig", flat=True))
    assert len(signatures) == 1 and signatures != {""}


def test_a_malformed_file_fails_with_the_line_and_keeps_the_raw_bytes(project, process):
    data = b"this is not json\n{also not json\n"
    trace = process(project, data, name="broken.jsonl", format="native")

    assert trace.status == Trace.Status.FAILED
    assert "broken.jsonl:1" in trace.error
    assert "invalid JSON" in trace.error
    assert trace.raw_bytes() == data
    assert not Run.objects.exists()
    assert not Step.objects.exists()


def test_an_unknown_format_says_what_was_tried(project, process):
    trace = process(project, b"hello world, no trace here\n", name="notes.txt")
    assert trace.status == Trace.Status.FAILED
    assert "unknown trace format" in trace.error
    assert "native" in trace.error


def test_an_invalid_line_is_skipped_and_counted_and_the_rest_kept(project, process):
    data = native_jsonl(message("user", "hi"), call("a", {"x": 1}, "r")) + b"{oops\n"
    trace = process(project, data, name="partly.jsonl")
    assert trace.status == Trace.Status.ANALYZED
    assert trace.skipped_lines == 1
    assert "partly.jsonl:3" in trace.warnings[0]
    assert trace.runs.get().step_count == 2


def test_a_failure_late_in_a_file_leaves_no_partial_run(project, monkeypatch):
    """Runs stored before the error are rolled back with it."""
    data = native_jsonl(call("a", {}, 1, run_id="r1"), call("b", {}, 2, run_id="r2"))
    trace, _ = ingest.store_trace(project, data, name="two.jsonl")
    original = ingest.store_run
    stored = []

    def store_then_break(*args, **kwargs):
        if stored:
            raise ValueError("disk on fire")
        stored.append(original(*args, **kwargs))
        return stored[-1]

    monkeypatch.setattr(ingest, "store_run", store_then_break)
    ingest.ingest_trace(trace.pk)

    trace.refresh_from_db()
    assert trace.status == Trace.Status.FAILED
    assert "disk on fire" in trace.error
    assert len(stored) == 1
    assert not Run.objects.exists()


def test_uploading_the_same_bytes_twice_returns_the_existing_trace(project, process):
    first = process(project, looping_trace(3), name="a.jsonl")
    again, created = ingest.store_trace(project, looping_trace(3), name="b.jsonl")
    assert not created
    assert again.pk == first.pk
    assert Trace.objects.count() == 1
    assert Run.objects.count() == 1


def test_the_same_bytes_in_another_project_are_another_trace(project, other_project):
    a, _ = ingest.store_trace(project, looping_trace(3), name="a.jsonl")
    b, created = ingest.store_trace(other_project, looping_trace(3), name="a.jsonl")
    assert created and a.pk != b.pk


def test_ingest_twice_is_a_no_op(project, process):
    trace = process(project, looping_trace(3))
    ingest.ingest_trace(trace.pk)
    assert Run.objects.count() == 1
    assert Step.objects.count() == 4


def test_a_trace_left_parsing_by_a_dead_worker_is_ingested_on_retry(project):
    trace, _ = ingest.store_trace(project, looping_trace(3), name="t.jsonl")
    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.PARSING)
    ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZING
    assert trace.runs.count() == 1


def test_gzip_input_is_read(project, process):
    trace = process(project, gzip.compress(looping_trace(4)), name="loop.jsonl.gz")
    assert trace.status == Trace.Status.ANALYZED
    assert trace.runs.get().tool_call_count == 4


def test_several_runs_in_one_file(project, process):
    data = native_jsonl(
        call("a", {"x": 1}, "same", run_id="first"),
        call("b", {"x": 1}, "other", run_id="second"),
        call("a", {"x": 1}, "same", run_id="first"),
    )
    trace = process(project, data)
    assert sorted(trace.runs.values_list("external_id", "tool_call_count")) == [
        ("first", 2),
        ("second", 1),
    ]


def test_reanalysis_replaces_findings(project, process):
    run = process(project, looping_trace(5)).runs.get()
    before = Finding.objects.filter(run=run).count()
    from runs.services import analysis

    analysis.analyze_run(run.pk)
    assert Finding.objects.filter(run=run).count() == before


def test_a_policy_made_invalid_in_the_database_never_breaks_an_upload(project, process):
    from runs.models import ToolPolicy

    ToolPolicy.objects.create(project=project, tool="", warn=5, stop=2)  # around every check
    trace = process(project, looping_trace(6))
    assert trace.status == Trace.Status.ANALYZED, trace.error
    assert "policy of project 'agents' is invalid" in trace.warnings[0]
    assert "built-in defaults" in trace.warnings[0]
    assert trace.runs.get().verdict == "stop"  # the built-in thresholds still apply


def test_a_trace_whose_import_died_twice_is_failed_not_retried(project):
    trace, _ = ingest.store_trace(project, looping_trace(3), name="killer.jsonl")
    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.PARSING, import_attempts=2)
    ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.FAILED
    assert "ran out of memory or was killed 2 times" in trace.error
    assert not trace.runs.exists() and trace.raw_bytes() == looping_trace(3)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "tool_call", "tool": "a\\u0000b", "args": {}}\n' * 4,
        b'{"type": "tool_call", "tool": "t", "args": {"\\ud800": "\\udc00x"}}',
        b'{"type": "tool_call", "tool": "t", "args": {}, "tokens_in": 1e400}',
        b'{"type": "tool_call", "tool": "t", "args": {}, "seq": 1e400}',
        b'{"run_id": "r\\u0000", "type": "tool_call", "tool": "t", "args": {}}',
    ],
)
def test_hostile_values_end_failed_or_analyzed_never_stuck(project, process, line):
    first = b'{"type": "message", "role": "user", "content": "go"}\n'
    trace = process(project, first + line + b"\n")
    assert trace.status == Trace.Status.ANALYZED, trace.error
    assert trace.runs.exists()
    assert all(run.verdict != "pending" for run in trace.runs.all())
    if b"1e400" in line:  # an infinite number: the line is skipped, with a warning that says so
        assert trace.skipped_lines == 1
        assert "trace.jsonl:2: field" in trace.warnings[0] and "finite number" in trace.warnings[0]


def test_the_same_bytes_with_a_forced_format_are_imported_again_with_it(project, process):
    data = native_jsonl(message("user", "go"), call("read", {"p": 1}, "x"))
    first = process(project, data, format="swe-agent")  # wrong: fails
    assert first.status == Trace.Status.FAILED
    again = process(project, data, format="native")
    assert again.pk == first.pk and again.status == Trace.Status.ANALYZED
    assert again.declared_format == "native" and again.runs.count() == 1
    assert process(project, data, format="native").runs.count() == 1  # same format: a no-op


def test_a_file_that_would_need_too_much_memory_fails_early_and_clearly(project, process, settings):
    settings.LOOPBOARD_MAX_HELD_STEPS = 50
    events = [dict(call("t", {"i": i}), run_id=f"r{i % 20}") for i in range(100)]
    trace = process(project, native_jsonl(*events), name="many.jsonl")
    assert trace.status == Trace.Status.FAILED
    assert "more than 50 steps across runs that are still open" in trace.error
    assert trace.error.startswith("many.jsonl") and not trace.runs.exists()


def test_a_retry_after_a_database_outage_is_not_counted_as_an_attempt(project):
    trace, _ = ingest.store_trace(project, looping_trace(3), name="outage.jsonl")
    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.PARSING, import_attempts=2)
    ingest.ingest_trace(trace.pk, after_outage=True)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZING and trace.import_attempts == 2


def _after_one_kill(project, name: str, steps: int = 3):
    """A stored trace whose first import was started once and never finished (its worker
    was killed mid-import): what a restarted worker finds."""
    data = native_jsonl(message("user", "go"), *[call("read", {"n": i}, "x") for i in range(steps)])
    trace, _ = ingest.store_trace(project, data, name=name)
    Trace.objects.filter(pk=trace.pk).update(status=Trace.Status.PARSING, import_attempts=1)
    return trace


def _in_thread(target, *args):
    """Run target(*args) in a thread with its own database connection; return (thread, errors)."""
    import threading

    from django.db import connection

    errors: list[BaseException] = []

    def body() -> None:
        try:
            target(*args)
        except BaseException as exc:  # reported to the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


@pytest.mark.django_db(transaction=True)
def test_a_valid_upload_is_not_lost_when_a_duplicate_delivery_arrives_mid_attempt(project, process):
    """The restored message and the launcher's requeue after one kill: while one delivery
    holds the attempt (its import lock, in another session), the other counts nothing,
    fails nothing and goes away; the trace then ends analyzed exactly once."""
    import threading

    trace = _after_one_kill(project, "restored.jsonl")
    holding, release = threading.Event(), threading.Event()

    def first_delivery_mid_attempt() -> None:
        with ingest.attempt_lock(trace.pk) as taken:
            assert taken
            holding.set()
            release.wait(10)

    thread, errors = _in_thread(first_delivery_mid_attempt)
    assert holding.wait(10)
    ingest.ingest_trace(trace.pk)  # the duplicate
    trace.refresh_from_db()
    assert (trace.status, trace.import_attempts, trace.error) == (Trace.Status.PARSING, 1, "")
    release.set()
    thread.join(10)
    assert not errors
    ingest.ingest_trace(trace.pk)  # the lock is free again: the attempt goes on
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZING and trace.import_attempts == 2
    from runs.services import analysis

    for run_id in trace.runs.values_list("pk", flat=True):
        analysis.analyze_run(run_id)
    trace.refresh_from_db()
    assert trace.status == Trace.Status.ANALYZED and trace.runs.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_of_the_same_ingest_message_after_a_kill_import_it_exactly_once(project):
    """Both deliveries start at once, each on its own connection, ten times over: every
    trace is imported once (one run, every step), counted once, and never failed."""
    import threading

    for attempt in range(10):
        trace = _after_one_kill(project, f"race-{attempt}.jsonl", steps=2000)
        start = threading.Barrier(2)

        def deliver(trace_id: int = trace.pk, start: threading.Barrier = start) -> None:
            start.wait(10)
            ingest.ingest_trace(trace_id)

        threads = [_in_thread(deliver) for _ in range(2)]
        for thread, errors in threads:
            thread.join(60)
            assert not errors
        trace.refresh_from_db()
        assert trace.status == Trace.Status.ANALYZING, (attempt, trace.status, trace.error)
        assert trace.import_attempts == 2 and trace.runs.count() == 1
        assert trace.runs.get().steps.count() == 2001
