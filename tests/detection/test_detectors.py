"""Each behaviour the detectors promise (`detection.catalogue`), one test each."""

import pytest

import detection
from detection import Policy, analyze

from .helpers import Trace, detectors, pattern


def repeat_finding(analysis):
    return [f for f in analysis.findings if f.detector == "repeat" and f.severity != "info"]


# -- repeat and the progress-ledger table ---------------------------------------------------
@pytest.mark.parametrize(
    ("calls", "verdict"),
    [(1, "ok"), (2, "ok"), (3, "warn"), (4, "warn"), (5, "stop"), (7, "stop")],
)
def test_unchanged_repeats_warn_at_3_and_stop_at_5(calls, verdict):
    trace = Trace()
    for _ in range(calls):
        trace.call("search", {"q": "x"}, "nothing")
    result = analyze(trace.steps)
    assert result.verdict == verdict
    if verdict != "ok":
        (finding,) = repeat_finding(result)
        assert finding.threshold == (5 if verdict == "stop" else 3)
        assert finding.seqs == tuple(range(calls))
        assert "since step 0" in finding.message


def test_changed_every_time_is_not_a_loop():
    trace = Trace()
    for index in range(10):
        trace.call("search", {"q": "x"}, f"page {index}")
    result = analyze(trace.steps)
    assert result.verdict == "ok"
    assert result.stall_score == 0
    assert [f.severity for f in result.findings if f.detector == "repeat"] == ["info"]


def test_one_or_two_changes_then_unchanged_still_warns():
    trace = Trace()
    for result in ["a", "b", "b", "b"]:
        trace.call("status", {"id": 1}, result)
    assert analyze(trace.steps).verdict == "warn"


@pytest.mark.parametrize("errors", [["boom"] * 3, ["timeout 1", "timeout 2", "conn reset"]])
def test_identical_failing_calls_are_flagged_whatever_the_error_text(errors):
    trace = Trace()
    for error in errors:
        trace.call("book", {"flight": "F1"}, error, status="error")
    result = analyze(trace.steps)
    (finding,) = repeat_finding(result)
    assert finding.severity == "warn"
    assert "failed 3 times" in finding.message
    assert "report the blocker" in finding.message


def test_errors_escalate_as_failures_not_as_stalls():
    trace = Trace()
    for query in ["a", "b", "c", "d"]:
        trace.call("search", {"q": query}, "error: index down", status="error")
    assert "result_stall" not in detectors(analyze(trace.steps))


def test_user_message_starts_a_new_turn_for_successful_repeats():
    trace = Trace()
    for _ in range(2):
        trace.call("search", {"q": "x"}, "same")
    trace.user("search again please")
    for _ in range(2):
        trace.call("search", {"q": "x"}, "same")
    assert analyze(trace.steps).verdict == "ok"
    assert analyze(trace.steps, Policy.from_dict({"defaults": {"scope": "run"}})).verdict == "warn"


def test_failed_calls_count_across_turns():
    trace = Trace()
    for turn in range(5):
        trace.user(f"book flight {turn}")
        trace.call("book_reservation", {"flight": "F1", "seat": "1A"}, f"Error {turn}", "error")
    result = analyze(trace.steps)
    assert result.verdict == "stop"
    assert repeat_finding(result)[0].count == 5


def test_sub_agents_in_lanes_of_their_own_are_independent():
    trace = Trace()
    trace.call("task", {"agent": "root"}, "spawned", id="root")
    for branch in ("a", "b", "c"):
        trace.call("task", {"agent": branch}, f"agent {branch} done", id=branch, parent_id="root")
        for _ in range(2):
            trace.call("search", {"q": "x"}, "same", parent_id=branch, lane=branch)
    assert analyze(trace.steps).verdict == "ok"


def test_two_concurrent_sub_agents_that_call_the_same_tool_once_each_stay_clean():
    trace = Trace()
    trace.call("search", {"q": "x"}, "same")  # the caller's own call, before it spawns them
    for agent in ("a", "b"):
        trace.call("Task", {"prompt": f"look for x ({agent})"}, "started", id=agent)
    for agent in ("a", "b"):  # interleaved in time, each in its own lane
        trace.call("search", {"q": "x"}, "same", parent_id=agent, lane=agent)
    result = analyze(trace.steps)
    assert result.verdict == "ok", result.findings
    assert result.findings == ()


