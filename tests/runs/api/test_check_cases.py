"""Issue 23's cases through the live check `POST /api/check` (the Done means: "in
/api/check" too): unknown values are never the same call, a failure still counts without its
text, and two sub-agents in lanes of their own never see each other's calls."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def check(api, calls: list[dict], tool: str, args=None) -> dict:
    body = {"calls": calls, "tool": tool, "args": args}
    response = api.post("/api/check", body, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def test_calls_recorded_with_names_only_never_make_the_next_one_a_loop(api):
    calls = [{"role": "user", "text": "read the notes"}] + [{"tool": "read_file"}] * 9
    answer = check(api, calls, "read_file")
    assert answer["verdict"] == "ok", answer
    # the same calls with their (equal) arguments and results known are a loop
    known = [calls[0]] + [{"tool": "read_file", "args": {}, "result": "same"}] * 9
    assert check(api, known, "read_file", {})["verdict"] == "stop"


def test_the_same_failing_call_without_its_error_text_is_still_stopped(api):
    failing = {"tool": "read_file", "args": {"path": "missing.txt"}, "status": "error"}
    answer = check(api, [failing] * 6, "read_file", {"path": "missing.txt"})
    assert answer["verdict"] == "stop", answer


def test_the_same_call_once_in_each_of_two_sub_agents_is_no_repeat(api):
    search = {"tool": "search", "args": {"q": "x"}, "result": "nothing found"}
    calls = [
        {"role": "user", "text": "look it up"},
        {**search, "lane": "agent:a"},
        {**search, "lane": "agent:b"},
    ]
    assert check(api, calls, "search", {"q": "x"})["verdict"] == "ok"
    # one agent's own repeats are (the same calls in the main lane)
    main = [{"role": "user", "text": "look it up"}] + [search] * 4
    assert check(api, main, "search", {"q": "x"})["verdict"] in ("warn", "stop")
