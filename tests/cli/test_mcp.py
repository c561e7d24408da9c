"""`loopboard mcp`: the MCP server's tools, called with the MCP SDK's own client against the
live test server."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from loopboard.cli.mcp import build_server
from tests.helpers import healthy_trace, looping_trace

TOOLS = {"check_next_call", "record_call", "recent_findings", "search_runs"}


def run(scenario):
    """Run a coroutine function to its end on a loop of its own (in a thread: an earlier test
    of the suite may have left this thread's loop marked as running)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, scenario()).result()


def call(server, name: str, arguments: dict) -> tuple[bool, dict | str]:
    """Call one tool through an in-process MCP client: (is_error, structured answer or text)."""

    async def scenario():
        async with Client(server) as client:
            return await client.call_tool(name, arguments)

    result = run(scenario)
    if result.is_error:
        return True, result.content[0].text
    return False, result.structured_content


@pytest.mark.django_db(transaction=True)
def test_search_runs_and_recent_findings_answer_from_the_project(
    live_server, key, project, process
):
    looping = process(project, looping_trace(6), name="loop.jsonl").runs.get()
    process(project, healthy_trace(), name="ok.jsonl")
    server = build_server(live_server.url, key)

    error, answer = call(server, "search_runs", {"verdict": "stop"})
    assert not error, answer
    assert answer["count"] == 1 and answer["runs"][0]["id"] == looping.pk
    assert answer["runs"][0]["url"] == f"{live_server.url}/runs/{looping.pk}/"
    error, answer = call(server, "search_runs", {"query": "web_search", "limit": 5})
    assert [run["id"] for run in answer["runs"]] == [looping.pk]
    error, answer = call(server, "search_runs", {})
    assert answer["count"] == 2

    error, answer = call(server, "recent_findings", {"run_id": looping.pk, "limit": 1})
    assert not error, answer
    assert answer["verdict"] == "stop" and len(answer["findings"]) == 1
    finding = answer["findings"][0]
    assert finding["detector"] == "repeat" and "web_search" in finding["message"]

    error, text = call(server, "recent_findings", {"run_id": 10**9})
    assert error and "no run" in text


@pytest.mark.django_db(transaction=True)
def test_a_bad_key_or_no_session_is_a_tool_error(live_server, key):
    error, text = call(build_server(live_server.url, "lb_nope"), "search_runs", {})
    assert error and "401" in text
    error, text = call(build_server(live_server.url, key), "check_next_call", {"tool": "x"})
    assert error and "no session" in text


def test_an_unreachable_server_is_a_tool_error_not_a_crash():
    server = build_server("http://127.0.0.1:9", "lb_x", timeout=0.5)
    error, text = call(server, "search_runs", {})
    assert error and "did not answer" in text


def test_a_server_that_trickles_is_cut_off_at_the_overall_deadline():
    import time

    from tests.cli.test_hook_install import Trickle

    trickle = Trickle()  # a real local server answering one byte a second
    try:
        server = build_server(trickle.url, "lb_x", timeout=1.0)
        started = time.monotonic()
        error, text = call(server, "check_next_call", {"tool": "x", "session_id": "s"})
        elapsed = time.monotonic() - started
    finally:
        trickle.close()
    assert error and "did not answer within 1 s" in text
    assert elapsed < 3, elapsed  # one deadline, not one per byte read


def test_loopboard_mcp_serves_its_tools_over_stdio(tmp_path):
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "loopboard"),
        args=["mcp", "--url", "http://127.0.0.1:9", "--key", "lb_x"],
        env={"HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)},
    )

    async def scenario():
        async with Client(params) as client:
            return await client.list_tools()

    listed = run(scenario)
    assert {tool.name for tool in listed.tools} == TOOLS
    check = next(tool for tool in listed.tools if tool.name == "check_next_call")
    assert set(check.input_schema["properties"]) == {"tool", "args", "session_id"}