def test_the_same_call_issued_together_in_one_message_is_no_repeat():
    """Calls issued in one assistant message run at once: neither saw the other's result."""
    trace = Trace()
    for _ in range(4):
        trace.call("fetch", {"url": "https://example.com"}, "same", batch_id="m0")
    for _ in range(3):
        trace.call("fetch", {"url": "https://example.com"}, "Error: 503", "error", batch_id="m1")
    result = analyze(trace.steps)
    assert result.verdict == "ok", result.findings


def test_the_same_batch_issued_message_after_message_is_still_a_loop():
    trace = Trace()
    for message in range(4):
        for _ in range(2):
            trace.call("fetch", {"url": "https://example.com"}, "same", batch_id=f"m{message}")
    result = analyze(trace.steps)
    assert result.verdict in ("warn", "stop")
    repeat = repeat_finding(result)[0]
    assert repeat.seqs == (0, 2, 4, 6)  # one call of each message: the other ran with it


def test_a_sub_agent_starts_from_what_its_caller_had_seen():
    trace = Trace()
    trace.call("task", {"agent": "root"}, "spawned", id="root")
    trace.call("search", {"q": "x"}, "same", parent_id="root")
    trace.call("task", {"agent": "a"}, "spawned", id="a", parent_id="root")
    trace.call("search", {"q": "x"}, "same", parent_id="a", lane="a")
    trace.call("search", {"q": "x"}, "same", parent_id="a", lane="a")
    assert analyze(trace.steps).verdict == "warn"


def test_nesting_is_not_a_lane_the_same_call_under_per_step_spans_is_a_loop():
    """Seven identical failing calls, each under a span of its own turn, as the OpenAI Agents
    SDK, LangGraph and smolagents nest them: parent links alone open no lane."""
    trace = Trace()
    trace.say("I'll read it", id="agent")
    for turn in range(7):
        trace.say(f"turn {turn}", id=f"turn{turn}", parent_id="agent")
        trace.call(
            "read_file", {"path": "missing.txt"}, "FileNotFoundError: missing.txt",
            status="error", parent_id=f"turn{turn}",
        )  # fmt: skip
    assert analyze(trace.steps).verdict == "stop"


def test_recheck_after_a_new_edit_is_not_a_loop():
    trace = Trace()
    for index in range(8):
        trace.call("Edit", {"file": "app.js", "old": f"v{index}", "new": f"w{index}"}, "ok")
        trace.call("Bash", {"command": "node --check app.js"}, "OK")
    result = analyze(trace.steps)
    assert result.verdict == "ok"
    assert result.stall_score == 0


def test_check_failing_differently_after_each_new_edit_is_not_a_loop():
    trace = Trace()
    for name in ["add", "sub", "mul", "div", "mod", "pow"]:
        trace.call("write", {"path": "a.py", "content": f"v{name}"}, "written")
        trace.call("run_tests", {}, f"1 failed: test_{name}", status="error")
    assert analyze(trace.steps).verdict == "ok"


def test_check_failing_the_same_way_after_each_new_edit_is_stuck():
    trace = Trace()
    for index in range(6):
        trace.call("write", {"path": "a.py", "content": f"v{index}"}, "written")
        trace.call("run_tests", {}, f"1 failed: test_add in 0.{index}s", status="error")
    result = analyze(trace.steps)
    (finding,) = repeat_finding(result)
    assert (finding.severity, finding.count, finding.started_at) == ("stop", 6, 1)
    assert "the same way after each of the 4 change(s)" in finding.message  # at stop


def test_repeating_the_same_edit_does_not_rearm_the_check():
    trace = Trace()
    for _ in range(4):
        trace.call("Edit", {"file": "app.js", "old": "a", "new": "b"}, "ok")
        trace.call("lint", {"file": "app.js"}, "1 error")
    assert analyze(trace.steps).verdict != "ok"


def test_polling_tools_are_exempt_but_max_repeats_caps_anything():
    trace = Trace()
    for _ in range(6):
        trace.call("job_status", {"job": 1}, "running")
    assert analyze(trace.steps).verdict == "stop"
    polling = Policy.from_dict({"tools": {"job_status": {"polling": True}}})
    assert analyze(trace.steps, polling).verdict == "ok"
    capped = Policy.from_dict({"tools": {"job_status": {"polling": True, "max_repeats": 2}}})
    result = analyze(trace.steps, capped)
    assert result.verdict == "stop"
    (finding,) = result.findings
    assert (finding.threshold, finding.rule, finding.fired_at) == (2, 'tools."job_status"', 3)


