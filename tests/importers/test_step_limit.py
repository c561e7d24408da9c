"""The step limit (Limits.max_steps, steps per run), enforced once, in the importer kit.

For every format: a run of exactly the limit is read, and the step that takes a run past it
fails the whole file with the one message, naming the file, the run and the limit (and the
line, in a format read line by line). In a format read line by line, the file fails on the
line where the run passed the limit, not at its end: the lines before it read without
error, so an importer holds no more than the limit of a run's steps.

The inputs are real samples (tests/data) or, for the formats without one, documents built
here; the limit is set one below the steps of the input's biggest run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runs.importers import IMPORTERS, iter_runs
from runs.importers.errors import TooManySteps, TraceError
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data"

SAMPLES = {
    "claude-code": "importers/claude_code_2_1_2xx_compacted.jsonl",
    "codex": "importers/codex_0_1xx_polling.jsonl",
    "gemini-stream": "importers/gemini_stream.jsonl",
    "gemini-chat": "importers/gemini_chat_checkpoint.jsonl",
    "gemini-chat (json)": "importers/gemini_chat.json",
    "pi": "importers/pi_v3_branches.jsonl",
    "atif": "importers/atif_terminus2.json",
    "managed-agents": "traces/claude-managed-agents/anthropic_managed_mcp_tools_reject.jsonl",
    "managed-agents (json)": "importers/managed_agents_events.json",
    "inspect-ai": "importers/inspect_ai_errors.json",
    "inspect-ai (eval)": "traces/inspect-ai/log_message_deduplication.eval",
    "langsmith": "importers/langsmith_agent_runs.json",
    "aider": "traces/aider/afi-core.aider.chat.history.md",
    "mini-swe-agent": "importers/mini_swe_agent_1_1_toolcalls.traj.json",
    "swe-agent": "traces/swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    "openhands": "importers/openhands_output.jsonl",
    "openhands (gui)": "traces/openhands/basic_gui_mode.json",
    "openai-agents": "importers/openai_agents_trace.jsonl",
    "copilot-cli": "importers/copilot_cli_events.jsonl",
    "opencode": "importers/opencode_export.json",
    "claude-code-hooks": "importers/claude_code_hooks.jsonl",
    "cursor": "importers/cursor_transcript.jsonl",
    "cursor (hooks)": "importers/cursor_hooks.jsonl",
    "tau2": "importers/tau2_results.json",
    "otlp": "importers/otlp_claude_code_logs_only.json",
    "otlp (protobuf)": "importers/otlp_gen_traces.pb",
    "chat": "importers/chat_subagents_parallel.jsonl",
    "chat (json)": "importers/chat_blocks_subagent.json",
    "native": "detection/progress.jsonl",
}
# Hook logs write a call before it runs and again after; the two count as two steps until
# the kit's merge makes them one, so these inputs keep only the records after.
BEFORE = {"PreToolUse", "beforeShellExecution", "beforeMCPExecution", "preToolUse"}


def _call(index: int) -> dict:
    return {"id": f"c{index}", "type": "function",
            "function": {"name": "f", "arguments": json.dumps({"i": index})}}  # fmt: skip


BUILT = {
    "responses": [
        item
        for i in range(4)
        for item in (
            {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"},
        )
    ],
    "anthropic": {
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "go"},
            *(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"step {i}"},
                        {"type": "tool_use", "id": f"c{i}", "name": "f", "input": {"i": i}},
                    ],
                }  # fmt: skip
                for i in range(3)
            ),
        ],
    },
    "tree": {
        "type": "agent",
        "name": "root",
        "children": [{"type": "tool", "name": "f", "args": {"i": i}} for i in range(5)],
    },
    "generic": {"log": [{"tool_name": "f", "arguments": {"i": i}} for i in range(5)]},
}
# Formats read line by line: the failure names the line where the run passed the limit.
BY_LINE = {
    "claude-code", "codex", "gemini-stream", "pi", "managed-agents", "aider", "openhands",
    "openai-agents", "copilot-cli", "claude-code-hooks", "cursor", "cursor (hooks)", "chat",
    "native", "gemini-chat",
}  # fmt: skip
CASES = sorted([*SAMPLES, *BUILT])
# aider's steps are blocks of lines, each known only when a later block begins (at the end
# of the file, when the file ends), so its failure names that later line.
BLOCKS = {"aider"}
# The run is named by the id known when it passed the limit: a trajectory whose id comes
# after its messages is still named after its file then.
NAMED_AS_READ = {"mini-swe-agent": "mini_swe_agent_1_1_toolcalls.traj.json"}


def _format(case: str) -> str:
    return case.split(" (")[0]


def _input(case: str) -> tuple[str, bytes]:
    if case in BUILT:
        return f"{case}.json", json.dumps(BUILT[case], indent=1).encode()
    path = DATA / SAMPLES[case]
    data = path.read_bytes()
    if case in ("claude-code-hooks", "cursor (hooks)"):
        lines = [line for line in data.splitlines() if json.loads(line)["hook_event_name"]
                 not in BEFORE]  # fmt: skip
        data = b"\n".join(lines) + b"\n"
    return path.name, data


def _runs(data: bytes, case: str, source: str, max_steps: int | None = None) -> list:
    limits = Limits() if max_steps is None else Limits(max_steps=max_steps)
    return list(iter_runs(data, source=source, format=_format(case), limits=limits))


def test_every_format_has_a_case():
    assert {_format(case) for case in CASES} == set(IMPORTERS)


@pytest.mark.parametrize("case", CASES)
def test_the_step_that_passes_the_limit_fails_the_file_with_one_message(case):
    source, data = _input(case)
    found = _runs(data, case, source)
    most = max(len(run.steps) for run in found)
    assert most >= 3
    assert max(len(run.steps) for run in _runs(data, case, source, most)) == most
    with pytest.raises(TooManySteps) as info:
        _runs(data, case, source, most - 1)
    error = info.value
    biggest = {run.id for run in found if len(run.steps) == most}
    if case in NAMED_AS_READ:
        biggest = {NAMED_AS_READ[case]}
    named = re.fullmatch(  # an archive's runs are named with their member: `x.eval!member`
        rf"{re.escape(source)}(?:![^:]+)?(?::(\d+))?: run (.+) has more than {most - 1} steps "
        r"\(the limit of steps per run\)",
        str(error),
    )
    assert named is not None, str(error)
    assert named[2] in {repr(run_id) for run_id in biggest}, str(error)
    assert (error.line is not None) == (case in BY_LINE), str(error)


@pytest.mark.parametrize("case", sorted(BY_LINE - BLOCKS))
def test_a_file_read_by_line_fails_on_the_line_that_passes_the_limit(case):
    source, data = _input(case)
    most = max(len(run.steps) for run in _runs(data, case, source))
    with pytest.raises(TooManySteps) as info:
        _runs(data, case, source, most - 1)
    line = info.value.line
    assert line is not None
    before = b"\n".join(data.split(b"\n")[: line - 1]) + b"\n"
    try:
        _runs(before, case, source, most - 1)  # the lines before it stay within the limit
    except TooManySteps as exc:
        pytest.fail(f"the lines before line {line} already fail: {exc}")
    except TraceError:
        pass  # too little of the file to be a trace: not the limit
