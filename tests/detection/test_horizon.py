"""A turn of any number of distinct calls costs the engine bounded memory: what a lane
remembers per call (made once, failing, files and ranges read, mutations) keeps at most
HORIZON keys, forgetting the older half (detectors/base.py), while a loop inside the horizon
is still found."""

from __future__ import annotations

from detection import Monitor, Step, analyze
from detection.detectors.base import HORIZON


def _distinct(start: int, count: int, tool: str = "read_file", status: str = "ok"):
    for n in range(start, start + count):
        yield Step(
            seq=n, kind="tool_call", id=f"s{n}", tool=tool, args={"path": f"src/m{n}.py"},
            result=f"contents {n}", status=status,
        )  # fmt: skip


def test_a_turn_of_many_distinct_calls_keeps_a_bounded_state():
    monitor = Monitor()
    calls = HORIZON + 1_000  # (one past HORIZON halves a map)
    for step in _distinct(0, calls):
        monitor.observe(step)
    for step in _distinct(calls, calls, tool="bash", status="error"):
        monitor.observe(step)
    for step in _distinct(2 * calls, calls, tool="Edit"):
        monitor.observe(step)
    lane = monitor._lanes[None]
    sizes = {
        "made once": len(lane.repeat.first_seq),
        "failing": len(lane.repeat.fails),
        "files": len(lane.reads.files),
        "ranges": len(lane.reads.ranges),
        "mutations": len(lane.mutations),
    }
    assert all(HORIZON // 2 <= size <= HORIZON for size in sizes.values()), sizes
    assert len(lane.repeat.first_epoch) == len(lane.repeat.first_rdig) == sizes["made once"]
    # what is kept is the newest: the last distinct call of each kind is remembered
    assert f"src/m{calls - 1}.py" in lane.reads.files
    assert monitor.tool_calls == 3 * calls


def test_a_loop_inside_the_horizon_is_found_and_the_oldest_calls_are_forgotten():
    """The same read five times, each after HORIZON / 8 other distinct calls, is a repeat; a
    call first made more than HORIZON distinct calls before is counted as a new call."""
    gap = HORIZON // 8
    steps, seq = [], 0
    for _ in range(5):
        steps.append(Step(seq=seq, kind="tool_call", tool="read_file",
                          args={"path": "README.md"}, result="the same text"))  # fmt: skip
        seq += 1
        steps.extend(_distinct(seq, gap))
        seq += gap
    found = [f for f in analyze(steps).findings if f.detector == "repeat"]
    assert found and found[0].count == 5 and found[0].seqs[0] == 0

    far = [Step(seq=0, kind="tool_call", tool="read_file", args={"path": "README.md"},
                result="the same text")]  # fmt: skip
    far.extend(_distinct(1, HORIZON + 1))
    far.append(Step(seq=HORIZON + 2, kind="tool_call", tool="read_file",
                    args={"path": "README.md"}, result="the same text"))  # fmt: skip
    far.append(Step(seq=HORIZON + 3, kind="tool_call", tool="read_file",
                    args={"path": "README.md"}, result="the same text"))  # fmt: skip
    repeats = [f for f in analyze(far).findings if f.detector == "repeat"]
    assert all(0 not in f.seqs for f in repeats), repeats
