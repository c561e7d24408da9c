"""Monitor (live) and analyze (postmortem) share one core; check() answers before a call."""

import random
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detection import Monitor, Policy, Step, analyze, engine

from .helpers import Trace, pattern

TOOLS = ["search", "read", "Edit", "bash", "status"]


@st.composite
def runs(draw):
    """Generated runs: a few tools, a few args and results, messages, errors, batches, trees."""
    count = draw(st.integers(0, 60))
    steps, ids = [], []
    for seq in range(count):
        kind = draw(st.sampled_from(["tool_call"] * 6 + ["user", "assistant"]))
        parent = draw(st.sampled_from([None, *ids[-4:]])) if draw(st.booleans()) else None
        lane = draw(st.sampled_from([None, None, "a", "b"])) if parent else None
        step = Step(seq=seq, kind=kind, id=f"s{seq}", parent_id=parent, lane=lane)
        if kind == "tool_call":
            step.tool = draw(st.sampled_from(TOOLS))
            step.args = draw(
                st.sampled_from([{"q": draw(st.integers(0, 3)), "ts": seq}] * 5 + [None])
            )
            step.result = draw(st.sampled_from(["", "a", "b", {"n": 1}, None]))
            step.status = draw(st.sampled_from(["ok", "ok", "ok", "error"]))
            step.batch_id = draw(st.sampled_from([None, f"m{seq // 3}"]))
            step.tokens_in = draw(st.sampled_from([None, 10]))
        else:
            step.text = draw(st.sampled_from(["hello there", "I will retry", "done"]))
        steps.append(step)
        ids.append(step.id)
    return steps


POLICIES = [
    Policy(),
    Policy.from_dict(
        {
            "defaults": {"scope": "run", "warn": 2, "stop": 3, "max_steps": 30},
            "tools": {"status": {"polling": True, "max_repeats": 3}, "read": {"quota": 5}},
        }
    ),
]


@given(runs(), st.sampled_from(POLICIES))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_monitor_and_analyze_agree(steps, policy):
    result = analyze(steps, policy)
    monitor = Monitor(policy)
    fired = []
    for step in steps:
        fired.extend(monitor.observe(step))
    live = monitor.analysis()
    assert live.findings == result.findings
    assert (live.verdict, live.stall_score, live.waste) == (
        result.verdict,
        result.stall_score,
        result.waste,
    )
    assert len(result.ledger) == result.tool_calls
    # every finding fired live, at the step analyze says, never above its final severity
    assert {(f.detector, f.signature, f.fired_at) for f in fired} >= {
        (f.detector, f.signature, f.fired_at) for f in result.findings
    }
    assert [f.fired_at for f in result.findings] == sorted(f.fired_at for f in result.findings)


def test_observe_returns_what_fires_now():
    monitor = Monitor()
    fired = [monitor.observe(step) for step in pattern("AAAAA")]
    assert [[f.severity for f in now] for now in fired] == [[], [], ["warn"], [], ["stop"]]


def test_a_finding_records_where_it_warned_and_where_it_stopped():
    (finding,) = analyze(pattern("AAAAAA")).findings
    assert (finding.severity, finding.fired_at, finding.stop_at) == ("stop", 2, 4)
    (warned,) = analyze(pattern("AAAA")).findings
    assert (warned.severity, warned.fired_at, warned.stop_at) == ("warn", 2, None)


def test_check_warns_before_the_third_identical_call_and_does_not_record_it():
    monitor = Monitor()
    trace = Trace()
    trace.call("search", {"q": "x"}, "nothing")
    trace.call("search", {"q": "x"}, "nothing")
    for step in trace.steps:
        monitor.observe(step)
    before = monitor.analysis()
    check = monitor.check("search", {"q": "x"})
    assert check.verdict == "warn"
    assert "since step 0" in check.message
    assert monitor.check("search", {"q": "y"}).verdict == "ok"
    assert monitor.analysis() == before


def test_check_respects_progress_and_rechecks():
    monitor = Monitor()
    trace = Trace()
    trace.call("status", {"job": 1}, "10%")
    trace.call("status", {"job": 1}, "20%")
    trace.call("lint", {}, "OK")
    trace.call("lint", {}, "OK")
    trace.call("Edit", {"f": "a", "new": "b"}, "ok")
    for step in trace.steps:
        monitor.observe(step)
    assert monitor.check("status", {"job": 1}).verdict == "ok"
    assert monitor.check("lint", {}).verdict == "ok"


