"""The timeline window: planning around folded bands, and a big loop opening as one band."""

import pytest

from runs.services.summary import Band
from runs.web import timeline
from tests.helpers import call, looping_trace, message, native_jsonl

FOLDS = [Band("repeat", 10, 19, 10, "t", "a"), Band("cycle", 30, 39, 5, "t", "b")]


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
    assert band.fold.count == 2000 and band.first.seq == 1 and band.last.seq == 2000


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
