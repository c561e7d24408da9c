"""Loop fingerprints: the same loop gets the same one in every run, a different loop another.

The runs are analyzed by the engine, so each property holds for what the detectors find.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import detection
from detection import fingerprints

WORD = st.text("abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)
ID = st.text("0123456789abcdef", min_size=8, max_size=32)
NUMBER = st.integers(min_value=1, max_value=10**6)
TS = st.floats(min_value=1.6e9, max_value=1.9e9, allow_nan=False)
# A repeat of web_search({query, request_id, limit}): pinned, as a change orphans every issue.
PINNED = "0e8f7de1dbd4d0c8"
TOOLS = ("web_search", "bash", "read_file", "fetch_url")
ERRORS = ("PermissionError", "FileNotFoundError", "TimeoutError", "ValueError")


def steps_of(calls: list[tuple[str, object, object, str]], start: float = 1.7e9) -> list:
    steps = [detection.Step(seq=0, kind="user", text="do the task", started_at=start)]
    for seq, (tool, args, result, status) in enumerate(calls, start=1):
        steps.append(
            detection.Step(
                seq=seq,
                kind="tool_call",
                tool=tool,
                args=args,
                result=result,
                status=status,
                started_at=start + seq,
                ended_at=start + seq + 0.5,
            )  # fmt: skip
        )
    return steps


def prints(steps: list) -> dict[str, str]:
    """Return detector -> fingerprint of the run's warn/stop findings."""
    found = detection.analyze(steps).findings
    return {f.detector: fingerprints.fingerprint(f, steps) for f in found if f.severity != "info"}


def repeat_run(tool: str, query: str, request_id: str, ts: float) -> list:
    args = {"query": query, "request_id": request_id, "limit": 10}
    return steps_of([(tool, args, {"results": []}, "ok")] * 5, start=ts)


def blocker_run(error: str, name: str, number: int, ts: float, tool: str = "bash") -> list:
    calls = [
        (tool, {"command": f"python {name}_{i}.py --n {number + i}"},
         f"Traceback (most recent call last):\n  File \"/home/{name}/x.py\", line {number + i}\n"
         f"{error}: cannot open '/tmp/{name}/{number + i}.txt' (at 0x{number:x}{i})", "error")
        for i in range(6)
    ]  # fmt: skip
    return steps_of(calls, start=ts)


def cycle_run(first: str, second: str, a: str, b: str, ts: float) -> list:
    calls = []
    for _ in range(5):
        calls.append((first, {"path": f"/src/{a}.py"}, f"contents of {a}", "ok"))
        calls.append((second, {"path": f"/src/{b}.py"}, f"contents of {b}", "ok"))
    return steps_of(calls, start=ts)


@settings(max_examples=40, deadline=None)
@given(tool=st.sampled_from(TOOLS), q1=WORD, q2=WORD, r1=ID, r2=ID, t1=TS, t2=TS)
def test_a_repeat_keeps_its_fingerprint_whatever_the_query_ids_and_times(
    tool, q1, q2, r1, r2, t1, t2
):
    one, two = prints(repeat_run(tool, q1, r1, t1)), prints(repeat_run(tool, q2, r2, t2))
    assert "repeat" in one and one == two


@settings(max_examples=40, deadline=None)
@given(error=st.sampled_from(ERRORS), n1=WORD, n2=WORD, x1=NUMBER, x2=NUMBER, t1=TS, t2=TS)
def test_a_blocker_keeps_its_fingerprint_whatever_the_paths_numbers_and_ids(
    error, n1, n2, x1, x2, t1, t2
):
    one = prints(blocker_run(error, n1, x1, t1))
    two = prints(blocker_run(error, n2, x2, t2))
    assert "blocker" in one and one["blocker"] == two["blocker"]


def test_a_path_holding_an_error_word_keeps_the_blocker_fingerprint():
    """Found by hypothesis in CI: "fail" in a traceback's path made the frame line count."""
    one = prints(blocker_run("TimeoutError", "lygatspef", 198411, 1.7e9))
    two = prints(blocker_run("TimeoutError", "afailygnv", 839756, 1.7e9))
    assert "blocker" in one and one["blocker"] == two["blocker"]