@pytest.mark.django_db(transaction=True)
def test_check_next_call_and_recent_findings_follow_the_sessions_live_run(
    live_server, key, project, monkeypatch
):
    from loopboard.guard import Guard

    server = build_server(live_server.url, key)
    call_ = {"tool": "web_search", "args": {"q": "same"}, "session_id": "sess-1"}
    error, answer = call(server, "check_next_call", call_)
    assert not error and answer["verdict"] == "ok" and answer["message"] == ""
    error, answer = call(server, "recent_findings", {"session_id": "sess-1"})
    assert answer == {"run_id": None, "verdict": "ok", "findings": [], "stopped_calls": []}

    guard = Guard.remote("sess-1", url=live_server.url, key=key)  # the agent's own calls
    for _ in range(5):
        guard.record("web_search", {"q": "same"}, {"results": []})

    monkeypatch.setenv("LOOPBOARD_SESSION_ID", "sess-1")  # the session from the environment
    error, answer = call(server, "check_next_call", {"tool": "web_search", "args": {"q": "same"}})
    assert not error, answer
    assert answer["verdict"] == "stop" and "web_search" in answer["message"]
    assert answer["findings"][0]["detector"] == "repeat"
    error, answer = call(server, "recent_findings", {"limit": 5})
    assert not error, answer
    assert answer["verdict"] == "stop" and answer["findings"][0]["severity"] == "stop"
    assert answer["url"] == f"{live_server.url}/runs/{answer['run_id']}/"
    [stopped] = answer["stopped_calls"]  # the stop answer above: the call it told us not to make
    assert (stopped["tool"], stopped["args"], stopped["before_seq"]) == (
        "web_search", '{"q": "same"}', 5,
    )  # fmt: skip
    assert stopped["times"] == 1 and "web_search" in stopped["message"]


@pytest.mark.django_db(transaction=True)
def test_an_agent_guarded_by_mcp_alone_is_stopped_at_its_repeated_failing_call(
    live_server, key, project
):
    """Seven identical failing calls made through MCP only (no hook, no SDK): check before
    each, report each after; the loop is stopped, and the refusal is loopboard's words."""
    from runs.models import Run, StoppedCall

    server = build_server(live_server.url, key)
    call_ = {"tool": "read_file", "args": {"path": "missing.txt"}, "session_id": "mcp-only"}

    async def scenario():
        made, answers = 0, []
        async with Client(server) as client:
            for _ in range(7):
                check = (await client.call_tool("check_next_call", call_)).structured_content
                answers.append(check["verdict"])
                if check["verdict"] == "stop":
                    continue  # the agent obeys: the call is not made, not reported
                made += 1
                failed = {**call_, "result": "FileNotFoundError: missing.txt", "status": "error"}
                report = await client.call_tool("record_call", failed)
                assert not report.is_error, report.content
        return made, answers, check

    made, answers, last = run(scenario)
    assert made == 4 and answers[4:] == ["stop"] * 3
    assert last["message"].startswith("[loopboard guard] read_file already failed 4 times")
    live = Run.objects.get(project=project, external_id="mcp-only")
    assert list(live.steps.values_list("tool", "status")) == [("read_file", "error")] * 4
    [stopped] = StoppedCall.objects.filter(run=live)
    assert (stopped.before_seq, stopped.times) == (4, 3)


@pytest.mark.django_db(transaction=True)
def test_record_call_answers_what_fired_and_a_retried_report_is_stored_once(
    live_server, key, project
):
    from runs.models import Run

    server = build_server(live_server.url, key)
    same = {"tool": "search", "args": {"q": "x"}, "result": {"hits": []}, "session_id": "rec"}
    answers = [call(server, "record_call", {**same, "call_id": f"c{i}"}) for i in range(6)]
    assert all(not error for error, _ in answers)
    assert answers[0][1] == {"verdict": "ok", "message": "", "findings": []}
    fired = [a for _, a in answers if a["findings"]]
    assert fired and "search" in fired[0]["message"]
    error, again = call(server, "record_call", {**same, "call_id": "c5"})  # a retry
    assert not error and again["findings"] == []
    assert Run.objects.get(external_id="rec").step_count == 6


@pytest.mark.django_db(transaction=True)
def test_the_mcp_tools_follow_the_keys_scope_as_the_api_does(live_server, project):
    """A `read` key's server may ask check_next_call but not record a call (403, as the API
    answers it), and its stop writes no stopped call; an `ingest` key's may do both."""
    from runs.models import ApiKey, StoppedCall

    read = build_server(live_server.url, ApiKey.issue(project, "r", scope=ApiKey.Scope.READ)[1])
    ingest = build_server(live_server.url, ApiKey.issue(project, "i", scope="ingest")[1])
    failing = {"tool": "Bash", "args": {"command": "make"}, "result": "Error: 2", "status": "error"}
    error, text = call(read, "record_call", {**failing, "session_id": "s"})
    assert error and "403" in text and "'ingest' scope" in text
    for i in range(4):
        error, answer = call(
            ingest, "record_call", {**failing, "session_id": "s", "call_id": f"{i}"}
        )
        assert not error, answer
    check = {"tool": "Bash", "args": failing["args"], "session_id": "s"}
    error, answer = call(read, "check_next_call", check)
    assert not error and answer["verdict"] == "stop"
    assert not StoppedCall.objects.exists()
    error, answer = call(ingest, "check_next_call", check)
    assert not error and answer["verdict"] == "stop"
    assert StoppedCall.objects.count() == 1
