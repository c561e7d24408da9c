"""Chaos: a webhook receiver that answers one byte every 3 seconds, four of alpha's channels
pointing at it and a rule that alerts on every flagged run. Beta's small upload is analyzed
within BOUND seconds while alpha's deliveries hang on the receiver."""

from __future__ import annotations

import time

import pytest

from tests.chaos import harness

BOUND = 30.0  # seconds from beta's POST /api/traces to `analyzed` (idle: about 1 s)
NAME = "slow receiver"


@pytest.fixture(scope="module")
def board(chaos_template):
    with harness.board("slow", chaos_template) as live:
        yield live


def test_a_slow_webhook_receiver_delays_only_its_own_deliveries(board):
    idle = board.measure(NAME, "idle (no fault)", BOUND)
    harness.assert_within(idle, BOUND, "idle", board)
    receiver = harness.TrickleReceiver(every=3.0)
    try:
        channels = [
            board.api("alpha", "POST", "/api/channels",
                      json={"name": f"slow {i}", "kind": "webhook", "url": receiver.url})["id"]
            for i in range(4)
        ]  # fmt: skip
        board.api(
            "alpha", "POST", "/api/alert-rules",
            json={"name": "every flagged run", "kind": "run", "severity": "warn",
                  "channel_ids": channels, "max_per_hour": 0},
        )  # fmt: skip
        # 10 looping runs: 40 alerts to deliver, every one to the slow receiver.
        board.upload("alpha", harness.many_runs(10, 8, loop_every=1), "loops.jsonl")
        deadline = time.monotonic() + 60
        while receiver.connections < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert receiver.connections >= 1, f"no delivery reached the receiver\n{board.serve.tail()}"
        seconds = board.measure(NAME, "4 channels to a receiver sending 1 byte / 3 s", BOUND)
        held = receiver.connections
    finally:
        receiver.close()
    harness.assert_within(seconds, BOUND, NAME, board)
    assert held >= 1  # the fault ran throughout: deliveries were hanging on the receiver
