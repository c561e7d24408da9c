"""Native JSONL: edge cases and a round-trip property (write Steps as native JSONL, read back)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection.model import Step
from runs.importers import iter_runs
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
IDS = st.none() | st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)
NUMBERS = st.none() | st.integers(0, 10**6)


@st.composite
def steps(draw) -> list[Step]:
    result = []
    for seq in range(draw(st.integers(1, 12))):
        given = draw(IDS)
        common = dict(
            seq=seq,
            id=None if given is None else f"{given}-{seq}",  # ids are unique within a run
            parent_id=draw(IDS),
            started_at=draw(st.none() | st.integers(10**9, 2 * 10**9).map(float)),
            tokens_in=draw(NUMBERS),
            tokens_out=draw(NUMBERS),
        )
        if draw(st.booleans()):
            result.append(
                Step(
                    kind="tool_call",
                    tool=draw(st.text(min_size=1, max_size=20)),
                    args=draw(st.dictionaries(st.text(max_size=8), JSON, max_size=4)),
                    result=draw(JSON),
                    status=draw(st.sampled_from(["ok", "error"])),
                    batch_id=draw(IDS),
                    **common,
                )
            )
        else:
            result.append(
                Step(
                    kind=draw(st.sampled_from(["user", "assistant", "system"])),
                    text=draw(st.text(max_size=50)),
                    **common,
                )
            )
    return result


def to_native(items: list[Step]) -> bytes:
    lines = []
    for step in items:
        event = {
            "seq": step.seq,
            "id": step.id,
            "parent_id": step.parent_id,
            "ts": step.started_at,
            "tokens_in": step.tokens_in,
            "tokens_out": step.tokens_out,
        }
        if step.kind == "tool_call":
            event |= {
                "type": "tool_call",
                "tool": step.tool,
                "args": step.args,
                "result": step.result,
                "status": step.status,
                "batch_id": step.batch_id,
            }
        else:
            event |= {"type": "message", "role": step.kind, "content": step.text}
        lines.append(json.dumps(event))
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=150, deadline=None)
@given(steps())
def test_native_round_trip(items):
    (run,) = iter_runs(to_native(items), source="rt.jsonl", format="native")
    assert run.steps == items


def parse(data: bytes, **kwargs):
    return list(iter_runs(data, source="n.jsonl", format="native", **kwargs))


def test_empty_file_fails():
    with pytest.raises(TraceError, match="empty"):
        parse(b"")


def test_invalid_lines_and_utf8_are_skipped_with_file_and_line():
    data = (
        b'{"type":"tool_call","tool":"f"}\n{"type": \n\xff\xfe\n{"type":"tool_call","tool":"g"}\n'
    )
    (run,) = parse(data)
    assert run.skipped == 2 and len(run.steps) == 2
    assert run.warnings[0].startswith("n.jsonl:2: invalid JSON")
    assert run.warnings[1] == "n.jsonl:3: invalid UTF-8 at byte 0"


def test_wrong_types_skip_the_line():
    (run,) = parse(
        b'{"type":"tool_call","tool":"f","tokens_in":"many"}\n{"type":"tool_call","tool":"g"}\n'
    )
    assert run.skipped == 1 and "tokens_in" in run.warnings[0]


def test_huge_strings_are_clipped_and_deep_lines_refused():
    big = json.dumps({"type": "tool_call", "tool": "f", "result": "x" * 500})
    deep = '{"type":"tool_call","tool":"f","args":' + "[" * 100 + "]" * 100 + "}"
    (run,) = parse(f"{big}\n{deep}\n".encode(), limits=Limits(max_value_chars=10))
    assert run.steps[0].result.endswith("…[truncated 490 chars]")
    assert run.skipped == 1 and "nested deeper" in run.warnings[0]


def test_duplicate_ids_are_made_unique_and_a_parent_outside_the_file_is_kept():
    data = (
        b'{"type":"tool_call","tool":"f","id":"a","parent_id":"gone"}\n'
        b'{"type":"tool_call","tool":"f","id":"a","parent_id":"a"}\n'
    )
    (run,) = parse(data)
    # two unanswered calls that share an id and name no message are two calls
    assert [(s.id, s.parent_id) for s in run.steps] == [("a", "gone"), ("a#2", "a")]
