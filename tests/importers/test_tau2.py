"""tau2 simulation results (fixture written from the notes §3.15, see tests/data/importers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import detection
from runs.importers import TraceError, detect_format, iter_runs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "importers" / "tau2_results.json"


def runs():
    return list(iter_runs(FIXTURE))


def test_detected_by_content():
    assert detect_format(FIXTURE.read_bytes()[:65536]) == "tau2"


def test_one_run_per_simulation_with_the_termination_reason():
    ok, loop = runs()
    assert (ok.id, loop.id) == ("sim-ok", "sim-loop")
    assert ok.metadata["termination_reason"] == "user_stop" and not ok.metadata["failed"]
    assert loop.metadata["termination_reason"] == "max_steps" and loop.metadata["failed"]
    assert ok.metadata["reward"] == 1.0 and ok.metadata["agent_cost"] == 0.012


def test_calls_results_and_errors():
    ok, loop = runs()
    # the fixture: sim-ok has 2 agent calls (get_reservation_details, cancel_reservation)
    calls = [s for s in ok.steps if s.kind == "tool_call"]
    assert [(c.tool, c.args, c.status) for c in calls] == [
        ("get_reservation_details", {"reservation_id": "ABC123"}, "ok"),
        ("cancel_reservation", {"reservation_id": "ABC123"}, "ok"),
    ]
    assert calls[1].result == '{"status": "cancelled"}'
    # sim-loop: 1 call by the user simulator + 6 failing agent calls
    calls = [s for s in loop.steps if s.kind == "tool_call"]
    assert len(calls) == 7 and sum(c.status == "error" for c in calls) == 6
    tokens = [s.tokens_in for s in ok.steps if s.tokens_in]
    assert tokens == [1200, 300, 1300]


def test_user_simulator_calls_are_a_branch_of_their_own():
    _, loop = runs()
    user_call = next(s for s in loop.steps if s.tool == "check_status_bar")
    assert user_call.parent_id == "tau2-user-tools"
    branch = next(s for s in loop.steps if s.id == "tau2-user-tools")
    assert branch.kind == "user"
    agent_calls = [s for s in loop.steps if s.tool == "get_line_details"]
    assert all(s.parent_id is None for s in agent_calls)


def test_the_repeated_failing_call_is_flagged_and_the_clean_run_is_not():
    ok, loop = runs()
    assert detection.analyze(ok).verdict == "ok"
    result = detection.analyze(loop)
    assert result.verdict == "stop"
    assert any(f.tool == "get_line_details" for f in result.findings)


def test_a_single_simulation_file_and_bad_input(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    single = tmp_path / "sim.json"
    single.write_text(json.dumps(doc["simulations"][1]))
    (run,) = iter_runs(single)
    assert run.id == "sim-loop" and run.tool_calls == 7
    doc["simulations"].insert(1, {"id": "broken", "task_id": "x", "termination_reason": "x"})
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(doc))
    got = list(iter_runs(mixed))
    assert [r.id for r in got] == ["sim-ok", "mixed.json#1", "sim-loop"]
    assert "simulations[1]" in got[1].warnings[0] and "messages" in got[1].warnings[0]
    truncated = tmp_path / "cut.json"
    truncated.write_bytes(FIXTURE.read_bytes()[:3000])
    with pytest.raises(TraceError, match="truncated"):
        list(iter_runs(truncated, format="tau2"))


def sim_doc(arguments: object = None, content: str = "ok") -> bytes:
    call = {"id": "c", "name": "f", "arguments": arguments or {}, "requestor": "assistant"}
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "id": "c", "content": content, "error": False},
    ]
    sim = {"id": "s", "task_id": "t", "termination_reason": "user_stop", "messages": messages}
    return json.dumps({"info": {}, "tasks": [], "simulations": [sim]}).encode()


def test_edge_cases_empty_invalid_utf8_deep_and_huge():
    with pytest.raises(TraceError, match="empty file"):
        list(iter_runs(b"", format="tau2"))
    with pytest.raises(TraceError, match="invalid"):
        list(iter_runs(sim_doc().replace(b'"ok"', b'"\xff\xfe"'), format="tau2"))
    deep: object = "x"
    for _ in range(200):
        deep = {"a": deep}
    with pytest.raises(TraceError, match="nested deeper"):
        list(iter_runs(sim_doc(deep), format="tau2"))
    (run,) = iter_runs(sim_doc(content="y" * 2_000_000), format="tau2")
    (call,) = run.steps
    assert len(call.result) < 1_100_000 and call.result.endswith("chars]")
