"""Analyzing the steps as stored (no read-back) gives what analyzing them from the database gives."""

import math

import pytest

import detection
from runs.models import Finding, LedgerRow, Run, Step
from runs.services import analysis, ingest, storage
from runs.services.policy import engine_policy

pytestmark = pytest.mark.django_db


def tricky_run() -> detection.Run:
    steps = [detection.Step(seq=0, kind="user", text="find\x00 it", id="u")]
    for n in range(6):
        steps.append(
            detection.Step(
                seq=len(steps),
                kind="tool_call",
                id=f"c{n}",
                parent_id="u",
                tool="web_search",
                # key order differs from jsonb's; a NUL and a NaN must survive as stored
                args={"z": 1, "query": "same\x00", "a": [1, 2.5]},
                result={"hits": [], "score": math.nan} if n < 5 else {"hits": ["x"]},
                status="weird" if n == 2 else "ok",
                started_at=1_700_000_000.123456789 + n,
                ended_at=1_700_000_000.5 + n,
                tokens_in=2**40,
                cost="0.5",
            )
        )
    steps.append(detection.Step(seq=len(steps), kind="assistant", text="done", id="a"))
    return detection.Run(id="tricky", format="native", steps=steps, name="tricky run")


def snapshot(run_id: int) -> tuple:
    run = Run.objects.get(pk=run_id)
    findings = sorted(
        Finding.objects.filter(run_id=run_id).values_list(
            "detector", "severity", "tool", "signature", "seqs", "count", "message", "waste_steps"
        )
    )
    ledger = list(LedgerRow.objects.filter(run_id=run_id).values_list("seq", "repeat_of", "count"))
    return (run.verdict, run.stall_score, run.waste_steps, run.waste_seconds, run.detectors,
            run.summary, findings, ledger, list(Run.objects.filter(pk=run_id).values_list("search")))  # fmt: skip


def test_steps_as_stored_analyze_like_steps_read_back(project):
    policy = engine_policy(project)
    [(run, steps)] = ingest.store_runs(project, [ingest.NewRun(tricky_run(), None)], policy)
    assert steps == list(storage.iter_steps(run.pk))  # exactly what the engine reads back
    analysis.analyze_runs([(run, steps)], policy)
    in_memory = snapshot(run.pk)
    analysis.analyze_run(run.pk)  # from the database
    assert snapshot(run.pk) == in_memory
    assert in_memory[0] == "stop" and in_memory[6]
    step = Step.objects.get(run=run, seq=3)
    assert step.status == "ok" and step.args == {"z": 1, "query": "same\ufffd", "a": [1, 2.5]}
    assert step.tokens_in == 2**31 - 1 and step.cost == 0.5 and step.call_sig


def test_a_rebuilt_run_keeps_its_id_and_gets_new_steps(project):
    policy = engine_policy(project)
    [(run, _)] = ingest.store_runs(project, [ingest.NewRun(tricky_run(), None)], policy)
    shorter = tricky_run()
    shorter.steps = shorter.steps[:2]
    [(again, steps)] = ingest.store_runs(project, [ingest.NewRun(shorter, None, run.pk)], policy)
    analysis.analyze_runs([(again, steps)], policy)
    assert again.pk == run.pk and Run.objects.count() == 1
    stored = Run.objects.get(pk=run.pk)
    assert stored.step_count == 2 and stored.verdict == "ok" and stored.ledger_rows.count() == 0
    assert list(Step.objects.filter(run=run).values_list("seq", flat=True)) == [0, 1]


def test_a_run_inserted_analyzed_matches_its_reanalysis(project):
    policy = engine_policy(project)
    [(run, _)] = ingest.store_runs(
        project, [ingest.NewRun(tricky_run(), None)], policy, analyze=True
    )
    inserted = snapshot(run.pk)
    assert inserted[0] == "stop" and inserted[8][0][0]  # verdict and search column written
    assert Run.objects.get(pk=run.pk).analyzed_at is not None
    analysis.analyze_run(run.pk)
    assert snapshot(run.pk) == inserted


def test_a_run_deleted_while_it_is_analyzed_is_skipped_not_an_error(project, process):
    from tests.helpers import looping_trace

    trace = process(project, looping_trace(6))
    run = trace.runs.get()
    [prepared] = analysis.prepare([(run, storage.iter_steps(run.pk))], engine_policy(project))
    trace.delete()  # meanwhile, someone deletes the trace and its runs
    assert analysis.write([prepared]) == []
    assert not Finding.objects.exists()