def test_check_sees_failures_mutations_cycles_and_caps():
    monitor = Monitor(Policy.from_dict({"tools": {"deploy": {"max_repeats": 0}}}))
    trace = Trace()
    trace.call("Write", {"path": "a"}, "disk full", "error")
    trace.call("deploy", {"env": "prod"}, "deployed")
    for step in pattern("ABABA"):
        step.seq += 2
        trace.steps.append(step)
    for step in trace.steps:
        monitor.observe(step)
    assert monitor.check("Write", {"path": "a"}).findings[0].detector == "mutating_failure"
    assert monitor.check("deploy", {"env": "prod"}).verdict == "stop"
    assert monitor.check("b", {"arg": "B"}).verdict == "warn"


def test_monitor_memory_is_bounded_by_distinct_signatures():
    def peak(count):
        monitor = Monitor()
        tracemalloc.start()
        for seq in range(count):
            monitor.observe(
                Step(seq, "tool_call", tool="search", args={"q": seq % 50}, result=f"r{seq % 7}")
            )
        _, high = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return high

    small, large = peak(10_000), peak(40_000)
    assert large < small * 1.2  # bounded: seq lists stop at MAX_SEQS


def _tree_run(count, seed):
    """A long run of few signatures over many lanes (sub-agents), recent, far back or new."""
    rng = random.Random(seed)
    steps = []
    for seq in range(count):
        roll = rng.random()
        if seq == 0 or roll < 0.3:
            lane, parent = None, None
        elif roll < 0.6:
            lane, parent = f"a{seq // 50}", f"s{seq - 1}"  # a sub-agent working for a while
        elif roll < 0.8:
            lane, parent = f"a{rng.randrange(max(seq - 300, 1)) // 50}", f"s{seq - 1}"
        else:
            lane, parent = f"a{seq}", f"s{rng.randrange(seq)}"  # a new one, often forgotten
        kind = "user" if roll > 0.98 else "tool_call"
        step = Step(seq, kind, id=f"s{seq}", parent_id=parent, text="go on", lane=lane)
        if kind == "tool_call":
            step.tool = rng.choice(["search", "read"])
            step.args = {"q": rng.randrange(4)}
            step.result = rng.choice(["a", "b"])
            step.status = rng.choice(["ok", "ok", "error"])
        steps.append(step)
    return steps


@pytest.mark.parametrize("seed", [1, 2])
def test_monitor_and_analyze_agree_past_the_remembered_ids_and_lanes(seed):
    steps = _tree_run(engine.MAX_IDS * 2 + 2000, seed)
    monitor = Monitor()
    for step in steps:
        monitor.observe(step)
    assert len(monitor._where) == engine.MAX_IDS
    assert len(monitor._lanes) == engine.MAX_LANES + 1
    assert monitor.analysis().findings == analyze(steps).findings


def _retained(steps):
    """Return the bytes a Monitor holds after observing these steps, and the monitor."""
    tracemalloc.start()
    monitor = Monitor()
    for step in steps:
        monitor.observe(step)
    retained, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return retained, monitor


def _ten_signatures(count, shape):
    for seq in range(count):
        lane = {"main": None, "one": "sub", "many": f"a{seq // 3}"}[shape]
        yield Step(
            seq, "tool_call", id=f"s{seq}", parent_id=f"s{seq - 1}" if seq else None,
            tool="search", args={"q": seq % 10}, result=f"r{seq % 7}", lane=lane,
        )  # fmt: skip


@pytest.mark.parametrize(("shape", "long"), [("main", 100_000), ("one", 20_000), ("many", 12_000)])
def test_monitor_memory_with_step_ids_is_bounded_by_distinct_signatures(shape, long):
    short, _ = _retained(_ten_signatures(engine.MAX_IDS * 2, shape))
    retained, monitor = _retained(_ten_signatures(long, shape))
    assert len(monitor._where) <= engine.MAX_IDS
    assert len(monitor._lanes) <= engine.MAX_LANES + 1
    # not a byte more per step once the windows are full: the long run has tens of thousands
    # more steps; what it may hold more is a few KB (longer counts in the findings' words)
    assert retained < short * 1.1 + 16 * 1024
