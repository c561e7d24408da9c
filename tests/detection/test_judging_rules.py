"""The judging rules, each case written from the text of a loop misjudged on a real run.

Every test names the case it came from: "a volatile id inside a result" (a LangGraph
ToolMessage), and the three rules seen wrong on real runs (a result_stall on a sweep, a
validation error echoing its input, a near_repeat over reads whose results are unknown).
"""

from __future__ import annotations

import json

import pytest

from detection import analyze
from detection.detectors.similarity import carries_nothing, retargets
from detection.keys import error_fault, value_digest

from .helpers import Trace, detectors


def tool_message(call_id: str, content: str, message_id: str | None = None) -> str:
    """A LangGraph tool result as OpenInference records it: the serialised ToolMessage."""
    data = {
        "content": content,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "tool",
        "name": "run_query",
        "id": message_id,
        "tool_call_id": call_id,
        "artifact": None,
        "status": "success",
    }
    return json.dumps({"type": "tool", "data": data})


# -- a volatile id inside a result: the result compares by its content ----------------------
def test_seven_identical_successful_langgraph_calls_are_a_success_loop():
    """Case: seven identical successful calls whose ToolMessages differ only in the call's
    own id (``tool_call_id``) are one loop, flagged on a plain chain of steps."""
    trace = Trace()
    for n in range(7):
        trace.call(
            "run_query", {"sql": "select count(*) from users"}, tool_message(f"call_{n}", "42")
        )
    digests = {value_digest(step.result) for step in trace.steps}
    assert len(digests) == 1
    result = analyze(trace.steps)
    assert "repeat" in detectors(result)
    assert result.verdict == "stop"


def test_a_toolmessage_with_a_message_id_or_inside_messages_compares_by_content():
    """Case: the same ToolMessage with a generated message id (LangGraph's reducer gives one)
    or wrapped in ``{"messages": [...]}`` still compares by what it says."""
    one = tool_message("call_1", "42", "3f1c0d7e-0d9b-4c1e-9a51-1f0e9b7c2a11")
    two = tool_message("call_2", "42", "a0b1c2d3-0d9b-4c1e-9a51-1f0e9b7c2a11")
    assert value_digest(one) == value_digest(two)
    wrapped = [{"messages": [json.loads(text)]} for text in (one, two)]
    assert value_digest(wrapped[0]) == value_digest(wrapped[1])


def test_toolmessages_with_different_content_differ():
    """Case: different content is progress, whatever ids the messages share."""
    assert value_digest(tool_message("call_1", "42")) != value_digest(tool_message("call_1", "43"))
    trace = Trace()
    for n in range(7):
        trace.call("run_query", {"sql": "select count(*) from users"}, tool_message("c", str(n)))
    assert "repeat" not in detectors(analyze(trace.steps))


def test_an_id_outside_a_message_about_a_call_is_content():
    """Only a message that names the call it answers loses its ``id`` and ``run_id``: a
    tool's own ``id`` or ``run_id`` argument (``get_workflow_run``) is what it asks about."""
    assert value_digest({"run_id": 1}) != value_digest({"run_id": 2})
    assert value_digest({"id": "a1"}) != value_digest({"id": "b2"})
    inner = {"tool_call_id": "c", "content": {"id": 1}}
    assert value_digest(inner) != value_digest({**inner, "content": {"id": 2}})


# -- result_stall: results that carry no information --------------------------------------
def test_a_sweep_over_flights_with_one_short_answer_each_is_not_a_stall():
    """Case: ``get_flight_status`` for four different flights, each answering "available"."""
    trace = Trace()
    for flight in ["AA100", "BA2490", "LH401", "UA88"]:
        trace.call("get_flight_status", {"flight": flight, "date": "2026-12-02"}, "available")
    assert "result_stall" not in detectors(analyze(trace.steps))
    assert analyze(trace.steps).verdict == "ok"


def test_different_targets_that_all_find_nothing_are_a_stall():
    """Case: results that carry no information (not found) for different arguments."""
    trace = Trace()
    for flight in ["AA100", "BA2490", "LH401", "UA88"]:
        trace.call("get_flight_status", {"flight": flight}, "Flight not found.")
    assert "result_stall" in detectors(analyze(trace.steps))


def test_zero_hits_and_the_same_error_in_words_are_stalls():
    """Case: zero hits ({"results": [], "total": 0}) and the same error text, for
    rephrased searches, are stalls."""
    for answer in [{"results": [], "total": 0}, "Error: search index unavailable"]:
        trace = Trace()
        for query in ["libfoo release", "libfoo 2.0 date", "when libfoo 2"]:
            trace.call("web_search", {"query": query}, answer)
        assert "result_stall" in detectors(analyze(trace.steps)), answer


