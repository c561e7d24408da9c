"""A run of any length in bounded memory: the step spool (runs/importers/kit/spool.py).

These fail if a long single run is held whole again: the spool must write what leaves its
window and read back the very same steps, a native run must be read in the memory of the
window (tracemalloc), and a spooled run must finish (merge, ids, numbers, lanes) exactly as
the same run held whole.
"""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

import detection
from detection.model import Step
from runs.importers import iter_runs
from runs.importers.kit import spool
from runs.importers.kit.spool import HashSet, StepSpool


def _step(n: int) -> Step:
    return Step(
        seq=n,
        kind="tool_call",
        id=f"c{n}",
        tool="read",
        args={"path": f"src/{n}.py", "deep": [1, {"x": n}]},
        result=f"line {n}\n" * 3,
        status="error" if n % 7 == 0 else "ok",
        started_at=1.7e9 + n,
        tokens_in=n,
        cost=float("inf") if n == 5 else 0.5,  # what JSON cannot hold comes back too
    )


def test_the_spool_writes_what_leaves_its_window_and_reads_back_the_same_steps():
    steps = [_step(n) for n in range(1000)]
    spooled = StepSpool(window=16)
    for step in steps:
        spooled.append(step)
        assert spooled.in_memory < 2 * 16
    assert len(spooled) == 1000
    assert spooled.spilled >= 1000 - 2 * 16
    assert list(spooled) == steps
    assert list(spooled) == steps  # read again from the start
    assert spooled[-1] is steps[-1]
    with pytest.raises(IndexError):
        spooled[0]  # noqa: B018 - written: no longer in memory


def test_a_held_step_stays_in_memory_and_keeps_its_later_changes_in_its_place():
    spooled = StepSpool(window=4, hold=lambda step: step.result is None)
    waiting = Step(seq=0, kind="tool_call", id="slow", tool="Task", args={})
    spooled.append(waiting)
    for n in range(1, 100):
        spooled.append(_step(n))
    waiting.result, waiting.status = "done", "error"  # its result, 99 steps later
    read = list(spooled)
    assert read[0] is waiting and read[0].result == "done"
    assert [s.seq for s in read] == list(range(100))


def test_held_steps_are_bounded_and_the_oldest_are_written_as_they_were():
    spooled = StepSpool(window=4, hold=lambda step: step.result is None, max_held=3)
    waiting = [Step(seq=n, kind="tool_call", id=f"w{n}", tool="t") for n in range(50)]
    for step in waiting:
        spooled.append(step)
    assert spooled.in_memory <= 2 * 4 + 3
    assert [s.id for s in spooled] == [s.id for s in waiting]


def test_a_spool_sorted_by_seq_is_sorted_stably_a_chunk_at_a_time():
    rnd = random.Random(3)
    steps = [Step(seq=rnd.randint(0, 300), kind="user", text=str(n)) for n in range(2000)]
    spooled = StepSpool(window=8)
    spooled.extend(steps)
    assert list(spooled.sort_by_seq()) == sorted(steps, key=lambda s: s.seq)


def test_the_hash_set_grows_and_tells_members():
    seen = HashSet()
    assert all(seen.add(f"id{n}") for n in range(5000))
    assert not seen.add("id42")
    assert "id4999" in seen and "id5000" not in seen and len(seen) == 5000


def _native(n: int, seed: int) -> bytes:
    """A native run with what finishing a run must handle: copies of a call (by id, near
    each other), repeated ids, parents before and after their steps, sub-agent calls, lines
    out of order, loops."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        seq = i if rnd.random() > 0.05 else max(0, i - rnd.randint(1, 30))
        roll = rnd.random()
        if roll < 0.1:
            lines.append({"type": "message", "role": "user", "content": f"u{i}", "seq": seq})
            continue
        if roll < 0.15:
            line = {"type": "tool_call", "tool": "Task", "id": f"t{i}", "args": {"p": "x"}}
        else:
            line = {"type": "tool_call", "tool": rnd.choice(["read", "grep"]),
                    "id": f"c{max(0, i - rnd.randint(0, 15))}", "args": {"p": rnd.randint(0, 9)},
                    "status": rnd.choice(["ok", "error"])}  # fmt: skip
            if rnd.random() < 0.5:
                line["result"] = rnd.choice(["a", "b", None, {"x": 1}])
            if rnd.random() < 0.3:
                line["parent_id"] = rnd.choice([f"t{i - rnd.randint(-10, 10)}", f"c{i - 3}"])
            if rnd.random() < 0.2:
                line["batch_id"] = f"b{i // 3}"
        lines.append(line | {"seq": seq, "ts": 1.7e9 + i})
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def _read(data: bytes, monkeypatch, window: int):
    monkeypatch.setattr(spool, "WINDOW", window)
    (run,) = iter_runs(data, source="long.jsonl", format="native")
    return run


@pytest.mark.parametrize("seed", range(4))
def test_a_spooled_run_finishes_exactly_as_the_same_run_held_whole(monkeypatch, seed):
    data = _native(3000, seed)
    whole = _read(data, monkeypatch, 100_000)
    spooled = _read(data, monkeypatch, 40)
    assert isinstance(whole.steps, list)
    assert isinstance(spooled.steps, StepSpool) and spooled.steps.spilled > 2000
    assert list(spooled.steps) == whole.steps
    assert any(step.lane for step in whole.steps) and any("#" in str(s.id) for s in whole.steps)
    assert len(whole.steps) < 3000  # copies were merged
    assert detection.analyze(spooled).to_dict() == detection.analyze(whole).to_dict()


def test_a_long_native_run_is_read_in_the_memory_of_its_window(monkeypatch, tmp_path):
    """The peak of reading and analyzing a run grows with the window, not with the run."""
    result = "x" * 2000

    def write(n: int) -> str:
        path = tmp_path / f"run{n}.jsonl"
        with open(path, "w") as out:
            for i in range(n):
                line = {"type": "tool_call", "tool": "read", "args": {"path": f"f{i % 50}"}}
                out.write(json.dumps(line | {"result": f"{result}{i}"}) + "\n")
        return str(path)

    def peak(path: str) -> tuple[int, int]:
        monkeypatch.setattr(spool, "WINDOW", 64)
        tracemalloc.start()
        try:
            (run,) = iter_runs(path, format="native")
            analysis = detection.analyze(run)
            return tracemalloc.get_traced_memory()[1], analysis.steps
        finally:
            tracemalloc.stop()

    short, steps = peak(write(2_000))
    assert steps == 2_000
    long, steps = peak(write(20_000))  # 40 MB of results: held whole, a peak over 40 MB
    assert steps == 20_000
    assert long < 8 * 1024 * 1024, long
    assert long < 3 * short, (short, long)
