"""Comparing two runs: alignment on generated pairs, the changes found, loop starts, the bound,
and which run is compared with by default."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.models import Run
from runs.services import compare
from tests.helpers import call, message, native_jsonl


def assert_valid(pairs, a, b) -> None:
    """Every element of both sides appears exactly once, in order; matches are equal."""
    assert [i for i, _ in pairs if i is not None] == list(range(len(a)))
    assert [j for _, j in pairs if j is not None] == list(range(len(b)))
    for i, j in pairs:
        if i is not None and j is not None:
            assert a[i] == b[j]


def lcs_length(a, b) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        previous = 0
        for j, y in enumerate(b):
            previous, row[j + 1] = row[j + 1], (previous + 1 if x == y else max(row[j + 1], row[j]))
    return row[-1]


def matched(pairs) -> int:
    return sum(1 for i, j in pairs if i is not None and j is not None)


# ---- align: plain sequences ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=40), st.lists(st.integers(0, 6), max_size=40))
def test_align_is_a_valid_longest_common_subsequence_on_small_pairs(a, b):
    pairs, bounded = compare.align(a, b)
    assert_valid(pairs, a, b)
    assert not bounded
    assert matched(pairs) == lcs_length(a, b)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_align_finds_a_few_edits_of_a_long_run_exactly(data):
    a = data.draw(st.lists(st.integers(0, 400), min_size=100, max_size=300))
    b = list(a)
    for _ in range(data.draw(st.integers(0, 25))):
        at = data.draw(st.integers(0, len(b)))
        op = data.draw(st.sampled_from(["insert", "remove", "replace"]))
        if op == "insert":
            b.insert(at, 1000 + at)
        elif b and at < len(b):
            if op == "remove":
                del b[at]
            else:
                b[at] = 2000 + at
    pairs, bounded = compare.align(a, b)
    assert_valid(pairs, a, b)
    assert not bounded
    assert matched(pairs) == lcs_length(a, b)


def test_the_bound_kicks_in_on_big_pairs_and_the_alignment_stays_valid():
    rng = random.Random(16)
    a = [rng.randrange(5) for _ in range(10_000)]
    b = [rng.randrange(5) for _ in range(10_000)]
    pairs, bounded = compare.align(a, b)
    assert bounded
    assert_valid(pairs, a, b)
    assert matched(pairs) > 4_000  # greedy, yet still close to the ~6.5k of a full LCS


def test_a_long_loop_against_its_fixed_run_aligns_without_the_bound():
    fixed = ["read", "search", "edit", "test", "done"]
    looping = ["read", *["search"] * 5_000, "edit", "test", "done"]
    pairs, bounded = compare.align(looping, fixed)
    assert not bounded
    assert_valid(pairs, looping, fixed)
    assert matched(pairs) == 5


# ---- two stored runs -------------------------------------------------------------------


def calls(n: int, *, seed: int = 0) -> list[dict]:
    """n distinct tool calls with token counts and a cost."""
    tools = ["read_file", "grep", "bash", "edit_file"]
    return [
        call(
            tools[k % 4],
            {"path": f"src/m{k}.py"},
            f"content {k}",
            tokens_in=10,
            tokens_out=5,
            cost=0.001,
        )  # fmt: skip
        for k in range(n)
    ]


def stored(process, project, events: list[dict], run_id: str) -> Run:
    """Store events as the run `run_id` (in order), imported and analyzed inline."""
    for n, event in enumerate(events):
        event["run_id"] = run_id
        event["seq"] = n
    return process(project, native_jsonl(*events), name=f"{run_id}.jsonl").runs.get()


def rows_of(comparison) -> list[tuple]:
    left, right = comparison.left_steps, comparison.right_steps
    return [
        (
            row.kind,
            left[row.left].seq if row.left is not None else None,
            right[row.right].seq if row.right is not None else None,
            row.changed,
        )
        for row in comparison.rows
    ]


@pytest.mark.django_db
def test_identical_runs_align_as_all_equal(project, process):
    left = stored(process, project, [message("user", "go"), *calls(30)], "nightly-1")
    right = stored(process, project, [message("user", "go"), *calls(30)], "nightly-2")
    comparison = compare.compare_runs(left, right)
    assert comparison.counts == {"equal": 31}
    assert [(r.left, r.right) for r in comparison.rows] == [(n, n) for n in range(31)]
    assert not comparison.bounded
    assert comparison.totals("left").tokens == comparison.totals("right").tokens == 450


@pytest.mark.django_db
def test_known_inserts_removals_and_changes_are_found_exactly(project, process):
    base = [message("user", "go"), *calls(40)]
    other = [dict(event) for event in base]
    other[10] = {**other[10], "args": {"path": "src/other.py"}}  # same tool, other args
    other[20] = {**other[20], "result": "content changed"}  # same call, other result
    other[25] = {**other[25], "status": "error"}
    del other[30]  # removed
    other.insert(5, call("web_search", {"query": "new"}, "found"))  # inserted
    left = stored(process, project, base, "task-a-1")
    right = stored(process, project, other, "task-a-2")
    comparison = compare.compare_runs(left, right)
    rows = rows_of(comparison)
    not_equal = [row for row in rows if row[0] != "equal"]
    assert not_equal == [
        ("inserted", None, 5, ()),
        ("changed", 10, 11, ("args",)),
        ("changed", 20, 21, ("result",)),
        ("changed", 25, 26, ("status",)),
        ("removed", 30, None, ()),
    ]
    assert comparison.counts == {"equal": 37, "inserted": 1, "changed": 3, "removed": 1}
    assert not comparison.bounded
    # every step of both runs appears exactly once, in order
    assert [r[1] for r in rows if r[1] is not None] == list(range(41))
    assert [r[2] for r in rows if r[2] is not None] == list(range(41))
    right_totals = comparison.totals("right")
    assert (right_totals.steps, right_totals.tool_calls) == (41, 40)


@pytest.mark.django_db
def test_where_each_run_started_to_loop_comes_from_its_first_warning(project, process):
    loop = [call("web_search", {"query": "same"}, {"results": []}) for _ in range(8)]
    looping = stored(process, project, [message("user", "find it"), *calls(3), *loop], "r-1")
    fixed = stored(process, project, [message("user", "find it"), *calls(3), loop[0]], "r-2")
    finding = looping.findings.filter(severity__in=["warn", "stop"]).order_by("fired_at").first()
    comparison = compare.compare_runs(looping, fixed)
    assert comparison.right_loop is None
    loop_start = comparison.left_loop
    assert loop_start is not None and loop_start.detector == finding.detector
    assert loop_start.started_at == (
        finding.started_at if finding.started_at is not None else finding.fired_at
    )
    assert loop_start.fired_at == finding.fired_at
    # the loop's first iteration is the one call both runs share; the repeats are removed
    row = comparison.rows[comparison.loop_row("left")]
    assert comparison.left_steps[row.left].seq == loop_start.started_at
    assert comparison.counts["removed"] == 7


@pytest.mark.django_db
def test_the_bound_kicks_in_on_stored_runs_and_every_step_appears_once(
    project, process, monkeypatch
):
    rng = random.Random(7)
    tools = ["a", "b", "c"]

    def noisy(n):
        return [call(rng.choice(tools), {"k": rng.randrange(3)}, "r") for _ in range(n)]

    left = stored(process, project, noisy(600), "noise-1")
    right = stored(process, project, noisy(600), "noise-2")
    monkeypatch.setattr(compare, "EDIT_BUDGET", 2_000)
    comparison = compare.compare_runs(left, right)
    assert comparison.bounded
    rows = rows_of(comparison)
    assert [r[1] for r in rows if r[1] is not None] == list(range(600))
    assert [r[2] for r in rows if r[2] is not None] == list(range(600))
    left_keys = [s.key for s in comparison.left_steps]
    right_keys = [s.key for s in comparison.right_steps]
    for row in comparison.rows:
        if row.kind == "equal":
            assert left_keys[row.left] == right_keys[row.right]


# ---- results that differ only in volatile values ----------------------------------------


def pairs_of(left_results: list, right_results: list) -> tuple[list[dict], list[dict]]:
    """Two runs of the same calls (one per pair of results) with these results; a result is
    a value, or (value, status)."""

    def events(results):
        out = [message("user", "go")]
        for k, result in enumerate(results):
            value, status = result if isinstance(result, tuple) else (result, "ok")
            out.append(call("fetch", {"k": k}, value, status=status))
        return out

    return events(left_results), events(right_results)


def result_rows(comparison) -> list[tuple]:
    """(kind, changed, volatile) of each row but the opening message."""
    return [(row.kind, row.changed, row.volatile) for row in comparison.rows[1:]]


VOLATILE_ONLY = [
    (
        "request req_8f3a2b1c9d0e4f77 done at 2026-01-01T10:00:00Z",
        "request req_1b2c3d4e5f6a7b88 done at 2026-01-02T11:30:07Z",
    ),
    (
        {"id": "550e8400-e29b-41d4-a716-446655440000", "rows": 3, "request_id": 123},
        {"id": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "rows": 3, "request_id": 456},
    ),
    (
        "wrote /tmp/tmpk3j_x9q2/out.txt in 0.42s",
        "wrote /tmp/tmpzz81ab7c/out.txt in 1.07s",
    ),
    (  # JSON text is read as its value, keys in any order
        '{"status": "ok", "timestamp": 1767225600, "trace": "a1b2c3d4e5f6"}',
        '{"trace": "ffee00112233", "status": "ok", "timestamp": 1767229999}',
    ),
    (  # the same error, another request id
        ("TimeoutError: request 5f2c9a7e01 timed out after 30s", "error"),
        ("TimeoutError: request 09bd3e44fa timed out after 31s", "error"),
    ),
    (  # a serialised LangGraph ToolMessage: the call's own id and the message's id differ
        '{"type": "tool", "data": {"content": "42 rows", "tool_call_id": "call_3", "id": null}}',
        '{"type": "tool", "data": {"content": "42 rows", "tool_call_id": "call_9", '
        '"id": "3f1c0d7e-0d9b-4c1e-9a51-1f0e9b7c2a11"}}',
    ),
]


@pytest.mark.django_db
def test_results_that_differ_only_in_ids_timestamps_uuids_or_paths_are_not_changed(
    project, process
):
    left_events, right_events = pairs_of(*zip(*VOLATILE_ONLY, strict=True))
    left = stored(process, project, left_events, "vol-1")
    right = stored(process, project, right_events, "vol-2")
    comparison = compare.compare_runs(left, right)
    assert result_rows(comparison) == [("equal", (), ("result",))] * len(VOLATILE_ONLY)
    assert comparison.counts == {"equal": len(VOLATILE_ONLY) + 1}
    assert comparison.volatile_only == len(VOLATILE_ONLY)


STILL_CHANGED = [
    ("3 tests passed", "3 tests failed"),  # other words
    ({"lines": 10}, {"lines": 99999}),  # a JSON number is data
    ("KeyError: 'user'", "KeyError: 'email'"),  # quoted strings are content
    (  # another error class, the same path
        ("FileNotFoundError: /tmp/tmpk3j_x9q2/out.txt", "error"),
        ("PermissionError: /tmp/tmpk3j_x9q2/out.txt", "error"),
    ),
    (("request failed with status 404", "error"), ("request failed with status 503", "error")),
    (("command failed, exit code 1", "error"), ("command failed, exit code 2", "error")),
    (  # the same ToolMessage ids, other content
        '{"type": "tool", "data": {"content": "42 rows", "tool_call_id": "call_3"}}',
        '{"type": "tool", "data": {"content": "no rows", "tool_call_id": "call_3"}}',
    ),
]


@pytest.mark.django_db
def test_results_that_differ_in_words_json_numbers_or_error_class_stay_changed(project, process):
    left_events, right_events = pairs_of(*zip(*STILL_CHANGED, strict=True))
    left = stored(process, project, left_events, "real-1")
    right = stored(process, project, right_events, "real-2")
    comparison = compare.compare_runs(left, right)
    assert result_rows(comparison) == [("changed", ("result",), ())] * len(STILL_CHANGED)
    assert comparison.volatile_only == 0


@pytest.mark.django_db
def test_a_volatile_result_beside_another_status_or_other_arguments_is_still_shown(
    project, process
):
    left_events, right_events = pairs_of(
        ["done at 2026-01-01T10:00:00Z", "done at 2026-01-01T10:00:00Z"],
        [("done at 2026-01-02T11:30:07Z", "error"), "done at 2026-01-02T11:30:07Z"],
    )
    right_events[2]["args"] = {"k": 1, "retry": True}  # same tool, other arguments
    left = stored(process, project, left_events, "mixed-1")
    right = stored(process, project, right_events, "mixed-2")
    comparison = compare.compare_runs(left, right)
    assert result_rows(comparison) == [
        ("changed", ("result", "status"), ()),  # another status: the results are diffed
        ("changed", ("args",), ("result",)),
    ]
    assert comparison.volatile_only == 0


@pytest.mark.django_db
def test_results_too_long_or_read_past_the_budget_stay_changed(project, process, monkeypatch):
    short = ("done at 2026-01-01T10:00:00Z", "done at 2026-01-02T11:30:07Z")  # 30 chars as JSON
    long = (short[0] + " " + "x" * 200, short[1] + " " + "x" * 200)
    left_events, right_events = pairs_of([short[0], long[0]], [short[1], long[1]])
    left = stored(process, project, left_events, "long-vol-1")
    right = stored(process, project, right_events, "long-vol-2")

    def kinds():
        compare._CACHE.clear()  # the per-process cache of recent comparisons
        comparison = compare.compare_runs(left, right)
        return [row[0] for row in result_rows(comparison)], comparison.volatile_bounded

    assert kinds() == (["equal", "equal"], False)
    monkeypatch.setattr(compare, "VOLATILE_CHARS", 100)
    assert kinds() == (["equal", "changed"], False)  # too long: by design, not a bound
    monkeypatch.setattr(compare, "VOLATILE_CHARS", 32_000)
    monkeypatch.setattr(compare, "VOLATILE_BUDGET", 60)  # the two short results
    assert kinds() == (["equal", "changed"], True)


# ---- the default other run -------------------------------------------------------------


@pytest.mark.django_db
def test_the_default_is_the_previous_run_of_the_same_task(project, process):
    first = stored(process, project, calls(3), "deploy-check-41")
    stored(process, project, calls(4), "unrelated")
    second = stored(process, project, calls(5), "deploy-check-42")
    stored(process, project, calls(6), "something-else")
    assert compare.default_other(second) == first
    # the first run of a task has none before it: the next of the same task
    assert compare.default_other(first) == second


@pytest.mark.django_db
def test_the_default_falls_back_to_the_same_agent_then_the_previous_run(project, process):
    a1 = stored(process, project, calls(3), "alpha")
    b = stored(process, project, calls(3), "beta")
    a2 = stored(process, project, calls(3), "gamma")
    Run.objects.filter(pk__in=[a1.pk, a2.pk]).update(agent="researcher")
    a2.refresh_from_db()
    assert compare.default_other(a2) == a1
    assert compare.default_other(b) == a1  # no task, no agent: the run just before


@pytest.mark.django_db
def test_candidates_stay_in_the_project(project, other_project, process):
    mine = stored(process, project, calls(3), "mine-1")
    theirs = stored(process, other_project, calls(3), "mine-2")
    also_mine = stored(process, project, calls(4), "mine-3")
    assert compare.candidates(also_mine) == [mine]
    assert compare.default_other(also_mine) == mine
    assert theirs not in compare.candidates(also_mine, "mine")
    assert compare.candidates(also_mine, f"#{mine.pk}") == [mine]


@pytest.mark.django_db
def test_names_full_of_regex_syntax_still_find_the_same_task(project, process):
    name = r"eval (a|b) [x]*+?.{2} \d ^$ #"
    first = stored(process, project, calls(2), f"{name} 1")
    stored(process, project, calls(2), f"{name}x 2")  # not the same task
    second = stored(process, project, calls(2), f"{name} 2")
    assert compare.name_pattern(second.name) is not None
    assert compare.default_other(second) == first


@pytest.mark.django_db
def test_the_session_id_pattern_finds_the_same_task_when_names_differ(project, process):
    first = stored(process, project, calls(2), "a")
    stored(process, project, calls(2), "b")
    second = stored(process, project, calls(2), "c")
    Run.objects.filter(pk=first.pk).update(external_id="ci-job-17-attempt")
    Run.objects.filter(pk=second.pk).update(external_id="ci-job-18-attempt")
    second.refresh_from_db()
    assert compare.default_other(second) == first
