"""Measure how well findings say where a loop is: how soon after its start each one fires.

    .venv/bin/python bench/bench_localisation.py [--runs 40] [--seed 1]

Labeled runs: the looping fixtures of tests/data/detection/cases/ (their labels.json gives
each loop's iterations, by the seq of each one's first step), and generated runs, one loop
of each kind (exact repeats, identical failures, cycles, rephrased searches, nearly equal
calls, monologues, variant retries against one blocker: edits, builds, fetches; the same
check failing the same way after each edit; invalid turns) started at a random step after
healthy work, its iterations mixed with unrelated healthy calls where the kind allows.

For each labeled loop it takes the first warn-or-stop finding of the expected detector and
measures, in iterations of the loop:

- lateness: the iteration ``fired_at`` falls in, minus the detector's warn threshold (0: it
  fired on the iteration that crossed the threshold; the target is at most 1);
- start error: how many iterations ``started_at`` is off the labeled start (0: exact).

A loop no finding of its detector flagged is a miss. It prints one row per kind and the
totals, and exits 1 when a loop is missed or fires more than one iteration late.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import detection  # noqa: E402
from detection import Policy, Step, analyze  # noqa: E402

CASES = ROOT / "tests" / "data" / "detection" / "cases"
TARGET = 1  # iterations past the threshold


def load(path: Path) -> list[Step]:
    """Return a native JSONL fixture's steps (the fields the fixtures use)."""
    steps = []
    for seq, line in enumerate(path.read_text().splitlines()):
        record = json.loads(line)
        if record["type"] == "message":
            steps.append(Step(seq, record["role"], text=record["content"]))
        else:
            fields = {key: record.get(key) for key in ("tool", "args", "result")}
            steps.append(Step(seq, "tool_call", status=record.get("status", "ok"), **fields))
    return steps