def test_max_repeats_caps_even_calls_with_new_results():
    trace = Trace()
    trace.call("pay", {"amount": 10}, "receipt 1")
    trace.call("pay", {"amount": 10}, "receipt 2")
    policy = Policy.from_dict({"tools": {"pay": {"max_repeats": 0}}})
    assert analyze(trace.steps, policy).verdict == "stop"


def test_poll_message_suggests_one_blocking_wait():
    trace = Trace()
    for _ in range(3):
        trace.call("get_job_status", {"id": 7}, "pending")
    assert "blocking wait" in analyze(trace.steps).findings[0].message


# -- mutating failure -----------------------------------------------------------------------
def test_mutating_failure_warns_at_2():
    trace = Trace()
    for _ in range(2):
        trace.call("str_replace_editor", {"path": "a.py", "old": "x"}, "old_str not found", "error")
    result = analyze(trace.steps)
    (finding,) = result.findings
    assert (finding.detector, finding.severity, finding.threshold) == (
        "mutating_failure",
        "warn",
        2,
    )


def test_mutating_failure_needs_the_same_failure_and_no_change_between():
    trace = Trace()
    trace.call("Edit", {"path": "a.py", "old": "x"}, "old_str not found", "error")
    trace.call("Write", {"path": "a.py", "content": "x = 1"}, "written")
    trace.call("Edit", {"path": "a.py", "old": "x"}, "old_str not found", "error")
    assert analyze(trace.steps).verdict == "ok"
    non_mutating = Trace()
    for _ in range(2):
        non_mutating.call("lookup", {"id": 1}, "not found", "error")
    assert analyze(non_mutating.steps).verdict == "ok"


# -- read range -----------------------------------------------------------------------------
def test_rereading_one_range_between_other_ranges_warns_at_3():
    trace = Trace()
    for index in range(3):
        trace.call("Read", {"file_path": "big.py", "offset": 0, "limit": 100}, f"head v{index}")
        trace.call(
            "Read",
            {"file_path": "big.py", "offset": 100 * (index + 1), "limit": 100},
            f"part {index}",
        )
    result = analyze(trace.steps)
    assert "read_range" in detectors(result)
    finding = next(f for f in result.findings if f.detector == "read_range")
    assert finding.seqs == (0, 2, 4)


def test_reading_a_file_page_by_page_is_fine():
    trace = Trace()
    for index in range(20):
        trace.call(
            "Read", {"file_path": "big.py", "offset": 100 * index, "limit": 100}, f"lines {index}"
        )
    assert analyze(trace.steps).verdict == "ok"


# -- batch repeat ---------------------------------------------------------------------------
def test_same_batch_in_another_order_warns_at_3():
    trace = Trace()
    calls = [("grep", {"p": "a"}, "none"), ("ls", {"d": "src"}, "x.py"), ("cat", {"f": "x"}, "1")]
    for batch in range(3):
        order = calls if batch % 2 == 0 else calls[::-1]
        for tool, args, result in order:
            trace.call(tool, args, result, batch_id=f"m{batch}")
        trace.say(f"Let me look again ({batch}).")
    result = analyze(trace.steps)
    finding = next(f for f in result.findings if f.detector == "batch_repeat")
    assert (finding.severity, finding.count) == ("warn", 3)


def test_different_batches_are_fine():
    trace = Trace()
    for batch in range(5):
        trace.call("read", {"f": f"a{batch}"}, "x", batch_id=f"m{batch}")
        trace.call("read", {"f": f"b{batch}"}, "y", batch_id=f"m{batch}")
    assert "batch_repeat" not in detectors(analyze(trace.steps))


# -- oscillation ----------------------------------------------------------------------------
@pytest.mark.parametrize("cycle", ["AB", "ABC", "ABCDE"])
def test_cycles_warn_at_3_and_stop_at_5(cycle):
    warn = analyze(pattern(cycle * 3))
    assert detectors(warn) == {"oscillation"}
    assert warn.verdict == "warn"
    stop = analyze(pattern(cycle * 5))
    assert stop.verdict == "stop"
    (finding,) = stop.findings
    assert finding.count == 5
    assert "cycle of" in finding.message
    assert analyze(pattern(cycle * 2)).verdict == "ok"


