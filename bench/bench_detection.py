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

    .venv/bin/python bench/bench_detection.py --sizes 1000,20000 --compare a2640e2

``--compare REV`` puts an earlier git revision beside this tree: it extracts REV (``git
archive``) into a temporary folder, compiles both trees' engines afresh into that folder (each
with its own scripts/build_speedups.py, ``LOOPBOARD_SPEEDUPS_DIR`` pointing there, so the
build/ of this checkout is left alone), runs this script, with the same jobs and data, on
each tree in a subprocess, and prints both trees' us/step and baseline ratios side by side.
The baseline is the same code in both runs, so its row shows how much the machine drifted
between them. The folder is removed afterwards.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import detection  # noqa: E402
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


JOBS = {"analyze": analyze, "Monitor": run_monitor, "baseline": baseline}
ENGINE_JOBS = ("analyze", "Monitor")


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """Time every job at every size and print the figures; return each job's us/step by size."""
    sizes = [int(size) for size in args.sizes.split(",")]
    header = (
        f"{'steps':>9} {'job':>9} {'seconds':>8} {'steps/s':>10} {'us/step':>8} "
        f"{'peak MiB':>9}  notes"
    )
    print(f"healthy results: {f'about {args.result_kb:g} KB' if args.result_kb else 'one line'}")
    print(header)
    print("-" * len(header))
    per_step: dict[str, list[float]] = {name: [] for name in JOBS}
    for size in sizes:
        steps = generate(size, args.seed, args.result_kb)
        result = analyze(steps[: min(size, 200_000)])
        note = (
            f"verdict {result.verdict}, stall {result.stall_score:.3f}, "
            f"{len(result.findings)} findings (first {min(size, 200_000)} steps)"
        )
        rounds = max(args.repeat, 1) if size <= 200_000 else 1
        best = {name: float("inf") for name in JOBS}
        for _ in range(rounds):
            for name, function in JOBS.items():
                best[name] = min(best[name], timed(function, steps))
        for name, function in JOBS.items():
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
    for name, ratio in ratios(per_step).items():
        print(
            f"baseline/{name} time ratio by size: {', '.join(f'{r:.2f}' for r in ratio)} "
            "(>= 1 means all detectors are at least as fast as the baseline)"
        )
    return per_step


def ratios(per_step: dict[str, list[float]]) -> dict[str, list[float]]:
    """Return baseline time / engine time by size, for each engine job."""
    return {
        name: [b / a for a, b in zip(per_step[name], per_step["baseline"], strict=True)]
        for name in ENGINE_JOBS
    }


def extract(rev: str, folder: Path) -> str:
    """Write the files of git revision `rev` into `folder` (git archive); return its short id."""
    git = ["git", "-C", str(ROOT)]
    found = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", "--short", f"{rev}^{{commit}}"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    if found.returncode:
        raise SystemExit(f"--compare: {rev!r} is not a commit of {ROOT}")
    commit = found.stdout.strip()
    archive = subprocess.run([*git, "archive", commit], stdout=subprocess.PIPE, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return commit


def compile_engine(root: Path, speedups: Path) -> dict[str, str]:
    """Compile the engine of the tree at `root` into `speedups` with that tree's own
    scripts/build_speedups.py; return the environment in which that tree loads the build."""
    env = dict(os.environ, LOOPBOARD_SPEEDUPS_DIR=str(speedups))
    subprocess.run([sys.executable, "scripts/build_speedups.py"], cwd=root, env=env, check=True)
    return env


def measure_in(script: Path, env: dict[str, str], args: argparse.Namespace, out: Path) -> dict:
    """Run `script` (this benchmark, in some tree) with the same options; return its figures."""
    options = ["--sizes", args.sizes, "--seed", str(args.seed), "--result-kb", str(args.result_kb),
               "--memory-max", str(args.memory_max), "--repeat", str(args.repeat)]  # fmt: skip
    command = [sys.executable, str(script), *options, "--json", str(out)]
    subprocess.run(command, cwd=script.parents[1], env=env, check=True)
    return json.loads(out.read_text())


def compare(args: argparse.Namespace) -> None:
    """Measure this tree and git revision `args.compare`, each with its engine compiled afresh
    in a temporary folder, and print their figures side by side."""
    with tempfile.TemporaryDirectory(prefix="bench-detection-") as name:
        temp = Path(name)
        commit = extract(args.compare, temp / "tree")
        script = temp / "tree" / "bench" / Path(__file__).name
        script.parent.mkdir(exist_ok=True)
        shutil.copyfile(__file__, script)  # the same jobs and data, on that tree's engine
        named = args.compare if args.compare == commit else f"{args.compare} ({commit})"
        print(f"compiling the engines of this tree and of {named} ...", flush=True)
        here_env = compile_engine(ROOT, temp / "speedups-here")
        there_env = compile_engine(temp / "tree", temp / "speedups-there")
        print(f"\nthis tree ({ROOT}):", flush=True)
        here = measure_in(Path(__file__), here_env, args, temp / "here.json")
        print(f"\n{commit} (in {temp / 'tree'}):", flush=True)
        there = measure_in(script, there_env, args, temp / "there.json")
    print_comparison([int(size) for size in args.sizes.split(",")], here, there, commit)


def print_comparison(sizes: list[int], here: dict, there: dict, label: str) -> None:
    """Print both trees' us/step and baseline ratios side by side, with how many times faster
    this tree's figure is (above 1: this tree is faster)."""
    rows = []
    here_ratios, there_ratios = ratios(here["us_per_step"]), ratios(there["us_per_step"])
    for index, size in enumerate(sizes):
        for name in JOBS:
            a, b = here["us_per_step"][name][index], there["us_per_step"][name][index]
            rows.append((size, f"{name} us/step", a, b, b / a))
        for name in ENGINE_JOBS:
            a, b = here_ratios[name][index], there_ratios[name][index]
            rows.append((size, f"baseline/{name}", a, b, a / b))
    width = max(len(label), 9)
    header = f"{'steps':>9}  {'figure':<18} {'this tree':>{width}} {label:>{width}} {'faster':>7}"
    engine = {True: "compiled", False: "plain Python"}
    print(f"\nthis tree ({engine[here['compiled']]}) beside {label} ({engine[there['compiled']]}):")
    if here["compiled"] != there["compiled"]:
        print("(one engine is compiled and the other is not: their times do not compare)")
    print(header)
    print("-" * len(header))
    for size, figure, a, b, faster in rows:
        print(f"{size:>9}  {figure:<18} {a:>{width}.2f} {b:>{width}.2f} {faster:>6.2f}x")
    print(
        f"faster: {label}'s us/step / this tree's, or this tree's baseline ratio / {label}'s; "
        "the baseline row is the same code in both, so it shows the machine's drift"
    )


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
    parser.add_argument(
        "--compare",
        metavar="REV",
        help="also measure the engine of this git revision and print both side by side",
    )
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)  # figures, for --compare
    args = parser.parse_args(argv)
    if args.compare:
        compare(args)
        return 0
    per_step = measure(args)
    if args.json:
        args.json.write_text(json.dumps({"compiled": detection.COMPILED, "us_per_step": per_step}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