# -- generated runs --------------------------------------------------------------------
class Builder:
    """Steps in order, with healthy, unrelated calls to mix in."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps: list[Step] = []

    def add(self, kind: str, **fields: object) -> int:
        seq = len(self.steps)
        self.steps.append(Step(seq, kind, **fields))  # type: ignore[arg-type]
        return seq

    def call(self, tool: str, args: object, result: object, status: str = "ok") -> int:
        return self.add("tool_call", tool=tool, args=args, result=result, status=status)

    def healthy(self, count: int) -> None:
        for _ in range(count):
            n = len(self.steps)
            pick = self.rng.randrange(4)
            if pick == 0:
                self.call("read_file", {"path": f"docs/page{n}.md"}, f"page {n} text")
            elif pick == 1:
                self.call("web_search", {"query": f"topic number {n}"}, f"{n} results")
            elif pick == 2:
                self.add("assistant", text=f"Noting finding {n} before going on.")
            else:
                self.call("grep", {"pattern": f"symbol_{n}", "path": "src"}, [f"src/m{n}.py:1"])


Loop = Callable[[Builder, int, bool], int]  # (builder, iteration, mix noise) -> its first seq


def repeat(b: Builder, i: int, mix: bool) -> int:
    return b.call("search_docs", {"query": "retry policy"}, "No matches.")


def failure(b: Builder, i: int, mix: bool) -> int:
    return b.call(
        "book_flight", {"flight": "LH 400"}, f"Error: seat map unavailable ({i})", "error"
    )


def cycle(b: Builder, i: int, mix: bool) -> int:
    first = b.call("open_tab", {"tab": "orders"}, "orders: none")
    b.call("open_tab", {"tab": "returns"}, "returns: none")
    return first


def stall(b: Builder, i: int, mix: bool) -> int:
    words = ["release", "date", "libfoo", "version", "when", "published", "2.0", "launch"]
    query = " ".join(b.rng.sample(words, 3)) + f" {i}"
    return b.call("web_search", {"query": query}, "No results found.")


def near(b: Builder, i: int, mix: bool) -> int:
    hits = "issue 12 login broken; issue 15 crash on save; issue 17 slow search"
    return b.call("list_issues", {"repo": "acme/app", "limit": 9 + i}, hits + " x" * (i % 2))


def monologue(b: Builder, i: int, mix: bool) -> int:
    return b.add("assistant", text="I should check the configuration file first." + " " * i)


def blocked_edit(b: Builder, i: int, mix: bool) -> int:
    old = f"def total(items{',' * (i % 3)}):\n{' ' * (2 + i)}return sum(items)"
    args = {"command": "str_replace", "path": "/repo/app.py", "old_str": old, "new_str": "x"}
    text = f"No replacement was performed, old_str `{old}` did not appear verbatim in /repo/app.py."
    return b.call("str_replace_editor", args, text, "error")


def blocked_build(b: Builder, i: int, mix: bool) -> int:
    tool = ["cmake ..", "make -j4", "ninja", "cmake --build .", "make", "meson compile"][i % 6]
    text = "bash: line 1: cd: /app/build: No such file or directory\nExit code: 1"
    return b.call("bash", {"command": f"cd /app/build && {tool}"}, text, "error")


def blocked_fetch(b: Builder, i: int, mix: bool) -> int:
    url = f"https://example.com/report?v={i}&ua={b.rng.randrange(10**6)}"
    text = f"HTTP Error 429: Too Many Requests for url: {url}"
    return b.call("fetch", {"url": url}, text, "error")


def same_check(b: Builder, i: int, mix: bool) -> int:
    first = b.call("edit_file", {"path": f"src/mod_{i}.py", "old": "a", "new": f"b{i}"}, "ok")
    text = f"FAILED tests/test_db.py::test_connect - ConnectionRefusedError\n1 failed in 0.{i}s"
    b.call("bash", {"command": "pytest -q tests/test_db.py"}, text, "error")
    return first


def invalid(b: Builder, i: int, mix: bool) -> int:
    text = f"Please always provide EXACTLY ONE action in triple backticks, found {i % 3} actions."
    return b.call("(format error)", {"blocks": i % 3}, text, "invalid")


# kind -> (loop, detector, whether healthy calls may come between iterations)
KINDS: dict[str, tuple[Loop, str, bool]] = {
    "repeat": (repeat, "repeat", True),
    "failing repeat": (failure, "repeat", True),
    "cycle": (cycle, "oscillation", False),
    "rephrased search": (stall, "result_stall", False),
    "near repeat": (near, "near_repeat", False),
    "monologue": (monologue, "message_loop", False),
    "blocker: edits": (blocked_edit, "blocker", True),
    "blocker: builds": (blocked_build, "blocker", True),
    "blocker: fetches": (blocked_fetch, "blocker", True),
    "same check, same failure": (same_check, "repeat", True),
    "invalid turns": (invalid, "blocker", False),
}


def generated(kind: str, seed: int) -> tuple[list[Step], list[int], str]:
    loop, detector, mix = KINDS[kind]
    rng = random.Random(seed)
    b = Builder(rng)
    b.add("user", text="Please do the task.")
    b.healthy(rng.randrange(3, 30))
    starts = []
    for i in range(rng.randrange(5, 9)):
        starts.append(loop(b, i, mix))
        if mix and rng.random() < 0.5:
            b.healthy(rng.randrange(1, 3))
    b.healthy(rng.randrange(0, 10))
    return b.steps, starts, detector


# -- measuring -------------------------------------------------------------------------
def iteration(starts: list[int], seq: int) -> int:
    """Return which iteration (1-based) a seq falls in; 0 before the first."""
    return sum(1 for start in starts if start <= seq)


def measure(steps: list[Step], starts: list[int], detector: str) -> tuple[int, int] | None:
    """Return (lateness, start error) in iterations, or None when the loop was missed."""
    found = [
        f
        for f in analyze(steps).findings
        if f.detector == detector and f.severity != "info" and f.fired_at >= starts[0]
    ]
    if not found:
        return None
    finding = found[0]
    tool = finding.tool or "?"
    warn = Policy().for_tool(tool).thresholds[detector].warn or 0
    lateness = iteration(starts, finding.fired_at) - warn
    if finding.started_at < starts[0]:
        return lateness, 1  # it starts before the loop does: wrong by one at least
    return lateness, iteration(starts, finding.started_at) - 1


def summarise(label: str, results: list[tuple[int, int] | None]) -> tuple[int, int, int]:
    hits = [r for r in results if r is not None]
    misses = len(results) - len(hits)
    late = [lateness for lateness, _ in hits]
    exact = sum(1 for _, error in hits if error == 0)
    worst = max(late) if late else 0
    mean = sum(late) / len(late) if late else float("nan")
    print(
        f"{label:<38} {len(results):>5} {misses:>6} {mean:>9.2f} {worst:>6} "
        f"{sum(1 for x in late if x <= TARGET):>7}/{len(hits):<4} {exact:>6}/{len(hits)}"
    )
    return misses, sum(1 for x in late if x > TARGET), len(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="generated runs per kind")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"engine: {'compiled' if detection.COMPILED else 'plain Python'}")
    print(f"target: fire at most {TARGET} iteration past the warn threshold; started_at exact")
    header = (
        f"{'labeled loops':<38} {'runs':>5} {'missed':>6} {'mean late':>9} {'worst':>6} "
        f"{'on time':>12} {'start ok':>10}"
    )
    print(header)
    print("-" * len(header))
    totals = [0, 0, 0]
    labels = json.loads((CASES / "labels.json").read_text())
    fixture_results = []
    for name, label in labels.items():
        if name == "_":
            continue
        fixture_results.append(measure(load(CASES / name), label["iterations"], label["detector"]))
    for index, value in enumerate(
        summarise("fixtures (tests/data/detection/cases)", fixture_results)
    ):
        totals[index] += value
    for kind in KINDS:
        results = [measure(*generated(kind, args.seed * 10_000 + n)) for n in range(args.runs)]
        for index, value in enumerate(summarise(kind, results)):
            totals[index] += value
    missed, late, runs = totals
    print("-" * len(header))
    print(f"{runs} labeled loops: {missed} missed, {late} more than {TARGET} iteration late")
    return 1 if missed or late else 0


if __name__ == "__main__":
    sys.exit(main())