def test_cycle_with_new_results_is_progress():
    assert analyze(pattern("AB" * 6, same_results=False)).verdict == "ok"


# -- result stall and near repeat -----------------------------------------------------------
def test_rephrased_searches_that_all_return_nothing():
    trace = Trace()
    for query in ["libfoo release", "libfoo 2.0 date", "when libfoo 2"]:
        trace.call("web_search", {"query": query}, "No results found.")
    result = analyze(trace.steps)
    (finding,) = result.findings
    assert (finding.detector, finding.severity, finding.count) == ("result_stall", "warn", 3)
    assert "another source" in finding.message


def test_edits_with_the_same_ack_are_not_a_stall():
    trace = Trace()
    for index in range(10):
        trace.call("Edit", {"file": f"f{index}.py", "old": "a", "new": "b"}, "File updated.")
    assert analyze(trace.steps).verdict == "ok"


def test_near_repeat_limit_9_then_10():
    trace = Trace()
    for limit, extra in [(9, ""), (10, " x"), (11, " y")]:
        trace.call(
            "list_issues",
            {"repo": "acme/app", "state": "open", "limit": limit},
            "issue 12 login broken; issue 15 crash on save; issue 17 slow search" + extra,
        )
    assert "near_repeat" in detectors(analyze(trace.steps))


def test_similar_args_with_different_results_are_not_near_repeats():
    trace = Trace()
    for page in range(6):
        trace.call("list_issues", {"repo": "acme/app", "page": page}, f"issues {page * 10}..")
    assert analyze(trace.steps).verdict == "ok"


# -- streak, message loop, budgets ----------------------------------------------------------
def test_same_tool_streak_is_info_only_at_8():
    trace = Trace()
    for index in range(12):
        trace.call("Edit", {"file": f"f{index}.py"}, f"edited {index}")
    result = analyze(trace.steps)
    assert result.verdict == "ok"
    (finding,) = result.findings
    assert (finding.detector, finding.severity, finding.threshold) == ("streak", "info", 8)


def test_monologue_warns_at_3():
    trace = Trace()
    for index in range(3):
        trace.say(f"I should check the config file first.{' ' * index}")
    result = analyze(trace.steps)
    (finding,) = result.findings
    assert (finding.detector, finding.severity, finding.tool) == ("message_loop", "warn", None)
    assert "call a tool" in finding.message


def test_repeated_text_with_tool_calls_between_is_fine():
    trace = Trace()
    for index in range(4):
        trace.say("Let me check the next file.")
        trace.call("read", {"path": f"f{index}"}, f"content {index}")
    assert analyze(trace.steps).verdict == "ok"


def test_budgets_are_off_unless_set():
    trace = Trace()
    for index in range(30):
        trace.call("read", {"path": f"f{index}"}, f"c{index}", tokens_in=1000, cost=0.5)
    assert analyze(trace.steps).verdict == "ok"
    policy = Policy.from_dict(
        {
            "defaults": {"max_steps": 20, "max_tokens": 10_000, "max_cost": 5.0},
            "tools": {"read": {"quota": 25}},
        }
    )
    result = analyze(trace.steps, policy)
    fired = {f.signature: f for f in result.findings}
    assert fired["budget:steps"].fired_at == 20
    assert fired["budget:tokens"].fired_at == 10
    assert fired["budget:cost"].fired_at == 10
    assert fired["quota:read"].fired_at == 25
    assert fired["quota:read"].rule == 'tools."read"'
    assert result.verdict == "stop"


# -- ledger, stall score, waste -------------------------------------------------------------
def test_ledger_records_what_each_call_repeats():
    trace = Trace()
    trace.call("a", {"x": 1}, "r")
    trace.call("b", {"x": 1}, "r")
    trace.call("a", {"x": 1}, "r")
    trace.call("a", {"x": 1}, "other")
    result = analyze(trace.steps)
    assert [(e.seq, e.repeat_of, e.count) for e in result.ledger] == [
        (0, None, 1),
        (1, None, 1),
        (2, 0, 2),
        (3, None, 1),
    ]
    assert result.stall_score == 0.25
    assert result.ledger[0].progress_signature.startswith(result.ledger[0].signature + ":")


