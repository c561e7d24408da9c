"""Raw trace bytes at rest: zstd (what loopboard stores) beside PostgreSQL's own lz4 and pglz
and the bytes as received, on the same inputs in one run.

    .venv/bin/python bench/bench_raw_compression.py [--runs 200]

Inputs: every sample file under tests/data (real and fixture traces, 2.6 MB in all), and one
OTLP export request of synthetic runs from bench/gen_traces.py (50 steps each), as JSON and as
protobuf. For zstd: ratio, compress and decompress MB/s in this process.
For lz4 and pglz: the size PostgreSQL stores (pg_column_size of a TOASTed value in a temporary
table of the bench database) and the time of the INSERT and of reading the value back, both
over the local socket (so they include the round trip: a ceiling on the server's own speed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def inputs(runs: int) -> dict[str, list[bytes]]:
    """The sample files, and one OTLP export (JSON and protobuf) of synthetic runs."""
    samples = [p.read_bytes() for p in sorted((ROOT / "tests" / "data").rglob("*")) if p.is_file()]
    from gen_traces import generate, to_otlp_json, to_otlp_proto

    batch = list(generate(runs, 50, 0.3, seed=1))
    as_json = json.dumps(to_otlp_json(batch)).encode()
    return {
        "tests/data samples": samples,
        f"OTLP/JSON, {runs} runs": [as_json],
        f"OTLP protobuf, {runs} runs": [to_otlp_proto(batch)],
    }


def best(function, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def zstd_row(blobs: list[bytes], level: int) -> tuple[int, float, float]:
    compressor = zstandard.ZstdCompressor(level=level)
    packed = [compressor.compress(blob) for blob in blobs]
    out = best(lambda: [compressor.compress(blob) for blob in blobs])
    back = best(lambda: [zstandard.ZstdDecompressor().decompress(p) for p in packed])
    return sum(map(len, packed)), out, back


def postgres_row(cursor, blobs: list[bytes], method: str) -> tuple[int, float, float]:
    cursor.execute("DROP TABLE IF EXISTS raw_bench")
    cursor.execute(f"CREATE TEMPORARY TABLE raw_bench (id int, raw bytea COMPRESSION {method})")

    def insert() -> None:
        cursor.execute("TRUNCATE raw_bench")
        for index, blob in enumerate(blobs):
            cursor.execute("INSERT INTO raw_bench VALUES (%s, %s)", [index, blob])

    out = best(insert)
    cursor.execute("SELECT coalesce(sum(pg_column_size(raw)), 0) FROM raw_bench")
    size = int(cursor.fetchone()[0])
    back = best(lambda: cursor.execute("SELECT raw FROM raw_bench").fetchall())
    return size, out, back


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    from harness import setup_django

    setup_django()
    from django.db import connection

    print(
        f"{'input':28} {'method':12} {'stored MB':>10} {'ratio':>6} {'in MB/s':>8} {'out MB/s':>9}"
    )
    print("-" * 78)
    for name, blobs in inputs(args.runs).items():
        size = sum(map(len, blobs))
        mb = size / 1e6
        rows = [("as received", size, 0.0, 0.0)]
        for level in (1, 3, 9):
            rows.append((f"zstd {level}", *zstd_row(blobs, level)))
        with connection.cursor() as cursor:
            for method in ("pglz", "lz4"):
                rows.append((f"pg {method}", *postgres_row(cursor, blobs, method)))
        for method, stored, out, back in rows:
            speed = f"{mb / out:8.0f}" if out else f"{'':8}"
            read = f"{mb / back:9.0f}" if back else f"{'':9}"
            print(f"{name:28} {method:12} {stored / 1e6:10.2f} {size / stored:6.2f} {speed} {read}")
        print()
    print("in/out MB/s: zstd in this process; pg rows include the INSERT/SELECT round trip")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
