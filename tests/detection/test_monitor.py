"""Monitor (live) and analyze (postmortem) share one core; check() answers before a call."""

import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detection import Monitor, Policy, Step, analyze

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
        step = Step(seq=seq, kind=kind, id=f"s{seq}", parent_id=parent)
        if kind == "tool_call":
            step.tool = draw(st.sampled_from(TOOLS))
            step.args = {"q": draw(st.integers(0, 3)), "ts": seq}
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
