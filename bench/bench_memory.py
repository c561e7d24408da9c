"""Peak memory (RSS) of the inputs that used to exhaust a worker or a web process.

    .venv/bin/python bench/bench_memory.py [--gb 2] [--spans 1000000] [--bomb-gb 10]

Each case runs in a fresh Python process (so its peak RSS is its own) and prints its peak
RSS, time and outcome beside the target and the figure measured before the limits existed:
- a gzipped native JSONL file of `--gb` GB over 20 interleaved runs, read as the worker's
  import reads it (no run reaches its own step limit; all are open until the end);
- an OTLP/JSON export request of `--spans` spans, gzipped: what the receiver does with it
  (it inflates no more than LOOPBOARD_OTLP_INLINE_BYTES and keeps a bigger body for the
  worker), then the worker's streaming import of it;
- a gzip bomb of `--bomb-gb` GB of zeros sent as an OTLP body.
Targets: under 1 GB for the worker, under 300 MB for the web process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024

# Measured before these limits existed (the same inputs, the same machine).
BEFORE = {
    "worker: native JSONL over 20 runs": "about 29 GB needed for 2 GB (killed by the kernel)",
    "web: OTLP/JSON request": "2.95 GiB for 1M spans (17.5 s)",
    "worker: that OTLP request": "(it was decoded in the web process)",
    "web: gzip bomb": "1.7-2.0 GiB before the refusal",
}
TARGET = {"worker": 1024, "web": 300}

WORKER_CASE = """
import sys, time
from runs.importers import iter_runs
from runs.importers.errors import TraceError
from runs.importers.reading import Limits
path = sys.argv[1]
try:
    runs = sum(1 for _ in iter_runs(path, source=path, limits=Limits(max_bytes=1 << 40)))
    print(f"read {runs} runs")
except TraceError as exc:
    print(f"refused: {exc.reason[:90]}")
"""

WORKER_OTLP_CASE = """
import sys
from runs.importers import iter_runs
from runs.importers.reading import Limits
path = sys.argv[1]
runs = list(iter_runs(path, source=path, format="otlp", limits=Limits(max_bytes=1 << 40)))
print(f"imported {len(runs)} runs, {sum(len(r.steps) for r in runs)} steps")
"""

WEB_CASE = """
import sys
from runs.importers.otlp import spans
body = open(sys.argv[1], "rb").read()
try:
    export = spans.read_request(body, "application/json", "gzip",
                                limits=spans.BodyLimits(32 * 1024 * 1024, 64))
    print(f"decoded {sum(g.spans for g in export.groups.values())} spans")
except spans.BodyTooLarge:
    print("over 32 MiB once inflated: kept whole for the worker")
except spans.OtlpError as exc:
    print(f"refused with {exc.status}: {exc.message[:70]}")
"""


def write_native(path: Path, gb: float) -> None:
    """Write gb GB (uncompressed) of native JSONL, 20 runs interleaved, gzipped fast."""
    target, written, i = int(gb * 1024 * MB), 0, 0
    with gzip.open(path, "wb", compresslevel=1) as out:
        while written < target:
            lines = [
                json.dumps(
                    {
                        "run_id": f"r{n % 20}",
                        "type": "tool_call",
                        "tool": "read",
                        "args": {"path": f"/src/f{n}.py"},
                        "result": "x" * 200,
                    }
                )  # fmt: skip
                for n in range(i, i + 10_000)
            ]
            chunk = ("\n".join(lines) + "\n").encode()
            out.write(chunk)
            written += len(chunk)
            i += 10_000


def write_otlp(path: Path, count: int) -> None:
    spans = [
        {"traceId": f"{n // 1000 + 1:032x}", "spanId": f"{n + 1:016x}", "name": "execute_tool t",
         "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}}]}
        for n in range(count)
    ]  # fmt: skip
    # One ResourceSpans per 512 spans, as an SDK's batch processor sends them (the worker
    # streams one ResourceSpans at a time: a single resource of all spans costs far more).
    resources = [{"scopeSpans": [{"spans": spans[i : i + 512]}]} for i in range(0, count, 512)]
    body = json.dumps({"resourceSpans": resources}).encode()
    path.write_bytes(gzip.compress(body, compresslevel=1))


def write_bomb(path: Path, gb: float) -> None:
    zeros = b"\0" * (64 * MB)
    with gzip.open(path, "wb", compresslevel=9) as out:
        for _ in range(int(gb * 16)):
            out.write(zeros)


def measure(code: str, path: Path) -> tuple[float, float, str]:
    """Run code in a fresh process; return (peak RSS in MB, seconds, what it printed)."""
    # VmHWM is the child's own peak: ru_maxrss would carry the parent's peak over exec.
    peak = "print('RSS', [l.split()[1] for l in open('/proc/self/status') if 'VmHWM' in l][0])"
    script = f"{code}\n{peak}"
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], cwd=ROOT, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
    ).stdout.splitlines()  # fmt: skip
    seconds = time.monotonic() - began
    rss = next(int(line.split()[1]) for line in out if line.startswith("RSS")) / 1024
    return rss, seconds, next(line for line in out if not line.startswith("RSS"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--bomb-gb", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = {"native": Path(tmp) / "big.jsonl.gz", "otlp": Path(tmp) / "spans.json.gz",
                 "bomb": Path(tmp) / "bomb.gz"}  # fmt: skip
        print("writing the inputs ...", flush=True)
        write_native(files["native"], args.gb)
        write_otlp(files["otlp"], args.spans)
        write_bomb(files["bomb"], args.bomb_gb)
        cases = [
            ("worker: native JSONL over 20 runs", "worker", WORKER_CASE, files["native"]),
            ("web: OTLP/JSON request", "web", WEB_CASE, files["otlp"]),
            ("worker: that OTLP request", "worker", WORKER_OTLP_CASE, files["otlp"]),
            ("web: gzip bomb", "web", WEB_CASE, files["bomb"]),
        ]
        print(f"\n{'case':<36}{'gzip MB':>9}{'peak RSS MB':>13}{'target':>8}{'s':>7}  outcome")
        for label, side, code, path in cases:
            rss, seconds, outcome = measure(code, path)
            size = path.stat().st_size / MB
            ok = "ok" if rss < TARGET[side] else "OVER"
            print(
                f"{label:<36}{size:>9.1f}{rss:>13.0f}{TARGET[side]:>6} {ok:<4}{seconds:>5.1f}  {outcome}"
            )
            print(f"{'':<36}before: {BEFORE[label]}")


if __name__ == "__main__":
    main()
