"""Importer throughput and peak memory, one large generated file per format.

    .venv/bin/python bench/bench_importers.py [--mb 60] [--formats chat,otlp-pb]
    .venv/bin/python bench/bench_importers.py --mb 1024 --formats swe-agent,mini-swe-agent,\
        openhands-gui,openhands-eval,tree,tree-root    # the 1 GB check: each peak must stay < 300 MB

Writes a file of about --mb megabytes per format into a temporary directory (deleted after
each format), then parses it in its own subprocess so every peak memory figure (ru_maxrss)
is that format's alone. Prints MB/s, steps/s, the peak RSS and `kept MB`: the text the run's
steps hold (results, args, messages), which no streaming reader can avoid holding while a
run is read whole. The file-size limit is lifted for the measurement (Limits.max_bytes is
2 GiB by default).

The message-list formats are runs of 40 tool calls with ~300-byte results. The agent
harnesses' whole-document formats (one run per file, or one per eval line) are shaped as
their large real files are: most of the bytes are what the format repeats, not the run —
- swe-agent: each `trajectory` step carries `messages`, the model input at that step (the
  last 40 messages), and `state`; `history` follows the trajectory, `info` comes last;
- mini-swe-agent (1.1): `info` first, `trajectory_format` last; every assistant turn keeps
  the raw provider response (`extra.response`, with the model's reasoning) beside
  `extra.actions` and a native tool call; `role: "tool"` results with `extra.returncode`;
- openhands-gui: a bare array of events whose actions carry `tool_call_metadata.model_response`
  (the raw completion) and whose edit observations carry the old and new file content;
- openhands-eval: eval `output.jsonl`, one instance per line of ~16 MB (history, the dataset
  row `instance`, `metrics`, `test_result`);
- tree: an array of ThinkNode roots with ToolNode children; tree-root: one root object
  whose ToolNode children each carry a large field the reader does not keep.

Measured on the 2-core dev machine (2026-12-01), --mb 1024, each format alone:

    format               MB    runs     steps       s    MB/s   steps/s  peak RSS MB  kept MB
    swe-agent        1083.8       1     55747   39.23    27.6      1421          122     46.3
    mini-swe-agent   1073.8       1     49321   24.26    44.3      2033           90     42.2
    openhands-gui    1079.0       1     25801   39.69    27.2       650           74     29.0
    openhands-eval   1085.9      57     25650   28.55    38.0       898          121      0.5
    tree             1073.7   58489   2398049   35.33    30.4     67885           55      0.0
    tree-root        1073.8       1     53503   16.33    65.7      3276           71      9.7

Most of the time left is the depth guard's string scan (reading.DepthGuard) and the
text-only error rules (text_errors.COMMON, ~1.8 ms per 1.6 KB result), not the parsing.

One session of any length (issue 28 part 4). `native-session` is one native run of ~3.7 KB
steps, with a user turn every 200 steps and a failing call repeated five times every 1,000.
`claude-code` is one Claude Code session of 705,800 calls in a single turn, each call
different; `claude-code-turns` is the same with a user prompt every 200 calls.
`codex-session` is one Codex rollout (0.1xx unified exec) of distinct `exec_command` calls,
each a reasoning item and its event, the call, an `exec_command_end` repeating the output,
the framed output and a token_count, with a user turn every 200 calls and the same failing
`pytest` call five times every 1,000. `copilot-session` (Copilot CLI events.jsonl),
`pi-session` (a v3 pi session, one chain) and `cursor-transcript` (a Cursor agent
transcript) are one session each, shaped as their samples are (see each writer), with a user
turn every 200 calls and the same failing call five times every 1,000. `--through` measures
each file three ways, each in a process of its own. `parse` is `iter_runs`. `scan` is `loopboard scan --json`. `worker` stores the file as an upload in
the configured database (DATABASE_URL; not measured), then runs what the worker does with
it, the import and then the analysis, in one process with Django; its project is deleted
afterwards. `--dir DIR` keeps the generated files for the next run.

    .venv/bin/python bench/bench_importers.py --mb 1024 --formats native-session,claude-code \
        --through parse,scan,worker --dir /tmp/big

Measured 2026-12-03 on the 2-core machine with a CI run beside it (load average ~5), plain
Python engine. Before is commit 040cdc5, where every run was held whole. After is the step
spool (runs/importers/kit/spool.py), which bounds native JSONL and Claude Code sessions
(and, since 68bdbcd, Codex rollouts). Every other format still holds its run whole.

    format          through      MB    steps   s before  s after   peak RSS MB before  after
    native-session  parse    1073.7   289254      10.3     11.6                 1195     68
    native-session  scan     1073.7   289254      17.7     21.3                 1245     68
    native-session  worker   1073.7   289254      54.7     59.8                 3524    183
    claude-code     parse    1073.8   705800      65.3    119.9                 1580    109
    claude-code     scan     1073.8   705800      94.6    146.8                 1808    357
    claude-code     worker   1073.8   705800     135.7    161.2                 3449    493
    claude-code-turns parse  1073.8   708767         -    117.0                    -    102
    claude-code-turns scan   1073.8   708767     231.5    147.9                 1638    103
    claude-code-turns worker 1073.8   708767         -    275.5                    -    180
    codex-session   parse    1073.7   386139      29.4     28.8                  671     85
    codex-session   scan     1073.7   386139      54.5     36.1                  671     87
    codex-session   worker   1073.7   386139      55.3     61.3                 1384    161

The codex-session rows were measured 2026-12-04 at load average 1.3 to 3.2: before is
commit ec84fff (the rollout held whole), after is 68bdbcd (its steps spooled). The 192,588
calls make 386,139 steps (each call and its reasoning, and the user turns).

Measured 2026-12-06 at load average 2.3 to 5, with other work on the machine. Before is
commit 63863c3 (each session held whole); after is the spool in copilot_cli.py (f492061),
pi.py (1ad29fb) and cursor.py (d208d7c).

    format            through      MB    steps   s before  s after   peak RSS MB  before  after
    copilot-session   parse    1073.7   681607      50.4    177.1                 1108     61
    copilot-session   scan     1073.7   681607      69.2     93.3                 1109     62
    copilot-session   worker   1073.7   681607     172.7    119.5                 2360    145
    pi-session        parse    1073.7   477371      28.4     53.7                 1222     87
    pi-session        scan     1073.7   477371      28.4     47.4                 1222     86
    pi-session        worker   1073.7   477371     105.3     98.2                 2416    160
    cursor-transcript parse    1073.7   729734      32.0     61.7                 1450     49
    cursor-transcript scan     1073.7   729734      65.7     77.6                 1464     59
    cursor-transcript worker   1073.7   729734     168.0    128.9                 2911    265

The machine was busy (tests ran beside the Copilot parse). Back to back later, at load
average about 4.5, parse took 80.8 s after against 66.2 s before for copilot-session, and
54.7 s against 26.1 s for pi-session: the spool's writes and the two passes that finish the
run. The Cursor worker peak grew with the file (139 MB at --mb 256, 265 at 1 GB): the loop
issues' grouping read every loop's fingerprint steps at once (1,561 loops, 18,700 steps).
Since baf8c99 it reads them 100 loops at a time: 120 MB at --mb 256, 159 MB at 1 GB (native
session 161 -> 137 and 181 -> 146 MB).

The Claude Code scan and worker figures stay over 300 MB because of the engine, not the
steps. It keeps about 425 bytes for each distinct call within a turn (tracemalloc: 299 MB
after 700,000 calls), and `claude-code` is one turn of distinct calls (`claude-code-turns`, the same session
in turns of 200 calls, stays under 200 MB everywhere). The machine was busier
for the later runs, so the times are not comparable. The worker adds Django's ~95 MB and
the ledger (~56 bytes a call).

Measured 2026-12-07 with the four benches of the agent harnesses' documents run side by side
with tests and other benches (load average 7.7 to 9.6 during the before runs' first half, 1.8
to 3.3 at their end, so the times say little). Before is commit 4f5cb4a (each run held whole);
after is the step spool in swe_agent.py, mini_swe_agent.py and openhands.py (acd9150).

    format            through      MB    steps   s before  s after   peak RSS MB  before  after
    swe-agent         parse    1083.8    55747     115.5    293.3                  126     49
    swe-agent         scan     1083.8    55747      94.8    265.7                  126     49
    swe-agent         worker   1083.8    55747     244.2    230.2                  268    120
    mini-swe-agent    parse    1073.8    49321     145.0     83.4                   98     44
    mini-swe-agent    scan     1073.8    49321     153.0     74.6                   98     45
    mini-swe-agent    worker   1073.8    49321     130.1     69.1                  235    115
    openhands-gui     parse    1079.0    25801      99.8     52.9                   77     71
    openhands-gui     scan     1079.0    25801      84.3     52.2                   80     71
    openhands-gui     worker   1079.0    25801      71.6     44.7                  191    139
    openhands-eval    parse    1085.9    25650      54.7     28.3                  122    123
    openhands-eval    scan     1085.9    25650      59.0     28.7                  123    123
    openhands-eval    worker   1085.9    25650      67.2     33.6                  190    191

On a 256 MB swe-agent file (13,967 steps, spilled) the parse took 10.5 s of CPU after against
9.6 s before: the pass that names the steps and the kit's two finishing passes. An OpenHands
GUI export's peak is its events (a 40 KB model response each, built whole), not its steps. An
eval line is read whole before it is streamed (at most max_line_bytes), and its 450 steps never
leave the spool's window, so openhands-eval is what it was.
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


SESSION_RESULT = (RESULT + "\n") * 11  # ~3.4 KB: a file read, a listing


def write_native_session(out: IO[bytes], target: int) -> None:
    """One run (no run_id: the file is the session) of ~3.7 KB steps: a user message every
    200 steps, calls that each read a file of their own, and every 1,000 steps the same
    failing call five times over (a loop the engine finds)."""
    seq = 0
    while out.tell() < target:
        if seq % 200 == 0:
            line: dict = {"type": "message", "role": "user", "content": f"next task {seq}"}
        elif seq % 1000 < 5:
            line = {"type": "tool_call", "tool": "run_tests", "args": {"path": "tests/"},
                    "result": "FAILED tests/test_a.py::test_x", "status": "error"}  # fmt: skip
        else:
            tool = ("read_file", "grep")[seq % 2]
            line = {"type": "tool_call", "tool": tool, "args": {"path": f"src/m{seq}.py"},
                    "result": f"{SESSION_RESULT} {seq}"}  # fmt: skip
        line |= {"seq": seq, "ts": 1.7e9 + seq, "tokens_in": 1800, "tokens_out": 120}
        out.write(json.dumps(line).encode() + b"\n")
        seq += 1


# --- the agent-harness whole-document formats (see the module docstring)

OBSERVATION = ("drwxr-xr-x  2 root root 4096 src/module.py: line of command output\n" * 24).strip()
REASONING = "Let me think about which file holds the bug and what to run next. " * 600  # ~40 KB
FILE_TEXT = "def handler(request):\n    return respond(request)\n" * 400  # ~20 KB


def _command(step: int) -> str:
    return ("grep -rn handler src", "python -m pytest -q tests", f"sed -n {step},+20p a.py")[
        step % 3
    ]


def write_swe_agent(out: IO[bytes], target: int) -> None:
    out.write(b'{"environment": "swe_main", "trajectory": [\n')
    window: list[dict] = []
    step = 0
    while out.tell() < target * 0.96:  # the history that follows is ~4% of the file
        action = _command(step)
        window.append({"role": "assistant", "content": f"thought {step}", "action": action})
        window.append({"role": "user", "content": f"{OBSERVATION} {step}"})
        window = window[-40:]
        entry = {
            "action": action,
            "observation": f"{OBSERVATION} {step}",
            "response": f"thought {step}\n```\n{action}\n```",
            "thought": f"thought {step}",
            "execution_time": 0.5,
            "state": json.dumps({"open_file": "a.py", "working_dir": "/repo"}),
            "messages": window,
        }
        out.write((b",\n" if step else b"") + json.dumps(entry).encode())
        step += 1
    out.write(b'\n], "history": [\n{"role": "system", "content": "You are SWE-agent."},\n')
    out.write(json.dumps({"role": "user", "content": "fix the handler"}).encode())
    for index in range(step):
        action = _command(index)
        message = {"role": "assistant", "content": f"thought {index}", "action": action}
        message["tool_calls"] = [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": action})},
            }
        ]
        observation = {"role": "tool", "content": f"{OBSERVATION} {index}"}
        out.write(b",\n" + json.dumps(message).encode() + b",\n" + json.dumps(observation).encode())
    info = {"exit_status": "submitted", "submission": "diff", "model_stats": {"api_calls": step}}
    out.write(b'\n], "info": ' + json.dumps(info).encode() + b"}\n")


def write_mini_swe_agent(out: IO[bytes], target: int) -> None:
    info = {"mini_version": "2.1.0", "config": {"model": {"model_name": "bench/model"}}}
    out.write(b'{"info": ' + json.dumps(info).encode() + b', "messages": [\n')
    out.write(json.dumps({"role": "system", "content": "You are a helpful assistant."}).encode())
    out.write(b",\n" + json.dumps({"role": "user", "content": "fix the handler"}).encode())
    turn = 0
    while out.tell() < target:
        command, call_id = _command(turn), f"call_{turn}"
        call = {"command": command}
        message = {
            "role": "assistant",
            "content": f"THOUGHT: step {turn}",
            "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps(call)}}
            ],
            "extra": {
                "actions": [{"command": command, "tool_call_id": call_id}],
                "response": {
                    "id": f"resp-{turn}",
                    "created": 1_763_500_000 + turn,
                    "choices": [{"message": {"content": f"THOUGHT: step {turn}",
                                             "reasoning_content": REASONING}}],
                    "usage": {"prompt_tokens": 1000 + turn, "completion_tokens": 50},
                },
                "cost": 0.001,
            },
        }  # fmt: skip
        result = {
            "role": "tool",
            "tool_call_id": call_id,
            "content": f"<returncode>0</returncode>\n<output>\n{OBSERVATION} {turn}</output>",
            "extra": {"raw_output": f"{OBSERVATION} {turn}", "returncode": turn % 7 == 0},
        }
        out.write(b",\n" + json.dumps(message).encode() + b",\n" + json.dumps(result).encode())
        turn += 1
    out.write(b'\n], "trajectory_format": "mini-swe-agent-1.1", "instance_id": "bench__1"}\n')


def _openhands_events(start: int, count: int) -> Iterator[dict]:
    for n in range(start, start + count):
        action_id = 2 * n + 10
        edit = n % 2 == 1
        args = (
            {"path": f"/repo/m{n}.py", "command": "str_replace", "old_str": "a", "new_str": "b"}
            if edit
            else {"command": _command(n), "is_input": False, "thought": f"step {n}"}
        )
        response = {"id": f"chatcmpl-{n}", "choices": [{"message": {"content": REASONING}}],
                    "usage": {"prompt_tokens": 3000 + n, "completion_tokens": 60}}  # fmt: skip
        yield {
            "id": action_id,
            "timestamp": "2025-05-01T10:00:00",
            "source": "agent",
            "message": f"step {n}",
            "action": "edit" if edit else "run",
            "args": args,
            "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": f"toolu_{n}",
                                   "model_response": response, "total_calls_in_response": 1},
        }  # fmt: skip
        extras = (
            {"path": f"/repo/m{n}.py", "old_content": FILE_TEXT, "new_content": FILE_TEXT}
            if edit
            else {"command": _command(n), "metadata": {"exit_code": n % 5 == 0, "pid": 1}}
        )
        yield {
            "id": action_id + 1,
            "timestamp": "2025-05-01T10:00:01",
            "source": "environment",
            "message": "done",
            "cause": action_id,
            "observation": "edit" if edit else "run",
            "content": f"{OBSERVATION} {n}",
            "extras": extras,
        }


def write_openhands_gui(out: IO[bytes], target: int) -> None:
    out.write(b"[\n")
    task = {"id": 0, "source": "user", "action": "message", "args": {"content": "fix it"}}
    out.write(json.dumps(task).encode())
    n = 0
    while out.tell() < target:
        for event in _openhands_events(n, 100):
            out.write(b",\n" + json.dumps(event).encode())
        n += 100
    out.write(b"\n]\n")


def write_openhands_eval(out: IO[bytes], target: int) -> None:
    line = 0
    while out.tell() < target:
        events = list(_openhands_events(0, 300))  # ~16 MB a line
        row = {
            "instance_id": f"bench__{line}",
            "instruction": "fix the handler",
            "instance": {"problem_statement": FILE_TEXT * 10, "FAIL_TO_PASS": ["t"] * 100},
            "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "bench"}},
            "history": events,
            "metrics": {"accumulated_cost": 0.5, "costs": [{"cost": 0.001}] * 300},
            "error": None,
            "test_result": {"git_patch": FILE_TEXT},
        }
        out.write(json.dumps(row).encode() + b"\n")
        line += 1


def write_tree_root(out: IO[bytes], target: int) -> None:
    out.write(b'{"type": "ThinkNode", "id": "root", "thought": "search", "children": [\n')
    n = 0
    while out.tell() < target:
        node = {
            "type": "ToolNode",
            "id": f"n{n}",
            "name": ("read_file", "grep")[n % 2],
            "args": {"path": f"src/m{n}.py"},
            "result": f"{RESULT} {n}",
            "state": {"scratchpad": REASONING},  # a field the reader builds and drops
            "children": [{"type": "ThinkNode", "thought": f"next {n}", "children": []}],
        }
        out.write((b",\n" if n else b"") + json.dumps(node).encode())
        n += 1
    out.write(b'\n], "status": "ok"}\n')


# --- formats added in the robustness round: one writer each, shaped like the real files


def _jsonl(out: IO[bytes], target: int, lines: Callable[[int], Iterator[dict]]) -> None:
    run = 0
    while out.tell() < target:
        out.writelines(json.dumps(line).encode() + b"\n" for line in lines(run))
        run += 1


def claude_code_lines(run: int) -> Iterator[dict]:
    """One session per file, so every "run" here is one more turn of the same session."""
    common = {"sessionId": "s1", "cwd": "/repo", "version": "2.1.230", "gitBranch": "main"}
    common |= {"isSidechain": False, "userType": "external", "entrypoint": "cli"}
    yield {"type": "file-history-snapshot", "messageId": f"m{run}", "snapshot": {}}
    for call_id, tool, args, result in calls(run):
        uid = f"{run}-{call_id}"
        block = {"type": "tool_use", "id": f"toolu_{uid}", "name": tool, "input": args}
        message = {"id": f"msg_{uid}", "role": "assistant", "model": "claude-sonnet-4-5"}
        message |= {"content": [block], "usage": {"input_tokens": 900, "output_tokens": 40}}
        yield common | {
            "type": "assistant",
            "uuid": f"a{uid}",
            "parentUuid": None,
            "message": message,
        }
        answer = {"type": "tool_result", "tool_use_id": f"toolu_{uid}", "content": result}
        yield common | {
            "type": "user",
            "uuid": f"u{uid}",
            "parentUuid": f"a{uid}",
            "message": {"role": "user", "content": [answer]},
            "toolUseResult": {"stdout": result, "stderr": "", "interrupted": False},
        }


def claude_code_turn_lines(run: int) -> Iterator[dict]:
    """`claude_code_lines` with a user prompt every 5 of its runs (200 calls): one session of
    many turns, as an interactive one is."""
    if run % 5 == 0:
        common = {"sessionId": "s1", "cwd": "/repo", "version": "2.1.230", "gitBranch": "main"}
        yield common | {"type": "user", "uuid": f"p{run}", "parentUuid": None,
                        "isSidechain": False, "userType": "external",
                        "message": {"role": "user", "content": f"next task {run}"}}  # fmt: skip
    yield from claude_code_lines(run)


def codex_lines(run: int) -> Iterator[dict]:
    if run == 0:
        yield {
            "timestamp": "t",
            "type": "session_meta",
            "payload": {"id": "s", "cli_version": "0.149"},
        }
    for call_id, _, args, result in calls(run):
        cmd = {"cmd": f"cat {args['path']}", "workdir": "/repo"}
        yield {"timestamp": "t", "type": "response_item", "payload": {
            "type": "function_call", "name": "exec_command", "arguments": json.dumps(cmd),
            "call_id": f"{run}-{call_id}"}}  # fmt: skip
        output = (
            f"Chunk ID: ab\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\n{result}"
        )
        yield {"timestamp": "t", "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": f"{run}-{call_id}", "output": output}}  # fmt: skip


CODEX_OUTPUT = (RESULT + "\n") * 6  # ~1.6 KB of command output, twice in a call's lines


def _codex(kind: str, payload: dict, second: int) -> bytes:
    when = f"2026-01-12T{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000Z"
    line = {"timestamp": when, "type": kind, "payload": payload}
    return json.dumps(line).encode() + b"\n"


def write_codex_session(out: IO[bytes], target: int) -> None:
    """One Codex rollout (0.1xx unified exec) of distinct `exec_command` calls, shaped as the
    sample rollouts are: each call a reasoning item with its agent_reasoning event, the
    function_call, its exec_command_end event (the output again, as aggregated_output), the
    framed function_call_output and a token_count; a user turn (item and event) every 200
    calls, and every 1,000 calls the same failing `pytest` call five times over."""
    meta = {"id": "019b8a6e-5c1f-7d20-9a3b-4c5d6e7f8091", "cwd": "/repo",
            "originator": "codex_cli_rs", "cli_version": "0.120.0", "source": "cli",
            "model_provider": "openai"}  # fmt: skip
    out.write(_codex("session_meta", meta, 0))
    out.write(_codex("turn_context", {"cwd": "/repo", "approval_policy": "on-request",
                                      "model": "gpt-5.2-codex", "effort": "high"}, 0))  # fmt: skip
    call = 0
    while out.tell() < target:
        if call % 200 == 0:
            text = f"next task {call}"
            content = [{"type": "input_text", "text": text}]
            out.write(_codex("response_item", {"type": "message", "role": "user",
                                               "content": content}, call))  # fmt: skip
            out.write(_codex("event_msg", {"type": "user_message", "message": text,
                                           "images": []}, call))  # fmt: skip
        failing = call % 1000 < 5
        if failing:
            cmd, code, text = "pytest -q tests/", 1, "FAILED tests/test_a.py::test_x\n1 failed"
        else:
            cmd, code, text = f"cat src/m{call}.py", 0, f"{CODEX_OUTPUT}{call}\n"
        call_id = f"call_{call:08d}"
        thought = f"**Reading what step {call} needs**"
        out.write(_codex("response_item", {"type": "reasoning", "summary": [
            {"type": "summary_text", "text": thought}], "content": None,
            "encrypted_content": "gAAAAB"}, call))  # fmt: skip
        out.write(_codex("event_msg", {"type": "agent_reasoning", "text": thought}, call))
        arguments = json.dumps({"cmd": cmd, "workdir": "/repo", "yield_time_ms": 10000})
        out.write(_codex("response_item", {"type": "function_call", "name": "exec_command",
                                           "arguments": arguments, "call_id": call_id}, call))  # fmt: skip
        out.write(_codex("event_msg", {"type": "exec_command_end", "call_id": call_id,
                                       "process_id": str(call), "command": ["/bin/bash", "-lc", cmd],
                                       "cwd": "/repo", "stdout": "", "stderr": "",
                                       "aggregated_output": text, "exit_code": code,
                                       "duration": {"secs": 0, "nanos": 51000000}}, call))  # fmt: skip
        framed = (f"Chunk ID: {call:06x}\nWall time: 0.0512 seconds\n"
                  f"Process exited with code {code}\nOriginal token count: 400\nOutput:\n{text}")  # fmt: skip
        out.write(_codex("response_item", {"type": "function_call_output", "call_id": call_id,
                                           "output": framed}, call))  # fmt: skip
        usage = {"input_tokens": 9000, "cached_input_tokens": 8000, "output_tokens": 120,
                 "reasoning_output_tokens": 60, "total_tokens": 9120}  # fmt: skip
        out.write(_codex("event_msg", {"type": "token_count", "info": {
            "total_token_usage": usage, "last_token_usage": usage,
            "model_context_window": 272000}}, call))  # fmt: skip
        call += 1


def gemini_chat_lines(run: int) -> Iterator[dict]:
    if run == 0:
        yield {
            "sessionId": "s",
            "projectHash": "h",
            "startTime": "t",
            "lastUpdated": "t",
            "kind": "main",
        }
    for call_id, tool, args, result in calls(run):
        record = {"id": f"{run}-{call_id}", "timestamp": "2026-01-01T00:00:00Z", "type": "gemini"}
        call = {"id": f"c{run}-{call_id}", "name": tool, "args": args, "status": "success"}
        call["result"] = [
            {"functionResponse": {"id": call["id"], "name": tool, "response": {"output": result}}}
        ]
        yield record | {
            "content": "",
            "toolCalls": [call | {"status": "executing", "result": None}],
        }
        yield record | {"content": "", "toolCalls": [call]}  # re-appended when it finishes


def copilot_lines(run: int) -> Iterator[dict]:
    if run == 0:
        yield {
            "type": "session.start",
            "data": {"sessionId": "s", "producer": "copilot-agent"},
            "id": "0",
        }
    for call_id, tool, args, result in calls(run):
        key = f"{run}-{call_id}"
        start = {"toolCallId": key, "toolName": tool, "arguments": args}
        yield {"type": "tool.execution_start", "data": start, "id": f"s{key}", "timestamp": "t"}
        done = {"toolCallId": key, "success": True, "result": {"content": result}}
        yield {"type": "tool.execution_complete", "data": done, "id": f"e{key}", "timestamp": "t"}


def _copilot(kind: str, data: dict, n: int) -> bytes:
    when = f"2026-02-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
    line = {"type": kind, "data": data, "id": f"{n:08x}-0000-4000-8000-000000000000",
            "timestamp": when, "parentId": f"{n - 1:08x}-0000-4000-8000-000000000000"}  # fmt: skip
    return json.dumps(line).encode() + b"\n"


def write_copilot_session(out: IO[bytes], target: int) -> None:
    """One Copilot CLI `events.jsonl` session, shaped as the sample's events are: each call an
    `assistant.turn_start`, an `assistant.message` with its text, reasoning and the request,
    `tool.execution_start` (the arguments again) and `tool.execution_complete` with ~3.4 KB of
    output; a user message every 200 calls, and every 1,000 calls the same failing shell call
    (success true, "exit code 1" in its text) five times over."""
    start = {"sessionId": "2f1c0a6e-bench", "version": 1, "producer": "copilot-agent",
             "copilotVersion": "1.0.3", "selectedModel": "claude-sonnet-4.5",
             "context": {"cwd": "/repo", "gitRoot": "/repo", "repository": "u/app"}}  # fmt: skip
    out.write(_copilot("session.start", start, 0))
    call = event = 0
    while out.tell() < target:
        event += 5
        if call % 200 == 0:
            out.write(_copilot("user.message", {"content": f"next task {call}",
                                                "turnId": f"t{call}"}, event))  # fmt: skip
        failing = call % 1000 < 5
        if failing:
            tool, args = "bash", {"command": "npm test", "description": "run the tests"}
            text = "FAILED tests/a.test.js\n<shellId: 0 completed with exit code 1>"
        else:
            tool, args = ("view", "grep")[call % 2], {"path": f"/repo/src/m{call}.ts"}
            text = f"{SESSION_RESULT} {call}"
        call_id = f"toolu_{call:08d}"
        out.write(_copilot("assistant.turn_start", {"turnId": f"t{call}"}, event + 1))
        request = {"toolCallId": call_id, "name": tool, "arguments": args}
        out.write(_copilot("assistant.message", {"messageId": f"m{call}",
                           "content": f"Reading what step {call} needs.", "toolRequests": [request],
                           "reasoningText": "Look before editing.", "outputTokens": 120}, event + 2))  # fmt: skip
        out.write(_copilot("tool.execution_start", {"toolCallId": call_id, "toolName": tool,
                                                    "arguments": args}, event + 3))  # fmt: skip
        out.write(_copilot("tool.execution_complete", {"toolCallId": call_id, "success": True,
                                                       "result": {"content": text}}, event + 4))  # fmt: skip
        call += 1
    totals = {"requests": {"count": call}, "usage": {"outputTokens": 120 * call}}
    shutdown = {"shutdownType": "routine", "modelMetrics": {"claude-sonnet-4.5": totals}}
    out.write(_copilot("session.shutdown", shutdown, event + 5))


def _pi(kind: str, n: int, **fields: object) -> bytes:
    when = f"2025-12-10T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
    line = {"type": kind, "id": f"{n:08x}", "parentId": f"{n - 1:08x}" if n else None}
    return json.dumps(line | {"timestamp": when} | fields).encode() + b"\n"


def write_pi_session(out: IO[bytes], target: int) -> None:
    """One pi session (v3: entries with id and parentId, one chain), shaped as the sample's
    entries are: each call an assistant message (a text block and the toolCall, usage with
    cache reads and its cost) and its toolResult with ~3.4 KB of text; a user message every
    200 calls, and every 1,000 calls the same failing `npm test` five times over."""
    out.write(json.dumps({"type": "session", "version": 3, "id": "d703a1a9-bench",
                          "timestamp": "2025-12-10T00:00:00.000Z", "cwd": "/repo"}).encode()
              + b"\n")  # fmt: skip
    out.write(_pi("model_change", 0, provider="anthropic", modelId="claude-sonnet-4-5"))
    call = 0
    entry = 1
    while out.tell() < target:
        if call % 200 == 0:
            content = [{"type": "text", "text": f"next task {call}"}]
            out.write(_pi("message", entry, message={"role": "user", "content": content}))
            entry += 1
        if call % 1000 < 5:
            tool, args = "bash", {"command": "npm test"}
            text, error = "FAILED tests/a.test.js\n\nCommand exited with code 1", True
        else:
            tool, args = ("read", "bash")[call % 2], {"path": f"src/m{call}.ts"}
            text, error = f"{SESSION_RESULT} {call}", False
        call_id = f"toolu_{call:020d}"
        usage = {"input": 7, "output": 231, "cacheRead": 1684, "cacheWrite": 95,
                 "cost": {"input": 2.1e-05, "output": 0.003465, "cacheRead": 0.0005052,
                          "cacheWrite": 0.0003562, "total": 0.0043476}}  # fmt: skip
        blocks = [{"type": "text", "text": f"Reading what step {call} needs."},
                  {"type": "toolCall", "id": call_id, "name": tool, "arguments": args}]  # fmt: skip
        message = {"role": "assistant", "content": blocks, "api": "anthropic-messages",
                   "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage,
                   "stopReason": "toolUse", "timestamp": 1765324800000 + entry}  # fmt: skip
        out.write(_pi("message", entry, message=message))
        result = {"role": "toolResult", "toolCallId": call_id, "toolName": tool,
                  "content": [{"type": "text", "text": text}], "isError": error,
                  "timestamp": 1765324800001 + entry}  # fmt: skip
        out.write(_pi("message", entry + 1, message=result))
        entry += 2
        call += 1


def write_cursor_transcript(out: IO[bytes], target: int) -> None:
    """One Cursor agent transcript (no ids, times or usage), shaped as the sample's lines
    are: each call an assistant line (its text, a thinking block every third call, and the
    call: a `Read`, or a `StrReplace` with ~1.5 KB of old and new text), then a user line with
    its `tool_result` (~3.4 KB for a `Read`). A real transcript often has no results; every
    call is answered here because the reader that held the run whole scanned all the calls
    still waiting for each result, so unanswered calls made "before" quadratic (the spooled
    reader keeps at most cursor.MAX_OPEN_CALLS waiting). A `<user_query>` every 200 calls,
    and every 1,000 calls the same failing `Shell` call five times over."""
    call = 0
    while out.tell() < target:
        if call % 200 == 0:
            query = f"<user_query>\nnext task {call}\n</user_query>"
            line: dict = {"role": "user", "message": {"content": [{"type": "text", "text": query}]}}
            out.write(json.dumps(line).encode() + b"\n")
        blocks: list[dict] = [{"type": "text", "text": f"Reading what step {call} needs."}]
        if call % 3 == 0:
            blocks.insert(0, {"type": "thinking", "thinking": "Look before editing."})
        failing = call % 1000 < 5
        if failing:
            tool, args, result = "Shell", {"command": "npm run build"}, "sh: 1: tsc: not found"
        elif call % 2:
            tool, args = "Read", {"path": f"/repo/src/m{call}.ts"}
            result = f"{SESSION_RESULT} {call}"
        else:
            old = f"{RESULT}\n" * 4
            tool, result = "StrReplace", f"The file /repo/src/m{call}.ts has been updated."
            args = {"path": f"/repo/src/m{call}.ts", "old_string": old, "new_string": old + "x"}
        blocks.append({"type": "tool_use", "name": tool, "input": args})
        out.write(
            json.dumps({"role": "assistant", "message": {"content": blocks}}).encode() + b"\n"
        )
        answer = {"type": "tool_result", "content": [{"type": "text", "text": result}]}
        line = {"role": "user", "message": {"content": [answer]}}
        out.write(json.dumps(line).encode() + b"\n")
        call += 1


def hook_lines(run: int) -> Iterator[dict]:
    base = {"session_id": f"s{run}", "cwd": "/repo", "transcript_path": "/t.jsonl"}
    for call_id, tool, args, result in calls(run):
        pre = base | {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": args}
        yield pre | {"tool_use_id": call_id}
        yield pre | {"hook_event_name": "PostToolUse", "tool_use_id": call_id,
                     "tool_response": {"stdout": result, "stderr": ""}}  # fmt: skip


def agents_lines(run: int) -> Iterator[dict]:
    trace = f"trace_{run:032x}"
    yield {"object": "trace", "id": trace, "workflow_name": "bench"}
    for call_id, tool, args, result in calls(run):
        data = {"type": "function", "name": tool, "input": json.dumps(args), "output": result}
        yield {"object": "trace.span", "id": f"span_{run}_{call_id}", "trace_id": trace,
               "parent_id": None, "started_at": "2026-01-01T00:00:00+00:00",
               "ended_at": None, "span_data": data, "error": None}  # fmt: skip


def tau2_simulation(run: int) -> dict:
    messages: list[dict] = [{"role": "system", "content": "policy"}]
    for call_id, tool, args, result in calls(run):
        messages.append({"role": "assistant", "content": None, "turn_idx": 0, "tool_calls": [
            {"id": call_id, "name": tool, "arguments": args, "requestor": "assistant"}]})  # fmt: skip
        messages.append({"role": "tool", "id": call_id, "content": result, "error": False})
    return {"id": f"sim{run}", "task_id": str(run), "trial": 0, "termination_reason": "user_stop",
            "reward_info": {"reward": 1.0}, "messages": messages}  # fmt: skip


def write_tau2(out: IO[bytes], target: int) -> None:
    out.write(b'{"timestamp": "t", "info": {"num_trials": 1}, "tasks": [], "simulations": [\n')
    run = 0
    while out.tell() < target:
        out.write((b",\n" if run else b"") + json.dumps(tau2_simulation(run)).encode())
        run += 1
    out.write(b"\n]}\n")


def write_opencode(out: IO[bytes], target: int) -> None:
    """One session per export: every "run" is one more assistant message of it."""
    out.write(b'{"info": {"id": "ses_bench", "title": "bench"}, "messages": [\n')
    run = 0
    while out.tell() < target:
        parts = [
            {
                "type": "tool",
                "callID": f"{run}-{call_id}",
                "tool": tool,
                "state": {
                    "status": "completed",
                    "input": args,
                    "output": result,
                    "metadata": {"output": result, "exit": 0},
                },
            }  # fmt: skip
            for call_id, tool, args, result in calls(run)
        ]
        info = {"id": f"msg_{run:08d}", "role": "assistant", "tokens": {"input": 10, "output": 5}}
        out.write((b",\n" if run else b"") + json.dumps({"info": info, "parts": parts}).encode())
        run += 1
    out.write(b"\n]}\n")


WRITERS: dict[str, tuple[str, Callable[[IO[bytes], int], None]]] = {
    "native": ("native", write_native),
    "native-session": ("native", write_native_session),
    "chat": ("chat", lambda out, n: write_array(out, n, chat_run)),
    "responses": ("responses", lambda out, n: write_array(out, n, responses_run)),
    "anthropic": ("anthropic", lambda out, n: write_array(out, n, anthropic_run)),
    "tree": ("tree", lambda out, n: write_array(out, n, tree_run)),
    "otlp-json": ("otlp", write_otlp_json),
    "otlp-pb": ("otlp", write_otlp_pb),
    "swe-agent": ("swe-agent", write_swe_agent),
    "mini-swe-agent": ("mini-swe-agent", write_mini_swe_agent),
    "openhands-gui": ("openhands", write_openhands_gui),
    "openhands-eval": ("openhands", write_openhands_eval),
    "tree-root": ("tree", write_tree_root),
    "claude-code": ("claude-code", lambda out, n: _jsonl(out, n, claude_code_lines)),
    "claude-code-turns": ("claude-code", lambda out, n: _jsonl(out, n, claude_code_turn_lines)),
    "codex": ("codex", lambda out, n: _jsonl(out, n, codex_lines)),
    "codex-session": ("codex", write_codex_session),
    "gemini-chat-jsonl": ("gemini-chat", lambda out, n: _jsonl(out, n, gemini_chat_lines)),
    "copilot-cli": ("copilot-cli", lambda out, n: _jsonl(out, n, copilot_lines)),
    "copilot-session": ("copilot-cli", write_copilot_session),
    "pi-session": ("pi", write_pi_session),
    "cursor-transcript": ("cursor", write_cursor_transcript),
    "claude-code-hooks": ("claude-code-hooks", lambda out, n: _jsonl(out, n, hook_lines)),
    "openai-agents": ("openai-agents", lambda out, n: _jsonl(out, n, agents_lines)),
    "tau2": ("tau2", write_tau2),
    "opencode": ("opencode", write_opencode),
}


def _peak_mb() -> float:
    """This process's own peak RSS (VmHWM; ru_maxrss would carry a parent's over exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_scan(path: str, format: str) -> dict:
    """`loopboard scan --json --format F FILE` in this process: the figures."""
    from loopboard.cli import scan

    start = time.perf_counter()
    saved, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
    try:
        status = scan.main(["--json", "--format", format, path])
    finally:
        sys.stdout.close()
        sys.stdout = saved
    if status == 2:
        raise SystemExit("scan failed")
    return {"seconds": time.perf_counter() - start, "peak_mb": _peak_mb()}


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    os.environ.setdefault("SECRET_KEY", "bench")
    import django

    django.setup()


