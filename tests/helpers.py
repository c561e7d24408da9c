"""Small builders shared by the tests."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def native_jsonl(*events: dict) -> bytes:
    """Return native JSONL bytes for the given events."""
    return "".join(json.dumps(event) + "\n" for event in events).encode()


def call(tool: str, args: dict | None = None, result=None, status: str = "ok", **extra) -> dict:
    """Return one native tool_call event."""
    return {
        "type": "tool_call",
        "tool": tool,
        "args": args or {},
        "result": result,
        "status": status,
        **extra,
    }


def message(role: str, content: str, **extra) -> dict:
    return {"type": "message", "role": role, "content": content, **extra}


def looping_trace(times: int = 5, tool: str = "web_search") -> bytes:
    """A user question, then the same call with the same empty result `times` times."""
    return native_jsonl(
        message("user", "find it"),
        *[call(tool, {"query": "same thing"}, {"results": []}) for _ in range(times)],
    )


def healthy_trace() -> bytes:
    return native_jsonl(
        message("user", "fix the test"),
        call("read_file", {"path": "a.py"}, "x = 1"),
        call("edit_file", {"path": "a.py", "new": "x = 2"}, "ok"),
        call("bash", {"command": "pytest"}, "1 passed"),
    )


def hold_and_race(hold, race, *, wait: float = 0.5) -> list[BaseException]:
    """Run `hold()` in a thread inside a transaction that stays open after it returns; then
    run `race()` in a second thread and check that it waits (still running after `wait`
    seconds: blocked on a lock that `hold` took). Then commit `hold`'s transaction and let
    both finish. Each thread uses its own database connection (a `transaction=True` test).

    Returns what either thread raised (empty when both ran through); fails the test when
    `race` did not wait.
    """
    import threading

    from django.db import connection, transaction

    held, release, errors = threading.Event(), threading.Event(), []

    def holder() -> None:
        try:
            with transaction.atomic():
                hold()
                held.set()
                release.wait(10)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)
        finally:
            held.set()
            connection.close()

    def racer() -> None:
        try:
            race()
        except BaseException as exc:  # reported to the caller
            errors.append(exc)
        finally:
            connection.close()

    first, second = threading.Thread(target=holder), threading.Thread(target=racer)
    first.start()
    assert held.wait(10), "the holding transaction did not start"
    second.start()
    second.join(wait)
    waited = second.is_alive()
    release.set()
    first.join(10)
    second.join(10)
    assert waited or errors, "the second thread did not wait for the first's transaction"
    return errors


def at_once(send, bodies) -> list:
    """Call `send(body)` for each body in its own thread, all released at the same moment
    (each thread on its own database connection); return what the calls returned."""
    import threading

    from django.db import connection

    start = threading.Barrier(len(bodies))
    answers: list = []

    def one(body) -> None:
        try:
            start.wait()
            answers.append(send(body))
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers
