"""Chaos: every worker process is killed (SIGKILL) in the middle of a big import, and
`loopboard serve` is started again, as a user would after a crash. The trace ends analyzed
exactly once (each run once, its steps once, its findings and loop issues counted once, not
failed as killed twice), and beta's small upload, sent after the restart while the import is
redone, is analyzed within BOUND seconds."""

from __future__ import annotations

import time

import pytest

from tests.chaos import harness

BOUND = 30.0  # seconds from beta's POST /api/traces to `analyzed` (idle: about 1 s)
NAME = "worker killed"
# Big enough that its import lasts seconds, not a fraction of one, on a quiet machine with the
# compiled engine (500 runs were imported within the 1 s this test used to wait).
RUNS, STEPS, LOOP_EVERY = 2000, 40, 5


@pytest.fixture(scope="module")
def board(chaos_template):
    with harness.board("kill", chaos_template) as live:
        yield live


def test_a_worker_killed_mid_import_then_restarted_analyzes_the_trace_exactly_once(board):
    idle = board.measure(NAME, "idle (no fault)", BOUND)
    harness.assert_within(idle, BOUND, "idle", board)
    big = board.upload("alpha", harness.many_runs(RUNS, STEPS, loop_every=LOOP_EVERY), "big.jsonl")
    parsing = board.wait_trace("alpha", big, ("parsing", "analyzing", "analyzed"), 120)
    assert parsing is not None and parsing["status"] == "parsing", parsing
    time.sleep(0.3)  # into the import
    workers = board.serve.workers()
    assert workers, board.serve.tail()
    for process in workers:
        process.kill()  # SIGKILL, every pool at once: the machine lost its workers
    assert board.trace("alpha", big)["status"] == "parsing"  # it died mid-import
    board.serve.process.wait(timeout=60)  # the launcher sees its worker die and stops
    board.serve.stop()
    board.serve.start()  # `loopboard serve` again, as after a crash
    board.warm_up()  # its pools take work (they start after the banner), then measure
    seconds = board.measure(NAME, "after the restart, the killed import redone", BOUND)
    done = board.wait_analyzed("alpha", big, timeout=900)
    assert done["error"] == "", done
    runs, names, steps, pending = board.sql(
        "SELECT count(*), count(DISTINCT external_id), sum(step_count),"
        " count(*) FILTER (WHERE analyzed_at IS NULL OR verdict = 'pending')"
        " FROM runs_run WHERE trace_id = %s",
        big,
    )[0]
    assert (runs, names, steps, pending) == (RUNS, RUNS, RUNS * STEPS, 0)
    stored = board.sql(
        "SELECT count(*) FROM runs_step s JOIN runs_run r ON r.id = s.run_id WHERE r.trace_id = %s",
        big,
    )[0][0]
    assert stored == RUNS * STEPS
    loops = RUNS // LOOP_EVERY
    flagged = board.sql(
        "SELECT count(*) FROM runs_run WHERE trace_id = %s AND verdict <> 'ok'", big
    )[0][0]
    assert flagged == loops
    doubled = board.sql(
        "SELECT count(*) FROM (SELECT 1 FROM runs_finding f JOIN runs_run r ON r.id = f.run_id"
        " WHERE r.trace_id = %s GROUP BY f.run_id, f.detector, f.tool, f.signature, f.fired_at"
        " HAVING count(*) > 1) d",
        big,
    )[0][0]
    assert doubled == 0
    miscounted = board.sql(
        "SELECT i.id, i.run_count, count(ir.id) FROM runs_loopissue i"
        " JOIN runs_project p ON p.id = i.project_id"
        " LEFT JOIN runs_issuerun ir ON ir.issue_id = i.id"
        " WHERE p.slug = 'alpha' GROUP BY i.id HAVING i.run_count <> count(ir.id)"
    )
    assert miscounted == []  # each issue counts each of its runs once
    issue_runs = board.sql(
        "SELECT count(*) FROM runs_issuerun ir JOIN runs_run r ON r.id = ir.run_id"
        " WHERE r.trace_id = %s",
        big,
    )[0][0]
    assert issue_runs == loops  # each looping run of the trace is in one issue, once
    status, error, attempts = board.sql(
        "SELECT status, error, import_attempts FROM runs_trace WHERE id = %s", big
    )[0]
    print(f"chaos: {NAME}: trace {status}, import attempts {attempts}, {runs} runs")
    assert (status, error) == ("analyzed", "")
    harness.assert_within(seconds, BOUND, NAME, board)