def test_near_duplicate_arguments_with_one_informative_answer_are_a_stall():
    """Case: the rule also covers near-duplicate arguments: rephrasing a query that keeps
    bringing back the same page is a stall even though the page says something."""
    trace = Trace()
    page = "libfoo changelog: 1.9 fixes the parser; 1.8 adds streaming."
    for query in ["libfoo 2.0 release date", "libfoo version 2.0 released", "libfoo 2 date"]:
        trace.call("web_search", {"query": query}, page)
    assert "result_stall" in detectors(analyze(trace.steps))


@pytest.mark.parametrize(
    ("result", "nothing"),
    [
        ("", True),
        ("No results found.", True),
        ("0 matches", True),
        ('{"items": [], "count": 0}', True),
        ({"error": "rate limited"}, True),
        ([], True),
        ("available", False),
        ("no", False),
        ({"available": False}, False),
        ({"status": "on time", "gate": "B4"}, False),
        ("x" * 400 + " not found", False),
    ],
)
def test_what_carries_nothing(result, nothing):
    assert carries_nothing(result) is nothing


def test_what_retargets():
    assert retargets({"flight": "BA1"}, {"flight": "AA1"})
    assert retargets({"path": "src/b.py"}, {"path": "src/a.py"})
    assert not retargets({"query": "libfoo 2 date"}, {"query": "libfoo release"})
    assert not retargets({"q": "x y", "limit": 10}, {"q": "x y", "limit": 9})
    assert retargets('{"id": "k2"}', '{"id": "k1"}')
    assert retargets({"q": "status of flight BA2490"}, {"q": "status of flight AA100"})
    assert not retargets({"q": "when libfoo 2"}, {"q": "libfoo 2.0 date"})


# -- blocker: a validation error's echo of the input -------------------------------------
def booking_error(sent: dict) -> str:
    return (
        "1 validation error for BookingRequest\npayment_id\n  Field required [type=missing, "
        f"input_value={sent!r}, input_type=dict]\n    For further information visit "
        "https://errors.pydantic.dev/2.11/v/missing"
    )


BOOKINGS = [
    {"flight": "AA100", "passenger": "Ann Lee"},
    {"flight": "AA100", "passenger": "Ann Lee", "seat": "12A"},
    {"flight": "AA100", "passengers": [{"name": "Ann Lee", "age": 34}], "card": "4111"},
]


def test_three_failed_bookings_missing_payment_id_are_one_blocker():
    """Case: three failed bookings, each "Field required" on ``payment_id`` with different
    input echoed (``input_value=…``), are one blocker."""
    keys = {error_fault(booking_error(sent), {"booking": sent}).key for sent in BOOKINGS}
    assert len(keys) == 1
    (key,) = keys
    assert "payment_id" in key and "input_value" not in key and "pydantic" not in key
    trace = Trace()
    for sent in BOOKINGS:
        trace.call("book_flight", {"booking": sent}, booking_error(sent), status="error")
    result = analyze(trace.steps)
    assert "blocker" in detectors(result)
    (finding,) = [f for f in result.findings if f.detector == "blocker"]
    assert finding.count == 3


def test_a_validation_error_on_another_field_is_another_blocker():
    """Fixing ``payment_id`` and then missing ``seat`` is progress: the field stays."""
    other = booking_error({}).replace("payment_id", "seat")
    assert error_fault(other).key != error_fault(booking_error({})).key


# -- near_repeat: known results, nearly the same -----------------------------------------
def test_reads_of_six_files_in_one_folder_with_unknown_results_are_not_a_near_repeat():
    """Case: reads of six different files in one folder whose results the trace does not
    carry (the result-less copies of a chat export) are not a near repeat."""
    trace = Trace()
    for name in ["models", "views", "urls", "forms", "admin", "tests"]:
        trace.call("read_file", {"path": f"/repo/app/{name}.py", "limit": 200}, None)
    result = analyze(trace.steps)
    assert not {"near_repeat", "result_stall"} & detectors(result, at_least="info")
    assert result.verdict == "ok"


def test_unknown_results_for_different_arguments_are_no_stall():
    """Case: hook records without results (Cursor): six different calls, no result each."""
    trace = Trace()
    for n in range(6):
        trace.call("grep", {"pattern": f"def handler_{n}"}, None)
    assert "result_stall" not in detectors(analyze(trace.steps), at_least="info")


def test_reads_of_one_folder_with_nearly_the_same_known_results_still_are():
    """The rule keeps what it is for: nearly the same arguments and nearly the same
    (known) results."""
    trace = Trace()
    listing = "issue 12 login broken; issue 15 crash on save; issue 17 slow search"
    for limit, extra in [(9, ""), (10, " x"), (11, " y")]:
        trace.call(
            "list_issues", {"repo": "acme/app", "state": "open", "limit": limit}, listing + extra
        )
    assert "near_repeat" in detectors(analyze(trace.steps))
