"""loopboard.guard: an agent's tool calls checked before they run, locally or on a live run."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopboard.guard import Guard, LoopDetected

ROOT = Path(__file__).resolve().parent.parent


class Tool:
    """A tool that counts its calls and always fails the same way."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, q: str) -> dict:
        self.calls += 1
        return {"error": "timed out"}


def failing(result: object) -> bool:
    return isinstance(result, dict) and "error" in result


def test_local_guard_stops_a_looping_tool_at_the_engines_stop_threshold():
    guard = Guard.local(is_error=failing)
    search = Tool()
    answers = [guard.call("search", {"q": "same"}, search) for _ in range(8)]
    # the default policy stops the fifth identical failing call: four ran, then none
    assert search.calls == 4 and guard.stopped == 4
    assert answers[0] == {"error": "timed out"}
    assert answers[4] == guard.last.message and "search already failed 4 times" in answers[4]
    assert guard.last.verdict == "stop" and guard.last.findings[0]["detector"] == "repeat"


def test_local_guard_reads_a_policy_file(tmp_path):
    path = tmp_path / "loopboard.toml"
    path.write_text("[defaults]\nwarn = 2\nstop = 3\n")
    guard = Guard.local(path, is_error=failing)
    search = Tool()
    for _ in range(6):
        guard.call("search", {"q": "same"}, search)
    assert search.calls == 2 and guard.stopped == 4


def test_local_guard_lets_a_healthy_loop_through():
    guard = Guard.local()

    @guard.tool
    def search(q: str, limit: int = 3) -> str:
        return f"results for {q}"

    answers = [search(f"query {i}") for i in range(50)]
    assert answers == [f"results for query {i}" for i in range(50)]
    assert guard.stopped == 0 and guard.last.verdict == "ok"
    assert search.__name__ == "search"


def test_stop_can_raise_loop_detected_instead():
    guard = Guard.local(on_stop="raise", is_error=failing)
    search = Tool()
    with pytest.raises(LoopDetected) as raised:
        for _ in range(8):
            guard.call("search", {"q": "same"}, search)
    assert search.calls == 4
    assert raised.value.tool == "search" and raised.value.verdict.verdict == "stop"
    assert "Retrying will not make it succeed" in str(raised.value)


def test_warn_runs_the_tool_and_appends_the_message_or_calls_back():
    guard = Guard.local()
    lookup = guard.tool(lambda q: "same page", name="lookup")
    answers = [lookup("x") for _ in range(4)]
    assert answers[0] == "same page"
    warned = [a for a in answers if a.startswith("same page\n\n[loopboard] ")]
    assert warned and guard.last.verdict == "warn"

    heard = []
    quiet = Guard.local(on_warn=lambda tool, verdict: heard.append((tool, verdict.verdict)))
    fetch = quiet.tool(lambda q: {"page": 1}, name="fetch")
    assert [fetch("x") for _ in range(4)] == [{"page": 1}] * 4
    assert heard and heard[0] == ("fetch", "warn")

    plain = Guard.local(on_warn="ignore")
    tools = plain.tools({"fetch": lambda q: {"page": 1}})
    assert [tools["fetch"](q="x") for _ in range(4)] == [{"page": 1}] * 4


def test_a_tool_that_raises_is_recorded_as_failed_and_the_error_goes_on():
    guard = Guard.local()

    @guard.tool
    def read(path: str) -> str:
        raise FileNotFoundError(path)

    for _ in range(4):
        with pytest.raises(FileNotFoundError):
            read("missing.txt")
    assert read("missing.txt").startswith("[loopboard guard] read already failed 4 times")


def test_a_user_message_starts_a_new_turn():
    guard = Guard.local()
    fetch = guard.tool(lambda q: "same page", name="fetch")
    for _ in range(3):
        fetch("x")
    assert guard.check("fetch", {"q": "x"}).verdict == "warn"
    guard.message("user", "try again please")
    assert guard.check("fetch", {"q": "x"}).verdict == "ok"


