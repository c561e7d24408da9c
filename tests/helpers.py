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
