"""A run's summary: folded bands, the repeat strip, and reading stored summaries back."""

from detection import LedgerEntry
from runs.services.summary import Band, RunSummary, Strip, find_folds, repeat_strip


def entry(seq, sig, repeat_of=None, count=1):
    return LedgerEntry(seq, "t", sig, sig + "r", repeat_of, count)


def test_folds_group_consecutive_no_progress_repeats_of_one_call():
    ledger = [entry(0, "a"), entry(2, "a", 0, 2), entry(4, "a", 0, 3), entry(5, "b")]
    assert find_folds(ledger, turns=[]) == [Band("repeat", 0, 4, 3, "t", "a")]


def test_a_user_message_ends_a_band_and_short_runs_are_not_folded():
    ledger = [entry(0, "a"), entry(1, "a", 0, 2), entry(3, "a", 0, 3), entry(4, "a", 0, 4)]
    assert find_folds(ledger, turns=[2]) == []  # 2 + 2, neither reaches FOLD_MIN


def test_the_repeat_strip_marks_where_repeats_sit():
    ledger = [entry(s, "a", 0, s + 1) for s in range(90, 100)]
    strip = repeat_strip(ledger, fired=[92], step_count=100)
    assert strip.cells[0] == 0 and strip.cells[-1] == 4
    assert strip.fired == (44,)


def test_a_summary_round_trips_through_json():
    summary = RunSummary(
        ((0, 0.0), (5, 0.5)), (Band("cycle", 3, 9, 2, "a", "s"),), Strip((0, 4), (1,))
    )
    assert RunSummary.from_json(summary.to_json()) == summary


def test_junk_in_a_stored_summary_is_dropped_not_shown():
    stored = {
        "stall_series": [[0, 0.1], ["x", 1], [1]],
        "folds": [
            {"kind": "repeat", "start": 5, "end": 2, "count": 1},
            "junk",
            {"kind": "<b>", "start": 1, "end": 3, "count": 3, "tool": 7},
        ],
        "strip": {"cells": [0, 4, "x", 9], "fired": ["<b>", 1]},
        "repeat_seqs": [1, 2],
    }
    summary = RunSummary.from_json(stored)
    assert summary.stall_series == ((0, 0.1),)
    assert summary.folds == (Band("repeat", 1, 3, 3, "", ""),)
    assert summary.strip == Strip((0, 4, 4), (1,))
    assert RunSummary.from_json(None) == RunSummary.from_json([]) == RunSummary()
