"""The JSONL reader: a line that holds two JSON objects gives both, with a warning."""

from __future__ import annotations

import io
import json

from runs.importers import iter_runs
from runs.importers.errors import Skips
from runs.importers.reading import DEFAULT_LIMITS, JsonlReader


def call(n: int) -> str:
    return json.dumps({"type": "tool_call", "tool": "grep", "args": {"q": n}, "result": n})


def test_two_objects_on_one_line_are_both_read_and_warned() -> None:
    data = f"{call(1)}\n{call(2)}{call(3)}\n{call(4)} {call(5)}\n".encode()
    skips = Skips()
    reader = JsonlReader(io.BytesIO(data), source="t.jsonl", limits=DEFAULT_LIMITS, skips=skips)
    values = list(reader)
    assert [(line, value["args"]["q"]) for line, value in values] == [
        (1, 1),
        (2, 2),
        (2, 3),
        (3, 4),
        (3, 5),
    ]
    assert skips.count == 0
    assert skips.warnings == [
        "t.jsonl:2: 2 JSON values on one line (a missing newline?); read each",
        "t.jsonl:3: 2 JSON values on one line (a missing newline?); read each",
    ]


def test_a_run_keeps_every_call_and_the_warning() -> None:
    data = f"{call(1)}{call(2)}\n".encode()
    (run,) = iter_runs(data, source="t.jsonl")
    assert [step.args for step in run.steps] == [{"q": 1}, {"q": 2}]
    assert run.skipped == 0 and "2 JSON values on one line" in run.warnings[0]


def test_garbage_after_an_object_is_still_an_invalid_line() -> None:
    data = f"{call(1)}\n{call(2)} trailing\n".encode()
    (run,) = iter_runs(data, source="t.jsonl")
    assert len(run.steps) == 1 and run.skipped == 1
    assert run.warnings[0].startswith("t.jsonl:2: invalid JSON")
