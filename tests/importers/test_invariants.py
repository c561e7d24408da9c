"""Invariants every importer keeps, checked over every sample file in tests/data.

- A tool call's id is unique within its run after import (one call is one step: the kit's
  merge in runs/importers/kit/merge.py joins the copies a source writes of one call).
- The tool-call count of a sample equals a count taken by reading the file, written down here
  with how it was counted (never by running the importer).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from runs.importers import iter_runs
from runs.importers.errors import TraceError

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = sorted(path for path in DATA.rglob("*") if path.is_file() and path.name != "README.md")
# Files in tests/data that are no trace on purpose: each says why it is refused.
NOT_TRACES = {
    "detection/cases/labels.json": "unknown trace format",  # the labels of the detection cases
    "importers/claude_code_2_1_2xx_metadata_only.jsonl": "no messages",
}

# Tool calls per run, in file order, counted by reading each file.
HAND_COUNTS = {
    # every call written twice (a `tool_call` part and a `tool_calls` entry): 5 ids
    "importers/chat_export_calls_twice.json": [5],
    # `"type":"tool_use"` blocks
    "traces/claude-code/coverage-test-fix/transcript.jsonl": [13],
    "traces/claude-code/python-to-rust-port/transcript.jsonl": [39],
    # `"type":"toolCall"` blocks
    "traces/pi/large-session.jsonl": [391],
    # steps with an `observation` (each holds one tool result)
    "traces/atif/session-2025-12-05T08-00-23-404Z-ew8gut.atif.json": [5],
    # `tool_calls` entries of the sample's messages
    "traces/inspect-ai/2025-05-12T20-27-36-04-00_browser.json": [4],
    "traces/inspect-ai/log_message_deduplication.eval": [5],
    # `agent.custom_tool_use` / `agent.mcp_tool_use` / `agent.tool_use` events
    "traces/claude-managed-agents/anthropic_managed_custom_tools.jsonl": [1],
    "traces/claude-managed-agents/anthropic_managed_mcp_tools_reject.jsonl": [2],
    # assistant messages (one bash command each)
    "traces/mini-swe-agent/matplotlib__matplotlib-23314.traj.json": [21],
    # `trajectory` entries
    "traces/swe-agent/eps.traj": [14],
    "traces/swe-agent/6e44b9__sweagenttestrepo-1c2844.traj": [5],
    # agent actions other than `message` (run, edit, run_ipython, finish)
    "traces/openhands/basic_gui_mode.json": [4],
    "traces/openhands/resolver_legacy_output.jsonl": [4, 22],
    # TOOL spans (openinference.span.kind) other than smolagents' final_answer
    "importers/otlp_langgraph_openinference.json": [3],
    "importers/otlp_smolagents_openinference.json": [3],
    # a wrapped OpenAI chat call: no tool calls
    "traces/langsmith/langsmith_py_wrap_openai_.json": [0],
    # per session: the model's `>>>>>>> REPLACE` blocks (not aider's echo of a failed one)
    # plus `> Running <command>` lines
    "traces/aider/afi-core.aider.chat.history.md": [0, 4, 0, 0, 0, 13, 3, 1, 16],
}


def name_of(path: Path) -> str:
    return path.relative_to(DATA).as_posix()


def test_every_hand_counted_file_is_a_sample():
    names = {name_of(path) for path in SAMPLES}
    assert set(HAND_COUNTS) <= names and set(NOT_TRACES) <= names


@pytest.mark.parametrize("path", SAMPLES, ids=name_of)
def test_call_ids_are_unique_per_run(path):
    name = name_of(path)
    if name in NOT_TRACES:
        with pytest.raises(TraceError, match=NOT_TRACES[name]):
            list(iter_runs(path))
        return
    runs = list(iter_runs(path))
    assert runs
    for run in runs:
        ids = Counter(s.id for s in run.steps if s.kind == "tool_call" and s.id is not None)
        assert [i for i, n in ids.items() if n > 1] == [], (name, run.id)
        assert [s.seq for s in run.steps] == list(range(len(run.steps)))


@pytest.mark.parametrize("name", sorted(HAND_COUNTS))
def test_tool_call_count_equals_the_hand_count(name):
    runs = list(iter_runs(DATA / name))
    assert [run.tool_calls for run in runs] == HAND_COUNTS[name]