BENCH_PROJECT = "bench-importers"


def store_for_worker(path: str, format: str) -> dict:
    """Store the file as an uploaded trace (not measured); return its id."""
    _django()
    from runs.models import Project
    from runs.services import ingest, queue

    queue.queue_ingest = lambda ids: None  # the measuring process imports it
    project, _ = Project.objects.get_or_create(slug=BENCH_PROJECT, defaults={"name": "bench"})
    with open(path, "rb") as handle:
        trace, _ = ingest.store_trace(project, handle.read(), name=os.path.basename(path),
                                      format=format)  # fmt: skip
    return {"trace": trace.pk}


def measure_worker(trace_id: str, format: str) -> dict:
    """What the worker does with a stored trace: its import, then its analysis (the
    messages the import sends are taken here instead of a broker's); the figures."""
    _django()
    from runs.models import Project, Run
    from runs.services import analysis, deletion, ingest, queue

    queued: list[int] = []
    queue.queue_analysis = lambda ids, bulk=False: queued.extend(ids)
    queue.queue_batch = lambda ids, again=False: queued.extend(ids)
    queue.queue_alerts = lambda *args, **kwargs: None
    start = time.perf_counter()
    ingest.ingest_trace(int(trace_id))
    imported = time.perf_counter() - start
    while queued:
        batch = list(queued)
        queued.clear()
        analysis.analyze_batch(batch)
    seconds = time.perf_counter() - start
    peak = _peak_mb()
    runs = Run.objects.filter(trace_id=int(trace_id))
    figures = {"runs": runs.count(), "steps": sum(runs.values_list("step_count", flat=True)),
               "seconds": seconds, "import_seconds": imported, "peak_mb": peak,
               "verdicts": sorted(runs.values_list("verdict", flat=True))}  # fmt: skip
    deletion.delete_runs(runs)
    Project.objects.filter(slug=BENCH_PROJECT).delete()
    return figures


