"""Chaos: alpha uploads one native file of 20,000 runs. While it is imported, and again once its
runs are stored and wait for analysis, beta's small upload is analyzed within BOUND seconds."""

from __future__ import annotations

import pytest

from tests.chaos import harness

BOUND = 30.0  # seconds from beta's POST /api/traces to `analyzed` (idle: about 1 s)
NAME = "20,000-run upload"
RUNS = 20_000
IMPORT_TIMEOUT = 900  # seconds for the import to store its runs (not a bound: a safety net)


@pytest.fixture(scope="module")
def board(chaos_template):
    with harness.board("big", chaos_template) as live:
        yield live


def test_a_20000_run_upload_does_not_hold_up_another_projects_upload(board):
    idle = board.measure(NAME, "idle (no fault)", BOUND)
    harness.assert_within(idle, BOUND, "idle", board)
    data = harness.many_runs(RUNS, 3)  # 60,000 steps, about 5 MB
    big = board.upload("alpha", data, "twenty-thousand.jsonl")
    parsing = board.wait_trace("alpha", big, ("parsing", "analyzing", "analyzed"), 60)
    assert parsing is not None and parsing["status"] != "failed", parsing
    during = board.measure(NAME, f"while alpha's {RUNS:,} runs are imported", BOUND)
    stored = board.wait_trace("alpha", big, ("analyzing", "analyzed"), IMPORT_TIMEOUT)
    assert stored is not None and stored["status"] != "failed", stored
    runs = board.sql("SELECT count(*) FROM runs_run WHERE trace_id = %s", big)[0][0]
    assert runs == RUNS  # (the API lists the first 1,000 run ids only)
    after = board.measure(NAME, f"while alpha's {RUNS:,} runs wait for analysis", BOUND)
    harness.assert_within(during, BOUND, f"{NAME}, during its import", board)
    harness.assert_within(after, BOUND, f"{NAME}, its runs waiting", board)
