"""ATIF trajectories: the off-spec openagents sample and a v1.7 file written from the notes."""

from __future__ import annotations

import json
from pathlib import Path

from runs.importers import explain_format, iter_runs

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = DATA / "traces" / "atif" / "session-2025-12-05T08-00-23-404Z-ew8gut.atif.json"
TERMINUS = DATA / "importers" / "atif_terminus2.json"  # written from the notes §3.13


def only_run(path):
    (run,) = iter_runs(path)
    return run


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_the_openagents_sample_shows_its_five_failed_verifications():
    run = only_run(SAMPLE)
    found = calls(run)
    # the shared README: no tool_calls at all; 5 `source: "system"` steps (2, 6, 9, 11, 12)
    # hold a result `{command, passed: false, output}`: each is a call of its own, failed
    assert len(found) == 5
    assert {step.tool for step in found} == {"verification_complete"}
    assert {json.dumps(step.args) for step in found} == {'{"command": "bun run test:container"}'}
    assert all(step.status == "error" for step in found)
    assert found[0].result["passed"] is False  # the object content is kept as an object
    assert run.id == "session-2025-12-05T08-00-23-404Z-ew8gut"
    assert run.metadata["schema_version"] == "ATIF-v1.4"
    # 13 steps: 13 message steps + the 5 calls
    assert len(run.steps) == 13 + 5
    assert all(step.parent_id is None for step in run.steps)


def test_terminus2_calls_results_and_parse_errors():
    run = only_run(TERMINUS)
    found = calls(run)
    by_tool = [(step.tool, step.status) for step in found]
    assert by_tool == [
        ("bash_command", "error"),  # "Exit code: 1" in the text, no source_call_id
        ("(format error)", "invalid"),  # step 4: parsing errors, no tool call
        ("delegate", "ok"),
        ("read_file", "ok"),  # the sub-agent, right after the call that started it
        ("bash_command", "ok"),
        ("bash_command", "error"),  # extra.status "error"
        ("mark_task_complete", "ok"),  # the in-house {type: tool_result} observation
    ]
    delegate, listing = found[2], found[4]
    assert delegate.result == "off-by-one in app.py line 3"  # matched by source_call_id
    assert listing.result == "app.py test_a.py"
    assert run.metadata["copied_context_steps"] == 1
    # step 3's metrics on its first step (the reasoning)
    reasoning = next(s for s in run.steps if s.kind == "reasoning")
    assert (reasoning.tokens_in, reasoning.tokens_out, reasoning.cost) == (1200, 80, 0.0048)


def test_the_sub_agent_is_a_lane_of_its_own_under_its_call():
    run = only_run(TERMINUS)
    delegate = next(s for s in calls(run) if s.tool == "delegate")
    helper_user = next(s for s in run.steps if s.kind == "user" and "find the bug" in s.text)
    assert helper_user.parent_id == delegate.id
    assert helper_user.lane is not None and delegate.lane is None
    after = next(
        s for s in calls(run) if s.tool == "bash_command" and s.result == "app.py test_a.py"
    )
    assert after.lane is None  # the main line goes on beside the sub-agent, in its own lane


def test_detection():
    verdict = explain_format(SAMPLE.read_bytes())
    assert verdict.claims[0][0] == "atif" and "ATIF-v1.4" in verdict.claims[0][1].reason
    bare = json.dumps({"schema_version": "1.4", "steps": [{"step_id": 1, "source": "user"}]})
    assert explain_format(bare.encode()).claims[0][0] == "atif"
    claim = dict(explain_format(b'{"steps": []}').claims)["atif"]
    assert claim.score == 0 and "schema_version" in claim.reason
