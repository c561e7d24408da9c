"""OpenHands importer, checked against the real samples in tests/data/traces/openhands and a
hand-written eval `output.jsonl` (tests/data/importers/openhands_output.jsonl).

Counts taken by hand from the files, independently of the importer:
- basic_gui_mode.json: `jq '[.[]|select(.action!=null and (.action|IN("message","system",
  "recall","change_agent_state")|not))]|length'` -> 4 calls (run, edit, edit, run);
  `jq '[.[]|select(.observation=="error" or ((.extras.metadata.exit_code//0)!=0))]|length'`
  -> 1 error (the http.server run, exit code -1).
- resolver_legacy_output.jsonl: 2 lines -> 2 runs; per line `[.history[]|select(.action!=
  null and .action!="message")]|length` -> 4 and 22 calls; observations whose content starts
  "[Your proposed edit…" / "[No exact match…" / "ERROR:" or with exit_code != 0 -> 0 and 11.
- openhands_output.jsonl: 3 lines, one cut on purpose; each good run has run, read, think,
  finish actions + 1 `error` observation with `cause: null` = 5 calls, errors: run exit 1,
  read "ERROR:" = 2, and the rejected call (`cause: null`, a function name: no valid action)
  is "invalid", not "error".
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runs.importers import detect_format, iter_runs, openhands
from runs.importers.detect import sample_of
from runs.importers.errors import TraceError

ROOT = Path(__file__).resolve().parents[1] / "data"
GUI = ROOT / "traces" / "openhands" / "basic_gui_mode.json"
RESOLVER = ROOT / "traces" / "openhands" / "resolver_legacy_output.jsonl"
EVAL = ROOT / "importers" / "openhands_output.jsonl"


def runs_of(data: bytes, **kwargs):
    return list(iter_runs(data, source=kwargs.pop("source", "x.txt"), **kwargs))


def errors(run) -> int:
    return sum(1 for step in run.steps if step.status == "error")


@pytest.mark.parametrize(
    ("path", "expected"),
    [(GUI, [(4, 1)]), (RESOLVER, [(4, 0), (22, 11)]), (EVAL, [(5, 2), (5, 2)])],
)
def test_hand_counted_runs_calls_and_errors(path, expected):
    runs = runs_of(path.read_bytes())
    assert {run.format for run in runs} == {"openhands"}
    assert [(run.tool_calls, errors(run)) for run in runs] == expected
    assert all(step.parent_id is None for run in runs for step in run.steps)


def test_gui_export_pairs_actions_with_observations_by_cause():
    (run,) = runs_of(GUI.read_bytes())
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [c.tool for c in calls] == ["run", "edit", "edit", "run"]
    assert calls[0].args == {
        "command": "mkdir -p /workspace/todo-app",
        "is_input": False,
        "blocking": False,
        "hidden": False,
    }
    assert "thought" not in calls[1].args and "translated_ipython_code" not in calls[1].args
    assert run.steps[0].kind == "user" and run.steps[-1].kind == "assistant"
    assert run.steps[calls[0].seq - 1].kind == "assistant"  # the thought, before its call
    assert calls[3].status == "error" and calls[3].result.startswith("Serving HTTP")
    assert calls[0].tokens_in is None and run.steps[1].tokens_in == 3439


def test_legacy_history_is_paired_by_order():
    first, second = runs_of(RESOLVER.read_bytes())
    assert first.id == "x.txt:1" and second.id == "x.txt:2"
    calls = [s for s in first.steps if s.kind == "tool_call"]
    assert [c.tool for c in calls] == ["run", "run_ipython", "run", "finish"]
    assert calls[0].args == {"command": "touch LICENSE"}
    assert calls[-1].result is None  # finish has no observation
    assert first.metadata["cost"] == pytest.approx(0.070713)


def test_eval_output_metadata_orphan_error_and_think():
    first, second = runs_of(EVAL.read_bytes())
    assert first.id == "demo__repo-1" and first.metadata["model"] == "anthropic/claude-3-7-sonnet"
    assert second.metadata["error"].startswith("RuntimeError")
    tools = [(s.tool, s.status) for s in first.steps if s.kind == "tool_call"]
    assert tools == [
        ("run", "error"),
        ("read", "error"),
        ("str_replace_editor", "invalid"),
        ("think", "ok"),
        ("finish", "ok"),
    ]
    think = next(s for s in first.steps if s.tool == "think")
    assert think.args == {"thought": "The bug is in add()."}
    assert [s.kind for s in first.steps[:3]] == ["system", "user", "system"]
    assert second.skipped == 1 and second.warnings[0].startswith("x.txt:2: invalid JSON")


def test_oldest_pairs_schema():
    history = [
        [
            {"action": "run", "command": "ls", "thought": "look"},
            {"observation": "run", "content": "a", "exit_code": 2},
        ]
    ]
    data = json.dumps({"instance_id": "old", "instruction": "t", "history": history}).encode()
    (run,) = runs_of(data)
    assert [(s.kind, s.tool, s.status) for s in run.steps] == [
        ("assistant", None, "ok"),
        ("tool_call", "run", "error"),
    ]


@pytest.mark.parametrize("path", [GUI, RESOLVER, EVAL])
def test_detected_by_content_and_through_gzip(path):
    data = path.read_bytes()
    assert detect_format(data[:65536]) == "openhands"
    assert runs_of(gzip.compress(data))[0].format == "openhands"


@pytest.mark.parametrize(
    "head",
    [
        b'[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]',
        b'[{"task_id": 1, "trial": 0, "reward": 1.0, "traj": [{"role": "system"}]}]',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}',
        b'{"type": "tool_call", "tool": "a", "args": {}}\n',
    ],
)
def test_foreign_formats_are_not_claimed(head):
    verdict = openhands.claim(sample_of(head))
    assert verdict.score == 0 and verdict.reason


@pytest.mark.parametrize("data", [b"", GUI.read_bytes()[:4000]])
def test_empty_or_truncated_fails(data):
    with pytest.raises(TraceError):
        runs_of(data, format="openhands")


ALL_SAMPLES = {
    "swe-agent": [
        "traces/swe-agent/eps.traj",
        "traces/swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    ],
    "mini-swe-agent": ["traces/mini-swe-agent/matplotlib__matplotlib-23314.traj.json"],
    "openhands": [
        "traces/openhands/basic_gui_mode.json",
        "traces/openhands/resolver_legacy_output.jsonl",
        "importers/openhands_output.jsonl",
    ],
    "claude-code": [
        "traces/claude-code/coverage-test-fix/transcript.jsonl",
        "traces/claude-code/python-to-rust-port/transcript.jsonl",
    ],
    "codex": ["importers/codex_rollout.jsonl"],
    "gemini-stream": ["importers/gemini_stream.jsonl"],
    "gemini-chat": ["importers/gemini_chat.json"],
}


@pytest.mark.parametrize(
    ("name", "path"), [(n, p) for n, paths in ALL_SAMPLES.items() for p in paths]
)
def test_each_harness_file_is_claimed_best_by_its_own_importer(name, path):
    from runs.importers import explain_format

    verdict = explain_format((ROOT / path).read_bytes()[:65536])
    assert verdict.best is not None and verdict.best[0] == name, verdict.explain()


def test_eval_file_whose_first_line_is_longer_than_the_head_is_claimed():
    # an eval line often runs to megabytes: the head then holds part of one object
    row = json.loads(EVAL.read_bytes().splitlines()[0])
    row["instance"] = {"problem_statement": "p" * 100_000}
    data = (json.dumps(row) + "\n").encode()
    head = data[:65536]
    verdict = openhands.claim(sample_of(head))
    assert verdict.score >= 0.6, verdict.reason
    assert detect_format(head) == "openhands"
    (run,) = runs_of(data)
    assert (run.tool_calls, errors(run)) == (5, 2)  # as the first line of the fixture


def test_gui_array_claim_and_reason():
    verdict = openhands.claim(sample_of(GUI.read_bytes()[:65536]))
    assert verdict.score >= 0.8 and "OpenHands events" in verdict.reason
    assert openhands.claim(sample_of(b'{"trajectory": [], "history": []}')).score == 0


def test_bad_lines_count_on_the_next_run_and_trailing_ones_on_the_last():
    good = EVAL.read_bytes().splitlines()[0]
    data = b"\n".join([good, b"{bad", good, b"[1]", good, b"{worse", b""])
    first, second, third = runs_of(data)
    # line 2 is before the 2nd run, line 4 before the 3rd, line 6 after it
    assert (first.skipped, second.skipped, third.skipped) == (0, 1, 2)
    assert third.warnings[0].startswith("x.txt:4: expected a JSON object")


def test_an_array_without_any_event_fails():
    with pytest.raises(TraceError, match="no OpenHands event"):
        runs_of(b'[{"a": 1}, 2]', format="openhands")
