"""What the compare job stores and how it stops: the stored form gives back the comparison
the page shows, the cache key follows each run's state, and a progress that raises stops the
work between chunks (reading the steps, inside the alignment, checking results)."""

from __future__ import annotations

import gc
import random
import zlib
from dataclasses import replace

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.models import CompareJob, Run
from runs.services import analysis, compare
from tests.helpers import call, message
from tests.runs.services.test_compare import stored

pytestmark = pytest.mark.django_db


class Stop(Exception):
    pass


def as_shown(comparison):
    """What the page reads of a comparison: its steps without the alignment facts."""
    steps = {
        side: [replace(s, key="", shape="", outcome=(s.outcome[0], None)) for s in steps]
        for side, steps in (("left", comparison.left_steps), ("right", comparison.right_steps))
    }
    return replace(comparison, left_steps=steps["left"], right_steps=steps["right"])


@pytest.fixture
def changed_pair(project, process):
    """Two runs with every kind of row: equal, changed (args, result, status, volatile),
    removed, inserted, a loop on the left, and steps without time."""
    base = [message("user", "go")]
    base += [call("read_file", {"path": f"f{k}"}, f"line {k}") for k in range(6)]
    loop = [call("web_search", {"q": "same"}, {"results": []}) for _ in range(6)]
    left = [*base, *loop, call("bash", {"cmd": "ls"}, "done at 2026-01-01T10:00:00Z")]
    right = [*base[:3], call("read_file", {"path": "other"}, "x"), *base[4:]]
    right += [call("bash", {"cmd": "ls"}, "done at 2026-02-03T11:30:07Z")]
    right += [call("grep", {"q": "a"}, "error: no", status="error"), message("assistant", "ok")]
    return stored(process, project, left, "pair-1"), stored(process, project, right, "pair-2")


def test_the_stored_form_gives_back_the_comparison_the_page_shows(changed_pair):
    left, right = changed_pair
    computed = compare.compare_runs(left, right)
    kinds = {row.kind for row in computed.rows}
    assert kinds == {"equal", "changed", "removed", "inserted"}
    assert any(row.volatile for row in computed.rows) and computed.left_loop is not None
    back = compare.decode(compare.encode(computed), left, right)
    assert back == as_shown(computed)
    assert back.totals("left") == computed.totals("left")
    assert back.loop_row("left") == computed.loop_row("left")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rows_of_every_shape_survive_the_stored_form(data):
    whats = st.lists(st.sampled_from(["args", "text", "result", "status"]), unique=True)
    n = data.draw(st.integers(0, 30))
    steps = [
        compare.StepFacts(k, "tool_call", f"t{k % 3}", "", "", ("ok", None), k * 7, k / 3,
                          data.draw(st.one_of(st.none(), st.floats(0, 1e6))))
        for k in range(n)
    ]  # fmt: skip
    rows = []
    for k in range(n):
        kind = data.draw(st.sampled_from(["equal", "changed", "removed", "inserted"]))
        changed = tuple(w for w in ("args", "text", "result", "status") if w in data.draw(whats))
        volatile = data.draw(st.sampled_from([(), ("result",)]))
        left = None if kind == "inserted" else k
        right = None if kind == "removed" else k
        rows.append(compare.Row(kind, left, right, changed, volatile))
    cmp = compare.Comparison(Run(pk=1), Run(pk=2), steps, steps[::-1], rows, True, None, None,
                             {"equal": 1}, 3, True)  # fmt: skip
    assert compare.decode(compare.encode(cmp), cmp.left, cmp.right) == cmp


def test_decoding_holds_the_garbage_collector_only_while_it_runs():
    steps = [compare.StepFacts(k, "tool_call", "t", "", "", ("ok", None), 1, 0.0, None)
             for k in range(3)]  # fmt: skip
    cmp = compare.Comparison(Run(pk=1), Run(pk=2), steps, steps, [], False, None, None)
    assert gc.isenabled()
    assert compare.decode(compare.encode(cmp), cmp.left, cmp.right).left_steps == steps
    assert gc.isenabled()
    with pytest.raises(zlib.error):
        compare.decode(b"not a stored comparison", cmp.left, cmp.right)
    assert gc.isenabled()  # given back after a failure too
    gc.disable()
    try:
        compare.decode(compare.encode(cmp), cmp.left, cmp.right)
        assert not gc.isenabled()  # a caller's own pause is left as it was
    finally:
        gc.enable()


def test_the_cache_key_follows_each_runs_analysis_steps_appends_and_retention(changed_pair):
    left, right = changed_pair
    key = compare.cache_key(left, right)
    assert compare.cache_key(left, right) == key and compare.cache_key(right, left) != key
    analysis.analyze_run(right.pk)  # a policy change analyzes again
    right.refresh_from_db()
    assert compare.cache_key(left, right) != key
    key = compare.cache_key(left, right)
    for change in ({"version": left.version + 1}, {"step_count": left.step_count + 1},
                   {"steps_expired_at": timezone.now()}):  # fmt: skip
        changed = Run(**{**{f.attname: getattr(left, f.attname) for f in Run._meta.fields}})
        for name, value in change.items():
            setattr(changed, name, value)
        assert compare.cache_key(changed, right) != key, change


def test_a_progress_that_raises_stops_the_comparison_between_chunks(changed_pair, monkeypatch):
    left, right = changed_pair
    monkeypatch.setattr(compare, "FACTS_CHUNK", 3)
    for stop_in in ("reading the left run's steps", "reading the right run's steps",
                    "aligning the steps", "checking changed results"):  # fmt: skip
        told: list[tuple[str, float]] = []

        def progress(phase, done, stop_in=stop_in, told=told):
            told.append((phase, done))
            if phase == stop_in and len([p for p, _ in told if p == stop_in]) == 2:
                raise Stop

        with pytest.raises(Stop):
            compare.compare_runs(left, right, progress)
        assert told[-1][0] == stop_in
        assert [d for _, d in told] == sorted(d for _, d in told)


def test_the_alignment_tells_its_tick_how_far_it_is_and_stops_when_it_raises():
    rng = random.Random(3)
    a = [rng.randrange(50) for _ in range(20_000)]
    b = [x if rng.random() > 0.05 else -x for x in a]  # no unique keys: Myers, then greedy
    seen: list[float] = []
    pairs, bounded = compare.align(a, b, tick=seen.append)
    assert bounded and pairs == compare.align(a, b)[0]  # the tick changes nothing
    assert len(seen) > 10 and seen == sorted(seen) and seen[0] >= 0 and seen[-1] <= 1

    def stop_halfway(done):
        if done > 0.5:
            raise Stop

    with pytest.raises(Stop):
        compare.align(a, b, tick=stop_halfway)


def test_a_job_whose_run_changed_before_it_ran_fails_and_the_next_visit_replaces_it(
    changed_pair,
):
    left, right = changed_pair
    job = compare.open_job(left, right)
    analysis.analyze_run(left.pk)
    job = compare.run_job(job.pk)
    assert job.status == "failed" and "open it again" in job.error
    left.refresh_from_db()
    fresh = compare.open_job(left, right)
    assert fresh.pk != job.pk and list(CompareJob.objects.all()) == [fresh]