@settings(max_examples=30, deadline=None)
@given(a=WORD, b=WORD, c=WORD, d=WORD, t1=TS, t2=TS)
def test_a_cycle_keeps_its_fingerprint_whatever_the_files_and_where_it_starts(a, b, c, d, t1, t2):
    one = prints(cycle_run("read_file", "grep", a, b, t1))
    two = prints(cycle_run("grep", "read_file", c, d, t2))  # the same cycle, entered elsewhere
    assert "oscillation" in one and one["oscillation"] == two["oscillation"]


@settings(max_examples=30, deadline=None)
@given(tools=st.lists(st.sampled_from(TOOLS), min_size=2, max_size=2, unique=True), q=WORD)
def test_another_tool_is_another_fingerprint(tools, q):
    one, two = (prints(repeat_run(tool, q, "r1", 1.7e9)) for tool in tools)
    assert one["repeat"] != two["repeat"]


@settings(max_examples=30, deadline=None)
@given(errors=st.lists(st.sampled_from(ERRORS), min_size=2, max_size=2, unique=True), n=WORD)
def test_another_error_class_is_another_fingerprint(errors, n):
    one, two = (prints(blocker_run(error, n, 7, 1.7e9)) for error in errors)
    assert one["blocker"] != two["blocker"]


def test_another_cycle_is_another_fingerprint():
    assert (
        prints(cycle_run("read_file", "grep", "a", "b", 1.7e9))["oscillation"]
        != prints(cycle_run("read_file", "bash", "a", "b", 1.7e9))["oscillation"]
    )


def test_different_loops_of_one_run_have_different_fingerprints():
    steps = repeat_run("web_search", "q", "r", 1.7e9)
    steps += blocker_run("PermissionError", "x", 3, 1.7e9 + 100, tool="write_file")[1:]
    for seq, step in enumerate(steps):
        step.seq = seq
    found = prints(steps)
    assert {"repeat", "blocker"} <= found.keys()
    assert len(set(found.values())) == len(found)


def test_a_fingerprint_is_sixteen_hex_digits_and_stable_across_calls():
    steps = repeat_run("web_search", "q", "r", 1.7e9)
    [finding] = [f for f in detection.analyze(steps).findings if f.detector == "repeat"]
    mark = fingerprints.fingerprint(finding, steps)
    assert len(mark) == 16 and int(mark, 16) >= 0
    assert mark == fingerprints.fingerprint(finding, {s.seq: s for s in steps})
    assert mark == fingerprints.fingerprint(finding, steps[::-1]) == PINNED


def test_the_same_loop_without_its_steps_still_matches_itself():
    one, two = (repeat_run("web_search", q, "r", 1.7e9) for q in ("a", "b"))
    [f1], [f2] = ([f for f in detection.analyze(s).findings if f.detector == "repeat"]
                  for s in (one, two))  # fmt: skip
    assert fingerprints.fingerprint(f1) == fingerprints.fingerprint(f2)


@pytest.mark.parametrize(
    ("steps", "words"),
    [
        (repeat_run("web_search", "q", "r", 1.7e9), "`web_search` is called again"),
        (blocker_run("PermissionError", "x", 3, 1.7e9), "`bash` keeps hitting the same error"),
        (cycle_run("read_file", "grep", "a", "b", 1.7e9), "between `grep` → `read_file`"),
    ],
)
def test_describe_says_what_loops_in_words(steps, words):
    titles = [
        fingerprints.describe(f, steps)
        for f in detection.analyze(steps).findings
        if f.severity != "info"
    ]
    assert any(words in title for title in titles), titles


def test_an_empty_result_stall_reads_as_the_same_empty_result():
    calls = [("web_search", {"query": f"pg {q}"}, {"results": []}, "ok")
             for q in ("jit", "jit 18", "jit release", "jit notes", "jit news", "jit docs")]  # fmt: skip
    steps = steps_of(calls)
    titles = {
        f.detector: fingerprints.describe(f, steps) for f in detection.analyze(steps).findings
    }
    assert titles.get("result_stall") == (
        "`web_search` returns the same empty result for rephrased queries"
    ), titles