def test_healthy_run_trends_to_zero_and_series_is_bounded():
    trace = Trace()
    for index in range(5000):
        trace.call("read", {"path": f"f{index}"}, f"c{index}")
    result = analyze(trace.steps)
    assert result.stall_score == 0
    assert 50 <= len(result.stall_series) <= 201
    assert result.stall_series[-1][0] == 4999


def test_waste_counts_steps_tokens_cost_and_time_after_the_first_warn():
    trace = Trace()
    for index in range(6):
        trace.call(
            "search",
            {"q": "x"},
            "same",
            tokens_in=100,
            tokens_out=10,
            cost=0.01,
            started_at=1000.0 + index,
            ended_at=1000.5 + index,
        )
    result = analyze(trace.steps)
    (finding,) = result.findings
    assert finding.fired_at == 2
    assert finding.waste == detection.Waste(steps=3, tokens=330, cost=0.03, seconds=3.0)
    assert result.waste == finding.waste


def test_waste_is_none_where_the_trace_has_no_figures():
    result = analyze(pattern("AAAA"))
    assert result.waste == detection.Waste(steps=1, tokens=None, cost=None, seconds=None)


def test_finding_to_dict_is_json_ready():
    import json

    finding = analyze(pattern("AAA")).findings[0]
    data = json.loads(json.dumps(finding.to_dict()))
    assert data["seqs"] == [0, 1, 2] and data["rule"] == "defaults"
    assert data["waste"]["steps"] == 0


def test_waste_is_the_loop_s_own_iterations_not_what_follows_the_recovery():
    """A real SWE-agent run fixed its edit on the next try: the fix, the re-run and the
    submit after it are not the loop's waste."""
    trace = Trace()
    for _ in range(6):
        trace.call("read_file", {"path": "missing.txt"}, "FileNotFoundError", status="error")
    for index in range(8):  # the agent moved on: other calls, each new
        trace.call("bash", {"command": f"pytest -k t{index}"}, f"{index} passed")
    result = analyze(trace.steps)
    (finding,) = [f for f in result.findings if f.detector == "repeat"]
    assert finding.fired_at == 2 and finding.seqs[-1] == 5
    assert finding.waste.steps == 3  # iterations 4, 5 and 6, not the 8 calls after them
    assert result.waste.steps == 3


def test_loops_that_overlap_count_their_steps_once_in_the_run_s_waste():
    trace = Trace()
    for tool in "aabababbabbaab":  # two failing calls, interleaved without a cycle
        trace.call(f"tool_{tool}", {"x": 1}, f"{tool} failed", status="error")
    result = analyze(trace.steps)
    flagged = [f for f in result.findings if f.severity != "info"]
    assert {"tool_a", "tool_b"} <= {f.tool for f in flagged}
    for finding in flagged:  # each its own iterations after the warn, up to its last
        if finding.detector in ("repeat", "blocker") and result.findings[finding.loop] != finding:
            assert finding.waste.steps == finding.seqs[-1] - finding.fired_at
    spans = [
        set(range(f.fired_at + 1, f.seqs[-1] + 1)) for f in flagged if f.detector != "oscillation"
    ]
    assert result.waste.steps == len(set().union(*spans)) < sum(map(len, spans))


def test_detectors_that_fire_over_the_same_calls_are_one_loop_led_by_the_worst():
    """A failing write_file seen by mutating_failure and repeat is one loop, not two."""
    trace = Trace()
    for _ in range(6):
        trace.call("write_file", {"path": "a.py"}, "PermissionError: a.py", status="error")
    trace.call("read_file", {"path": "b.py"}, "b")
    result = analyze(trace.steps)
    flagged = [f for f in result.findings if f.severity != "info"]
    assert {f.detector for f in flagged} == {"mutating_failure", "repeat"}
    assert {f.loop for f in flagged} == {0}  # the first to reach stop leads
    lead = result.findings[0]
    assert lead.waste == result.waste  # the loop's waste, each step once


def test_a_message_shows_the_repeated_arguments_as_json_not_python_text():
    trace = Trace()
    for _ in range(5):
        trace.call("search", {"q": "it's", "exact": True, "page": None}, {"hits": []})
    (finding,) = [f for f in analyze(trace.steps).findings if f.severity == "stop"]
    assert '{"q": "it\'s", "exact": true, "page": null}' in finding.message
    assert "{'q'" not in finding.message and "True" not in finding.message