def test_remote_guard_fails_open_when_the_server_is_down(capfd):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    search = Tool()
    with Guard.remote("s-1", url=f"http://127.0.0.1:{port}", key="lb_x", timeout=0.5) as guard:
        answers = [guard.call("search", {"q": "same"}, search) for _ in range(6)]
    assert search.calls == 6 and guard.stopped == 0
    assert answers == [{"error": "timed out"}] * 6
    err = capfd.readouterr().err
    assert err.count("loopboard: not checked, going on") == 1


def test_the_openai_loop_example_is_stopped_by_the_local_guard():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "guard_openai_loop.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "loopboard stopped the loop: 1 call(s) not made" in done.stdout
    assert "turn 5: web_search({'q': 'loopboard docs'}) -> stop" in done.stdout
    assert "model: I am stuck and will stop here." in done.stdout


@pytest.mark.django_db(transaction=True)
def test_remote_guard_stops_a_loop_on_the_live_run_and_ends_it(live_server, key, project):
    from runs.models import Run

    search = Tool()
    with Guard.remote("agent-7", url=live_server.url, key=key, is_error=failing) as guard:
        guard.message("user", "find it")
        answers = [guard.call("search", {"q": "same"}, search) for _ in range(7)]
        healthy = guard.call("fetch", {"url": "a"}, lambda url: f"page {url}")
    assert search.calls == 4 and guard.stopped == 3
    assert "search already failed 4 times" in answers[4]
    assert healthy == "page a"
    run = Run.objects.get(project=project, external_id="agent-7")
    steps = list(run.steps.order_by("seq").values_list("kind", "tool", "status"))
    assert steps[0][0] == "user" and len(steps) == 6  # the message, 4 failures, 1 success
    assert steps[1:5] == [("tool_call", "search", "error")] * 4
    assert not run.live  # ended on leaving the with block: analyzed like any other run


@pytest.mark.django_db(transaction=True)
def test_a_remote_guard_that_made_no_call_ends_quietly(live_server, key, capfd):
    with Guard.remote("never-called", url=live_server.url, key=key) as guard:
        assert guard.check("search", {"q": "x"}).verdict == "ok"
    assert capfd.readouterr().err == ""


@pytest.mark.django_db(transaction=True)
def test_the_openai_loop_example_is_stopped_on_a_live_run(live_server, key, project):
    from runs.models import Run

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "guard_openai_loop.py"), "--remote"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "LOOPBOARD_URL": live_server.url,
            "LOOPBOARD_API_KEY": key,
            "LOOPBOARD_SESSION_ID": "example-1",
            "PATH": "/usr/bin:/bin",
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loopboard stopped the loop: 1 call(s) not made" in done.stdout
    assert done.stderr == ""
    run = Run.objects.get(project=project, external_id="example-1")
    assert run.steps.filter(kind="tool_call").count() == 4 and not run.live


def test_the_openai_agents_example_is_stopped_by_the_local_guard():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "guard_openai_agents.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loopboard stopped the loop: 1 call(s) not made" in done.stdout
    assert "web_search -> '[loopboard guard] web_search already failed 4 times" in done.stdout
    assert "model: I am stuck and will stop here." in done.stdout


def test_remote_guard_fails_open_at_its_deadline_on_a_server_that_trickles(capfd):
    from tests.cli.test_hook_install import Trickle

    trickle = Trickle()  # a real local server answering one byte a second
    search = Tool()
    try:
        started = time.monotonic()
        guard = Guard.remote("slow", url=trickle.url, key="lb_x", timeout=1.0)
        answer = guard.call("search", {"q": "x"}, search)
        elapsed = time.monotonic() - started
    finally:
        trickle.close()
    assert answer == {"error": "timed out"} and search.calls == 1  # the call went on, unchecked
    assert 1.9 <= elapsed < 3.5, elapsed  # the check and the record: one deadline each
    assert "not checked, going on" in capfd.readouterr().err