def measure(path: str, format: str) -> dict:
    """Parse one file (in this process) and return the figures."""
    from runs.importers import Limits, iter_runs

    start = time.perf_counter()
    runs = steps = kept = 0
    for run in iter_runs(path, format=format, limits=Limits(max_bytes=1 << 40)):
        runs += 1
        steps += len(run.steps)
        kept = max(kept, sum(_size(s.text) + _size(s.result) + _size(s.args) for s in run.steps))
    seconds = time.perf_counter() - start
    return {
        "runs": runs,
        "steps": steps,
        "seconds": seconds,
        "peak_mb": _peak_mb(),
        "kept_mb": kept / 1e6,
    }


def _size(value: object) -> int:
    """The characters of a step's value (strings as they are, other JSON as text)."""
    if value is None:
        return 0
    return len(value) if isinstance(value, str) else len(json.dumps(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=60)
    parser.add_argument("--formats", default=",".join(WRITERS))
    parser.add_argument(
        "--through",
        default="parse",
        help="parse (iter_runs), scan (`loopboard scan`), worker (the worker's import and "
        "analysis of a stored trace: uses the configured database), or several, comma-separated",
    )
    parser.add_argument("--dir", help="write the files here and keep them (reused when there)")
    for mode in ("measure", "measure-scan", "store", "measure-worker"):
        parser.add_argument(
            f"--{mode}", nargs=2, metavar=("FILE", "FORMAT"), help=argparse.SUPPRESS
        )
    args = parser.parse_args()
    for mode, run in (("measure", measure), ("measure_scan", measure_scan),
                      ("store", store_for_worker), ("measure_worker", measure_worker)):  # fmt: skip
        if getattr(args, mode):
            print(json.dumps(run(*getattr(args, mode))))
            return
    print(
        f"{'format':<18} {'through':<7} {'MB':>7} {'runs':>6} {'steps':>9} {'s':>7} "
        f"{'MB/s':>6} {'steps/s':>8} {'peak RSS MB':>12} {'kept MB':>8}",
        flush=True,
    )
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        where = args.dir or tmp
        for label in args.formats.split(","):
            format, writer = WRITERS[label]
            path = os.path.join(where, f"{label}-{args.mb:g}.data")
            if not (args.dir and os.path.exists(path)):
                with open(path, "wb") as out:
                    writer(out, int(args.mb * 1024 * 1024))
            size = os.path.getsize(path) / 1e6
            for through in args.through.split(","):
                failed |= not _report(label, through, path, format, size)
            if not args.dir:
                os.remove(path)
    sys.exit(1 if failed else 0)


def _child(mode: str, *values: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, f"--{mode}", *values], capture_output=True, text=True
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(last)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(label: str, through: str, path: str, format: str, size: float) -> bool:
    """Measure one file one way, in a process of its own, and print its line."""
    try:
        if through == "parse":
            r = _child("measure", path, format)
        elif through == "scan":
            r = _child("measure-scan", path, format) | {"runs": 0, "steps": 0, "kept_mb": 0}
        elif through == "worker":
            trace = _child("store", path, format)["trace"]
            r = _child("measure-worker", str(trace), format) | {"kept_mb": 0}
        else:
            raise RuntimeError(f"unknown --through {through!r}")
    except RuntimeError as exc:  # one format failing does not hide the others' figures
        print(f"{label:<18} {through:<7} {size:7.1f}  failed: {exc}", flush=True)
        return False
    print(
        f"{label:<18} {through:<7} {size:7.1f} {r['runs']:6d} {r['steps']:9d} "
        f"{r['seconds']:7.2f} {size / r['seconds']:6.1f} {r['steps'] / r['seconds']:8.0f} "
        f"{r['peak_mb']:12.0f} {r['kept_mb']:8.1f}",
        flush=True,
    )
    return True


if __name__ == "__main__":
    main()
