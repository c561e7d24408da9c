"""The heuristic reader (`--format generic`): what it reads, what it refuses, and the property
that matters: on every sample file in the repository it finds the same calls as the file's
own importer, or says it cannot. Inputs other than the samples are built here from the
issue's description of tool-call-like objects (issue 12, part 4), not taken from real files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import detection
from runs.importers import CLAIMANTS, TraceError, detect_format, generic, iter_runs
from runs.importers.detect import sample_of
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = sorted(
    path
    for folder in ("traces", "importers")
    for path in (DATA / folder).rglob("*")
    if path.is_file() and path.suffix != ".md"
)


def calls_of(runs) -> Counter:  # type: ignore[no-untyped-def]
    """(tool, arguments) of every call step, as a multiset.

    An importer's placeholder steps, tools named in parentheses ("(unknown)" for a result
    that matched no call, "(format error)" for a turn with no valid action), are not calls
    found in the file, so they are left out.
    """
    return Counter(
        (step.tool, json.dumps(step.args, sort_keys=True))
        for run in runs
        for step in run.steps
        if step.kind == "tool_call" and not str(step.tool).startswith("(")
    )


# Files on which generic finds a strict subset of the real importer's calls, each missing
# call named with why generic cannot see it. Everything else: the same calls, or it refuses.
SUBSETS = {
    # (codex_rollout.jsonl is refused: `local_shell_call`/`web_search_call` are typed as
    # calls but have no tool name.)
    # §3.25: an `mcp_tool_call_end` event with no `function_call` before it; the codex
    # importer names the call `docs__fetch` from server + tool, generic does not compose
    # names: the event is counted as a result matching no call (not placed).
    "codex_0_1xx_unified_exec.jsonl": {"docs__fetch"},
    # §3.1: the history ends before the last action; `submit` exists only as the text
    # action of trajectory[4] ("submit"), and generic reads no text actions.
    "6e44b9__sweagenttestrepo-1c2844.traj": {"submit"},
    # §3.22: Cursor's shell, read and edit hooks (beforeShellExecution {command},
    # beforeReadFile {file_path}, afterFileEdit {file_path, edits}) name the tool only by
    # the hook event, with no tool-name field; generic reads the MCP and preToolUse events.
    "cursor_hooks.jsonl": {"Shell", "Read", "Edit"},
    # §3.12: an abandoned branch's `edit`; generic keeps the live branch only (as the Claude
    # Code importer does) and counts the dropped call as not placed, the pi importer keeps
    # the branch as a sibling subtree.
    "pi_v3_branches.jsonl": {"edit"},
}
NO_NOTICE = {"6e44b9__sweagenttestrepo-1c2844.traj", "cursor_hooks.jsonl"}  # missed silently


@pytest.mark.parametrize("path", SAMPLES, ids=lambda path: path.name)
def test_generic_finds_the_same_calls_as_the_real_importer_or_says_it_cannot(path):
    try:
        real = calls_of(iter_runs(path))  # detection picks the file's own importer
    except TraceError as exc:
        if "unknown trace format" in str(exc):
            pytest.skip("no importer in the registry claims this file yet")
        # a file its own importer refuses (no messages): generic refuses too
        with pytest.raises(TraceError):
            list(iter_runs(path, format="generic"))
        return
    try:
        runs = list(iter_runs(path, format="generic"))  # no other importer is consulted
    except TraceError as exc:
        assert "generic" in str(exc) or "JSON" in str(exc)  # it says why
        return
    found = calls_of(runs)
    assert found, "a run without calls must be refused, not returned"
    assert not found - real, f"generic invented calls: {found - real}"
    missing = {tool for tool, _ in real - found}
    assert missing == SUBSETS.get(path.name, set())
    unplaced = sum(run.metadata["read_by"]["unplaced"] for run in runs)
    if path.name not in NO_NOTICE:
        assert unplaced >= len(real - found)  # what it missed, it says it could not place
    for run in runs:
        assert run.metadata["read_by"]["heuristic"] is True
        assert run.metadata["read_by"]["summary"].startswith("read heuristically: calls from")


def test_the_property_covers_every_kind_of_answer():
    # 7 real samples + the hand-written fixtures; the property test must see all three
    # outcomes, or it is not testing much: same calls, a documented subset, a refusal.
    outcomes = Counter()
    for path in SAMPLES:
        try:
            found = calls_of(iter_runs(path, format="generic"))
        except TraceError:
            outcomes["refused"] += 1
            continue
        try:
            same = found == calls_of(iter_runs(path))
        except TraceError:
            continue  # no importer claims it yet (see above)
        outcomes["same" if same else "subset"] += 1
    assert outcomes["same"] >= 5 and outcomes["refused"] >= 5
    assert outcomes["subset"] == len(SUBSETS.keys() & {path.name for path in SAMPLES})


def test_claude_code_samples_read_the_same_calls():
    # 13 tool uses in coverage-test-fix, 39 in python-to-rust-port (tests/data/traces/README)
    for name, count in (("coverage-test-fix", 13), ("python-to-rust-port", 39)):
        path = DATA / "traces" / "claude-code" / name / "transcript.jsonl"
        (run,) = iter_runs(path, format="generic")
        assert run.tool_calls == count
        assert run.metadata["read_by"]["call_fields"] == ["name+input"]
        assert run.metadata["read_by"]["result_link"] == ["tool_use_id"]


# --- reading an unknown file: written from the description, not a real file


NESTED = {
    "export": "acme-agent 0.3",
    "data": {
        "conversation": [
            {"role": "system", "content": "You are a shell agent."},
            {"role": "user", "content": "list the files"},
            {
                "role": "assistant",
                "content": "Listing.",
                "actions": [
                    {"toolCallId": "a1", "tool": "shell", "parameters": {"cmd": "ls"}},
                    {"toolCallId": "a2", "tool": "shell", "parameters": {"cmd": "ls -la"}},
                ],
            },
            {"toolCallId": "a1", "output": "README.md"},
            {"toolCallId": "a2", "output": "ls: cannot access '-la': Permission denied"},
            {"toolCallId": "zz", "output": "an answer to nothing"},  # matches no call
            {"step": 7, "parameters": {"cmd": "pwd"}},  # arguments, but no tool name
            {"role": "assistant", "content": "Done."},
        ]
    },
}


def read(value: object, name: str = "acme.json"):  # type: ignore[no-untyped-def]
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    return list(iter_runs(data, source=name, format="generic"))


def test_nested_conversation_is_read_with_results_by_id_and_what_it_could_not_place():
    (run,) = read(NESTED)
    assert run.id == "acme.json" and run.format == "generic"
    kinds = [step.kind for step in run.steps]
    # system, user, assistant "Listing.", 2 calls, assistant "Done." = 6 steps
    assert kinds == ["system", "user", "assistant", "tool_call", "tool_call", "assistant"]
    first, second = run.steps[3], run.steps[4]
    assert (first.tool, first.args, first.result, first.status) == (
        "shell",
        {"cmd": "ls"},
        "README.md",
        "ok",
    )
    assert second.status == "error"  # "Permission denied": the shared text rules
    assert first.batch_id == second.batch_id  # one assistant message issued both
    read_by = run.metadata["read_by"]
    assert read_by["call_fields"] == ["tool+parameters"]
    assert read_by["result_link"] == ["toolCallId"]
    # the orphan result "zz" and the nameless arguments: 2 not placed
    assert read_by["unplaced"] == 2
    assert read_by["unplaced_by_reason"] == {
        "arguments without a tool name": 1,
        "result matching no call": 1,
    }
    assert "2 objects could not be placed" in read_by["summary"]
    assert len(run.warnings) == 2  # one warning per object not placed


def test_jsonl_results_by_order_and_calls_with_their_own_result():
    lines = [
        {"kind": "turn", "role": "user", "text": "go"},
        {"kind": "step", "tool_name": "read", "args": {"path": "a.py"}},
        {"kind": "step", "role": "tool", "content": "print(1)"},  # no id: by order
        {"kind": "step", "name": "run", "input": "pytest", "result": "Exit code: 1"},
    ]
    data = b"\n".join(json.dumps(line).encode() for line in lines)
    (run,) = read(data, "log.jsonl")
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.tool, c.args, c.result, c.status) for c in calls] == [
        ("read", {"path": "a.py"}, "print(1)", "ok"),
        ("run", {"input": "pytest"}, "Exit code: 1", "error"),  # text arguments kept by name
    ]
    assert run.metadata["read_by"]["result_link"] == ["inline (the call's own result)", "order"]


def test_it_never_invents_a_call():
    value = [
        # a tool definition: name + a JSON-schema `parameters`
        {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}},
        {"name": "grep", "description": "search", "input_schema": {"type": "object"}},
        # a name without arguments, arguments without a name: neither is a call
        {"name": "Alice", "content": "hello"},
        # a real call, whose arguments hold a call-like object: data, not a second call
        {"name": "plan", "arguments": {"step": {"name": "rm", "arguments": {"path": "/"}}}},
    ]
    (run,) = read(value)
    assert [(s.tool, s.args) for s in run.steps if s.kind == "tool_call"] == [
        ("plan", {"step": {"name": "rm", "arguments": {"path": "/"}}})
    ]


def test_actions_named_by_an_unknown_field_are_refused_with_the_calls_beside_them():
    # OpenHands-like (§3.3): the action is `action` + `args`, and a copy of the model's raw
    # response sits beside it under another name: generic may not pick either.
    event = {
        "action": "run",
        "args": {"command": "ls"},
        "meta": {"tool_calls": [{"id": "t1", "function": {"name": "bash", "arguments": "{}"}}]},
    }
    with pytest.raises(TraceError) as info:
        read([event, {"observation": "run", "meta": event["meta"], "content": "x"}])
    message = str(info.value)
    assert "generic found no tool call" in message
    assert "1 arguments without a tool name" in message
    # the call beside the args, and its copy on the observation: 2 not counted
    assert "2 call beside arguments without a tool name" in message


def test_objects_typed_as_calls_that_cannot_be_read_refuse_the_run():
    # Codex-like (§3.7) `local_shell_call` without a name, LangSmith-like (§3.19) tool runs
    # with `inputs`: the file says these are calls, so a read without them would be partial.
    for odd in (
        {"type": "local_shell_call", "call_id": "l1", "action": {"command": ["ls"]}},
        {"name": "calculator", "run_type": "tool", "inputs": {"input": "2**10"}},
    ):
        with pytest.raises(TraceError) as info:
            read([{"name": "ls", "arguments": {}}, odd])
        assert "it found 1 calls, but the file also types objects as tool calls" in str(info.value)


def test_a_resent_context_is_not_read_twice():
    # An API log (one request per line, each re-sending the conversation so far) is one run,
    # and each call counts once: 2 calls, though line 2 repeats line 1's call.
    system = {"role": "system", "content": "be brief"}
    ask = {"role": "user", "content": "weather?"}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": "weather", "arguments": '{"c": 1}'}}],
    }
    answer = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    again = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c2", "function": {"name": "weather", "arguments": '{"c": 1}'}}],
    }
    lines = [
        {"request": {"messages": [system, ask]}, "response": {"choices": [{"message": call}]}},
        {
            "request": {"messages": [system, ask, call, answer]},
            "response": {"choices": [{"message": again}]},
        },
    ]
    data = b"\n".join(json.dumps(line).encode() for line in lines)
    (run,) = read(data, "api.jsonl")
    calls = [step for step in run.steps if step.kind == "tool_call"]
    assert [(c.id, c.result) for c in calls] == [("c1", "sunny"), ("c2", None)]
    assert run.metadata["read_by"]["copies_skipped"] >= 3  # system, ask, call re-sent


def test_one_run_per_record_that_holds_a_conversation():
    runs = [
        {"task": 1, "traj": [{"role": "user", "content": "a"}, NESTED["data"]["conversation"][2]]},
        {"task": 2, "traj": [{"role": "user", "content": "b"}, NESTED["data"]["conversation"][2]]},
    ]
    found = read(runs, "runs.json")
    assert [(run.id, run.tool_calls) for run in found] == [
        ("runs.json:[0]", 2),
        ("runs.json:[1]", 2),
    ]


# --- detection: generic is offered, never chosen


def test_an_unknown_file_with_calls_suggests_generic():
    data = json.dumps(NESTED).encode()
    with pytest.raises(TraceError) as info:
        detect_format(data, source="acme.json")
    message = str(info.value)
    assert "--format generic would read it heuristically" in message
    assert "found 2 tool-call-like objects (tool+parameters)" in message
    assert "2 results linked by toolCallId" in message


def test_an_unknown_file_without_calls_says_what_generic_would_need():
    data = json.dumps({"events": [{"kind": "log", "text": "hello"}]}).encode()
    with pytest.raises(TraceError) as info:
        detect_format(data, source="odd.json")
    assert "--format generic cannot read it either" in str(info.value)
    assert "it would need an object with a tool name" in str(info.value)


def test_claim_scores_calls_above_zero_and_text_at_zero():
    yes = CLAIMANTS["generic"](sample_of(json.dumps(NESTED).encode()))
    assert 0 < yes.score < 0.5 and "found 2 tool-call-like objects" in yes.reason
    assert "2 objects could not be placed" in yes.reason
    assert generic.claim(sample_of(b"just text\n")).score == 0


# --- bad input, as for every importer (see test_limits.py)


def test_empty_and_text_files_fail_clearly():
    with pytest.raises(TraceError, match="empty file"):
        read(b"")
    with pytest.raises(TraceError, match="JSON or JSONL"):
        read(b"hello\n")


def test_truncated_json_names_its_line():
    data = json.dumps(NESTED, indent=1).encode()[:-40]
    with pytest.raises(TraceError) as info:
        read(data)
    assert "truncated" in str(info.value) and info.value.line is not None


def test_a_bad_jsonl_line_is_skipped_and_counted():
    good = json.dumps({"name": "ls", "arguments": {}}).encode()
    (run,) = read(good + b"\n\xff\xfe{\n" + good + b"\n", "log.jsonl")
    assert run.tool_calls == 2 and run.skipped == 1
    assert any("log.jsonl:2: invalid UTF-8" in warning for warning in run.warnings)


def test_deep_nesting_is_refused_and_huge_strings_are_clipped():
    with pytest.raises(TraceError, match="nested deeper"):
        read(b"[" * 5000 + b"]" * 5000)
    limits = Limits(max_value_chars=10)
    data = json.dumps([{"name": "w", "arguments": {"text": "x" * 100}}]).encode()
    (run,) = iter_runs(data, source="t.json", format="generic", limits=limits)
    assert run.steps[0].args["text"].startswith("x" * 10 + "…[truncated 90 chars]")


def test_a_big_document_is_read_item_by_item(monkeypatch):
    # 2,000 calls in one array: the items are built one at a time, never the whole document
    built = []
    original = generic.Builder.record

    def spy(self, value, where):  # type: ignore[no-untyped-def]
        built.append(len(json.dumps(value)))
        original(self, value, where)

    monkeypatch.setattr(generic.Builder, "record", spy)
    items = [{"name": "ls", "arguments": {"n": n}} for n in range(2000)]
    (run,) = read({"calls": items})
    assert run.tool_calls == 2000 and len(built) == 2000 and max(built) < 100


def test_scan_says_the_run_was_read_heuristically(tmp_path, capsys):
    from loopboard.cli import scan

    path = tmp_path / "acme.json"
    path.write_text(json.dumps(NESTED))
    assert scan.main(["--format", "generic", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "  read heuristically: calls from tool+parameters; results linked by toolCallId; "
        "2 objects could not be placed\n"
    ) in out
    assert scan.main(["--format", "generic", "--json", str(path)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["read_by"]["unplaced"] == 2 and record["format"] == "generic"


def test_calls_after_results_are_new_turns_and_a_blocker_is_seen():
    """Calls one after another in an event list, each answered before the next, are not one
    batch (a batch counts once): five fetches each refused 429 are a blocker."""
    events = []
    for n in range(5):
        url = f"https://shop.example.com/item/{n}?ref={n}"
        events.append(
            {"kind": "step", "id": f"r{n}", "tool_name": "fetch", "parameters": {"url": url}}
        )
        events.append(
            {"kind": "obs", "toolCallId": f"r{n}", "output": "HTTP/1.1 429 Too Many Requests"}
        )
    data = json.dumps({"export": {"events": events}}).encode()
    (run,) = iter_runs(data, source="export.json", format="generic")
    assert len({step.batch_id for step in run.steps}) == 5
    assert all(step.status == "error" for step in run.steps)
    (finding,) = detection.analyze(run).findings
    assert (finding.detector, finding.severity) == ("blocker", "stop")
