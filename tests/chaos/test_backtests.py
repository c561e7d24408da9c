"""Chaos: alpha starts six back-tests at once, from the Tuning page, over its 300 runs of
300 steps. Beta's small upload is analyzed within BOUND seconds while they run."""

from __future__ import annotations

import pytest

from tests.chaos import harness

BOUND = 30.0  # seconds from beta's POST /api/traces to `analyzed` (idle: about 1 s)
NAME = "concurrent back-tests"
JOBS = 6
HISTORY, STEPS = 300, 300  # alpha's runs, and their steps, that each back-test examines


@pytest.fixture(scope="module")
def board(chaos_template):
    with harness.board("backtests", chaos_template) as live:
        yield live


def start_form(token: str) -> dict[str, str]:
    """The Tuning page's form: a draft row for every tool (so both policies run on every
    run), over the last 30 days."""
    return {
        "csrfmiddlewaretoken": token,
        "t-TOTAL_FORMS": "1", "t-INITIAL_FORMS": "0", "t-MIN_NUM_FORMS": "0",
        "t-MAX_NUM_FORMS": "1000",
        "t-0-tool": "*", "t-0-warn": "2", "t-0-stop": "9",
        "b-range": "30d",
    }  # fmt: skip


def test_concurrent_back_tests_do_not_hold_up_another_projects_upload(board):
    history = board.upload("alpha", harness.many_runs(HISTORY, STEPS), "history.jsonl")
    board.wait_analyzed("alpha", history, timeout=900)
    idle = board.measure(NAME, "idle (no fault)", BOUND)
    harness.assert_within(idle, BOUND, "idle", board)
    staff = board.login()
    page = staff.get(board.url + "/projects/alpha/tuning/", timeout=30)
    assert page.status_code == 200, page.text[:2000]
    token = staff.cookies["csrftoken"]
    for _ in range(JOBS):
        answer = staff.post(
            board.url + "/projects/alpha/tuning/backtests/",
            data=start_form(token), allow_redirects=False, timeout=60,
        )  # fmt: skip
        assert answer.status_code == 302 and "/backtests/" in answer.headers["Location"], (
            answer.status_code,
            answer.text[:2000],
        )
    jobs = board.sql("SELECT count(*) FROM runs_backtestjob")[0][0]
    assert jobs == JOBS
    running = board.wait_sql("SELECT count(*) FROM runs_backtestjob WHERE status = 'running'", 60)
    assert running, f"no back-test started\n{board.serve.tail()}"
    seconds = board.measure(
        NAME, f"{JOBS} back-tests at once over {HISTORY} runs x {STEPS} steps", BOUND
    )
    unfinished = board.sql(
        "SELECT count(*) FROM runs_backtestjob WHERE status IN ('queued', 'running')"
    )[0][0]
    print(f"chaos: {NAME}: {unfinished} of {JOBS} back-tests still queued or running after it")
    harness.assert_within(seconds, BOUND, NAME, board)
