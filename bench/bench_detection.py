"""Benchmark the detection engine against a progress-ledger baseline.

    .venv/bin/python bench/bench_detection.py [--sizes 1000,100000,1000000] [--seed 1]

Generated runs mix healthy work (reads of new ranges, new edits followed by checks, new
searches, paging, polls with moving results, user turns, assistant messages) with loops
(identical calls, A/B/C cycles, rephrased searches that return nothing, identical failures).
For each size it prints steps/s for ``analyze`` and ``Monitor`` (all detectors), and for the
baseline a progress ledger does (``json.dumps(sort_keys=True, separators=(",", ":"))`` +
SHA-256 per call, counts of progress signatures, stall score); peak traced memory of each
(tracemalloc, separate pass); the baseline/engine time ratios; and checks that the cost per
step stays flat as runs grow. Each job starts with the engine's digest memo empty; up to
200k steps, jobs run interleaved ``--repeat`` times and the best time of each is kept.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detection import Monitor, Step, analyze  # noqa: E402
from detection.keys import clear_memo  # noqa: E402


def generate(size: int, seed: int = 1, result_kb: float = 0.0) -> list[Step]:
    """Return a run of ``size`` steps, about a fifth of them inside loops.

    ``result_kb`` > 0 gives the healthy calls results of about that size (file contents,
    test output, search hits), as real tools return; 0 keeps every result a short line.
    """
    rng = random.Random(seed)
    lines = max(int(result_kb * 1024 / 64), 1) if result_kb else 0
    steps: list[Step] = []
    add = steps.append
    seq = 0
    text = "def handler(event):\n    return process(event['body'])  # line {}\n"
    while seq < size:
        roll = rng.random()
        if roll < 0.02:
            add(Step(seq, "user", text=f"Next task {seq}: please continue with the refactor."))
            seq += 1
            continue
        if roll < 0.12:
            add(Step(seq, "assistant", text=f"Looking at module {seq % 97} next.", tokens_out=40))
            seq += 1
            continue
        if roll < 0.80:  # healthy work, one call
            kind = rng.randrange(5)
            if kind == 0:
                tool, args = "Read", {"file_path": f"src/mod{seq % 5000}.py", "offset": seq % 7}
                result = "".join(text.format(seq + i) for i in range(lines)) or text.format(seq)
            elif kind == 1:
                tool, args = "Edit", {"file_path": f"src/mod{seq}.py", "old": "a", "new": f"b{seq}"}
                result = "The file has been updated."
            elif kind == 2:
                tool, args = "Bash", {"command": "pytest -q tests/"}
                result = "".join(f"tests/test_{i}.py ........ [{i}%]\n" for i in range(lines))
                result += f"{seq} passed"
            elif kind == 3:
                tool, args = "Grep", {"pattern": f"handler_{seq}", "path": "src/"}
                result = [f"src/mod{seq % 300}.py:{seq % 40}"]
                result += [
                    f"src/mod{(seq + i) % 300}.py:{i}: def handler_{seq}():" for i in range(lines)
                ]
            else:
                tool, args, result = "job_status", {"job": "j-1", "ts": seq}, {"progress": seq}
            add(Step(seq, "tool_call", tool=tool, args=args, result=result, tokens_in=1200))
            seq += 1
            continue
        # a loop of 4-12 steps
        kind = rng.randrange(4)
        length = rng.randrange(4, 13)
        for index in range(length):
            if kind == 0:
                tool, args, result, status = "WebFetch", {"url": "https://x.org/a"}, "404", "ok"
            elif kind == 1:
                tool = "AB"[index % 2]
                args, result, status = {"n": index % 2}, f"state {index % 2}", "ok"
            elif kind == 2:
                tool, args = "WebSearch", {"query": f"release date attempt {seq + index}"}
                result, status = "No results found.", "ok"
            else:
                tool, args, result, status = "deploy", {"env": "prod"}, "Error: quota", "error"
            add(Step(seq, "tool_call", tool=tool, args=args, result=result, status=status))
            seq += 1
    return steps[:size]


SEPARATORS = (",", ":")


def baseline(steps: Iterable[Step]) -> float:
    """Do what a plain progress ledger does: canonical JSON + SHA-256 per call, stall score."""
    seen: dict[str, int] = {}
    calls = repeated = 0
    for step in steps:
        if step.kind != "tool_call":
            continue
        calls += 1
        args = json.dumps(step.args, sort_keys=True, separators=SEPARATORS)
        result = json.dumps(step.result, sort_keys=True, separators=SEPARATORS, default=str)
        key = hashlib.sha256(f"{step.tool}\0{args}\0{result}\0{step.status}".encode()).hexdigest()
        count = seen.get(key, 0)
        if count:
            repeated += 1
        seen[key] = count + 1
    return repeated / calls if calls else 0.0


def run_monitor(steps: Iterable[Step]) -> int:
    monitor = Monitor()
    fired = 0
    for step in steps:
        fired += len(monitor.observe(step))
    return fired


def timed(function: Callable[[list[Step]], object], steps: list[Step]) -> float:
    clear_memo()  # no job profits from digests another job remembered
    gc.collect()
    start = time.perf_counter()
    function(steps)
    return time.perf_counter() - start


def peak(function: Callable[[list[Step]], object], steps: list[Step]) -> int:
    clear_memo()
    gc.collect()
    tracemalloc.start()
    function(steps)
    _, high = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return high


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--result-kb",
        type=float,
        default=0.0,
        help="size of healthy calls' results (0: one short line each; real tools: 1-4 KB)",
    )
    parser.add_argument(
        "--memory-max",
        type=int,
        default=100_000,
        help="trace memory only up to this size (tracemalloc is slow)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds per size up to 200k steps (jobs interleaved, best time kept): the "
        "machine may be shared, and noise only ever adds time",
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    jobs = {"analyze": analyze, "Monitor": run_monitor, "baseline": baseline}
    header = (
        f"{'steps':>9} {'job':>9} {'seconds':>8} {'steps/s':>10} {'us/step':>8} "
        f"{'peak MiB':>9}  notes"
    )
    print(f"healthy results: {f'about {args.result_kb:g} KB' if args.result_kb else 'one line'}")
    print(header)
    print("-" * len(header))
    per_step: dict[str, list[float]] = {name: [] for name in jobs}
    for size in sizes:
        steps = generate(size, args.seed, args.result_kb)
        result = analyze(steps[: min(size, 200_000)])
        note = (
            f"verdict {result.verdict}, stall {result.stall_score:.3f}, "
            f"{len(result.findings)} findings (first {min(size, 200_000)} steps)"
        )
        rounds = max(args.repeat, 1) if size <= 200_000 else 1
        best = {name: float("inf") for name in jobs}
        for _ in range(rounds):
            for name, function in jobs.items():
                best[name] = min(best[name], timed(function, steps))
        for name, function in jobs.items():
            seconds = best[name]
            memory = peak(function, steps) / 2**20 if size <= args.memory_max else float("nan")
            per_step[name].append(seconds / size * 1e6)
            print(
                f"{size:>9} {name:>9} {seconds:>8.2f} {size / seconds:>10,.0f} "
                f"{seconds / size * 1e6:>8.2f} {memory:>9.1f}  {note if name == 'analyze' else ''}"
            )
        del steps
    print()
    for name, costs in per_step.items():
        print(f"{name:>9}: us/step by size {', '.join(f'{c:.2f}' for c in costs)} (linear if flat)")
    for name in ("analyze", "Monitor"):
        ratio = [b / a for a, b in zip(per_step[name], per_step["baseline"], strict=True)]
        print(
            f"baseline/{name} time ratio by size: {', '.join(f'{r:.2f}' for r in ratio)} "
            "(>= 1 means all detectors are at least as fast as the baseline)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
