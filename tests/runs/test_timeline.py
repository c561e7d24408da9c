"""The timeline window planner and folds (services, no pages)."""

import pytest

from detection import LedgerEntry
from runs import timeline
from runs.analysis import find_folds, repeat_strip
from tests.helpers import call, looping_trace, message, native_jsonl

FOLDS = [
    {"kind": "repeat", "start": 10, "end": 19, "count": 10},
    {"kind": "cycle", "start": 30, "end": 39, "count": 5},
]


def test_a_window_costs_two_rows_per_band():
    segments, more = timeline.plan_window(FOLDS, 0, 99, 20)
    assert segments[0] == ("steps", 0, 9)
    assert segments[1] == ("fold", FOLDS[0])
    assert segments[2] == ("steps", 20, 27)
    assert more == 28


def test_a_window_ends_at_the_end():
    segments, more = timeline.plan_window(FOLDS, 25, 40, 100)
    assert segments == [("steps", 25, 29), ("fold", FOLDS[1]), ("steps", 40, 40)]
    assert more is None


def test_fold_at_finds_the_band_holding_a_seq():
    assert timeline.fold_at(FOLDS, 15) is FOLDS[0]
    assert timeline.fold_at(FOLDS, 20) is None
    assert timeline.fold_at(FOLDS, 39) is FOLDS[1]


def entry(seq, sig, repeat_of=None, count=1):
    return LedgerEntry(seq, "t", sig, sig + "r", repeat_of, count)


def test_folds_group_consecutive_no_progress_repeats_of_one_call():
    ledger = [entry(0, "a"), entry(2, "a", 0, 2), entry(4, "a", 0, 3), entry(5, "b")]
    assert find_folds(ledger, turns=[]) == [
        {"kind": "repeat", "start": 0, "end": 4, "count": 3, "tool": "t", "signature": "a"}
    ]


def test_a_user_message_ends_a_band_and_short_runs_are_not_folded():
    ledger = [entry(0, "a"), entry(1, "a", 0, 2), entry(3, "a", 0, 3), entry(4, "a", 0, 4)]
    assert find_folds(ledger, turns=[2]) == []  # 2 + 2, neither reaches FOLD_MIN


def test_the_repeat_strip_marks_where_repeats_sit():
    ledger = [entry(s, "a", 0, s + 1) for s in range(90, 100)]
    strip = repeat_strip(ledger, fired=[92], step_count=100)
    assert strip["cells"][0] == 0 and strip["cells"][-1] == 4
    assert strip["fired"] == [44]


@pytest.mark.django_db
def test_a_big_loop_opens_as_a_band_without_loading_its_middle(project, process):
    data = native_jsonl(
        message("user", "go"), *[call("poll", {"id": 1}, "same") for _ in range(2000)]
    )
    run = process(project, data).runs.get()
    window = timeline.build_window(run, 0)
    kinds = [item.kind for item in window.items]
    assert kinds.count("fold") == 1 and len(window.items) < 10
    band = next(item for item in window.items if item.kind == "fold")
    assert band.fold["count"] == 2000 and band.first.seq == 1 and band.last.seq == 2000


@pytest.mark.django_db
def test_steps_carry_their_ledger_repeat_and_color(project, process):
    run = process(project, looping_trace(3)).runs.get()
    window = timeline.build_window(run, 0, folded=False)
    steps = [
        item.step for item in window.items if item.kind == "step" and item.step.kind == "tool_call"
    ]
    assert [s.repeat["count"] for s in steps] == [3, 3, 3]
    assert steps[0].ledger is None and steps[2].ledger.count == 3
    assert len({s.repeat["hue"] for s in steps}) == 1
