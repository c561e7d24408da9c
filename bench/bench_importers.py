"""Importer throughput and peak memory, one large generated file per format.

    .venv/bin/python bench/bench_importers.py [--mb 60] [--formats chat,otlp-pb]

Writes a file of about --mb megabytes per format into a temporary directory (runs of 40 tool
calls with ~300-byte results), then parses each in its own subprocess so every peak memory
figure (ru_maxrss) is that format's alone. Prints MB/s, steps/s and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = 40  # tool calls per run
RESULT = ("lorem ipsum dolor sit amet " * 12).strip()


def calls(run: int) -> Iterator[tuple[str, str, dict, str]]:
    for step in range(STEPS):
        yield (
            f"c{step}",
            ("read_file", "grep")[step % 2],
            {"path": f"src/m{run}_{step}.py"},
            f"{RESULT} {run}:{step}",
        )


def native_run(run: int) -> Iterator[bytes]:
    for seq, (_, tool, args, result) in enumerate(calls(run)):
        yield (
            json.dumps(
                {
                    "type": "tool_call",
                    "run_id": f"r{run}",
                    "seq": seq,
                    "tool": tool,
                    "args": args,
                    "result": result,
                    "ts": 1.7e9 + seq,
                }
            ).encode()
            + b"\n"
        )


def chat_run(run: int) -> dict:
    traj = [{"role": "system", "content": "policy"}, {"role": "user", "content": "help me"}]
    for call_id, tool, args, result in calls(run):
        traj.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        traj.append({"role": "tool", "tool_call_id": call_id, "name": tool, "content": result})
    return {"task_id": run, "trial": 0, "reward": 1.0, "info": {"source": "user"}, "traj": traj}


def responses_run(run: int) -> dict:
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "help me"}]}
    ]
    for call_id, tool, args, result in calls(run):
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": tool,
                "arguments": json.dumps(args),
            }
        )
        items.append({"type": "function_call_output", "call_id": call_id, "output": result})
    return {"id": f"resp_{run}", "object": "response", "model": "gpt-5", "output": items}


def anthropic_run(run: int) -> dict:
    messages: list[dict] = [{"role": "user", "content": "help me"}]
    for call_id, tool, args, result in calls(run):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": args}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}],
            }
        )
    return {"system": "be brief", "messages": messages}


def tree_run(run: int) -> dict:
    children = [
        {
            "type": "ToolNode",
            "id": f"{run}.{i}",
            "name": tool,
            "args": args,
            "result": result,
            "children": [],
        }
        for i, (_, tool, args, result) in enumerate(calls(run))
    ]
    return {"type": "ThinkNode", "id": f"{run}", "thought": "plan", "children": children}


def otlp_spans(run: int) -> list[dict]:
    trace = f"{run:032x}"
    root = f"{run:08x}00000000"
    spans = [
        {
            "traceId": trace,
            "spanId": root,
            "name": "invoke_agent bench",
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + run),
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}
            ],
        }
    ]
    for step, (call_id, tool, args, result) in enumerate(calls(run)):
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps(args),
            "gen_ai.tool.call.result": result,
        }
        spans.append(
            {
                "traceId": trace,
                "spanId": f"{run:08x}{step + 1:08x}",
                "parentSpanId": root,
                "name": f"execute_tool {tool}",
                "startTimeUnixNano": str(1_700_000_000_000_000_000 + run + step + 1),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
            }
        )
    return spans


def write_array(out: IO[bytes], target: int, make: Callable[[int], dict]) -> None:
    out.write(b"[\n")
    run = 0
    while out.tell() < target:
        out.write((b",\n" if run else b"") + json.dumps(make(run)).encode())
        run += 1
    out.write(b"\n]\n")


def write_otlp_json(out: IO[bytes], target: int) -> None:
    out.write(b'{"resourceSpans": [\n')
    run = 0
    while out.tell() < target:
        resource = {
            "resource": {
                "attributes": [{"key": "service.name", "value": {"stringValue": "bench"}}]
            },
            "scopeSpans": [{"scope": {"name": "bench"}, "spans": otlp_spans(run)}],
        }
        out.write((b",\n" if run else b"") + json.dumps(resource).encode())
        run += 1
    out.write(b"\n]}\n")


def write_otlp_pb(out: IO[bytes], target: int) -> None:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    run = 0
    while out.tell() < target:
        spans = otlp_spans(run)
        for span in spans:  # the JSON mapping of bytes fields is base64
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in span:
                    span[key] = _b64(span[key])
        request = ParseDict(
            {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, ExportTraceServiceRequest()
        )
        out.write(request.SerializeToString())  # concatenated requests = one request
        run += 1


def _b64(hex_id: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def write_native(out: IO[bytes], target: int) -> None:
    run = 0
    while out.tell() < target:
        out.writelines(native_run(run))
        run += 1


WRITERS: dict[str, tuple[str, Callable[[IO[bytes], int], None]]] = {
    "native": ("native", write_native),
    "chat": ("chat", lambda out, n: write_array(out, n, chat_run)),
    "responses": ("responses", lambda out, n: write_array(out, n, responses_run)),
    "anthropic": ("anthropic", lambda out, n: write_array(out, n, anthropic_run)),
    "tree": ("tree", lambda out, n: write_array(out, n, tree_run)),
    "otlp-json": ("otlp", write_otlp_json),
    "otlp-pb": ("otlp", write_otlp_pb),
}


def measure(path: str, format: str) -> dict:
    """Parse one file (in this process) and return the figures."""
    from runs.importers import iter_runs

    start = time.perf_counter()
    runs = steps = 0
    for run in iter_runs(path, format=format):
        runs += 1
        steps += len(run.steps)
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"runs": runs, "steps": steps, "seconds": seconds, "peak_mb": peak_kb / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=60)
    parser.add_argument("--formats", default=",".join(WRITERS))
    parser.add_argument("--measure", nargs=2, metavar=("FILE", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label in args.formats.split(","):
            format, writer = WRITERS[label]
            path = os.path.join(tmp, f"{label}.data")
            with open(path, "wb") as out:
                writer(out, int(args.mb * 1024 * 1024))
            size = os.path.getsize(path) / 1e6
            done = subprocess.run(
                [sys.executable, __file__, "--measure", path, format],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(done.stdout)
            rows.append((label, size, result))
            os.remove(path)
    print(
        f"{'format':<10} {'MB':>7} {'runs':>7} {'steps':>9} {'s':>7} {'MB/s':>7} "
        f"{'steps/s':>9} {'peak RSS MB':>12}"
    )
    for label, size, r in rows:
        print(
            f"{label:<10} {size:7.1f} {r['runs']:7d} {r['steps']:9d} {r['seconds']:7.2f} "
            f"{size / r['seconds']:7.1f} {r['steps'] / r['seconds']:9.0f} {r['peak_mb']:12.0f}"
        )


if __name__ == "__main__":
    main()
