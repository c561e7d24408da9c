"""Claude Code 2.1.2xx sessions (notes §3.24, adds to §3.5): detection with metadata records
first, the new record types, and the errors they carry.

The fixtures in tests/data/importers/claude_code_2_1_2xx_*.jsonl are written from the notes
§3.24, not real files (no permissively licensed 2.1.2xx session exists). Counts, by hand from
the fixtures (`grep -c` of each pattern, checked line by line):

- interactive (28 lines, version 2.1.231): 5 metadata records first (permission-mode, mode,
  summary, custom-title, file-history-snapshot), 8 in all (+ a snapshot update, ai-title,
  last-prompt). 5 `"type":"tool_use"` blocks (toolu_01..05). Errors: toolu_01 `is_error:
  true`; toolu_02 refused by a `hook_blocking_error` attachment (its result has no
  `is_error`); toolu_03 `toolDenialKind: "user-rejected"` (no `is_error`) -> 3. One
  `api_error` system record (529, retry 1 of 10). 3 attachments that are context
  (deferred_tools_delta, skill_listing, the matched hook block) and 1 `queued_command` (a
  user step). msg_01 has output_tokens 120 of which thinking_tokens 80.
- compacted (23 lines, headless, 2.1.210): 2 queue-operation records first. 5 tool_use
  blocks; errors: toolu_13 `is_error: true`, toolu_14 in an `isAbortedMidStream` record with
  no result -> 2. A `compact_boundary` with `parentUuid: null` linked by `logicalParentUuid`
  to an `x-checkpoint` record (a type unknown here) that links to the history before it. One
  unknown metadata type (`x-future-meta`). 2 attachments and 1 progress record (context).
- metadata_only (5 lines): permission-mode, mode, file-history-snapshot, 2 queue-operation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.importers import IMPORTERS, claude_code, detect_format, explain_format, iter_runs
from runs.importers.detect import sample_of
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = DATA / "importers"
INTERACTIVE = FIXTURES / "claude_code_2_1_2xx_interactive.jsonl"
COMPACTED = FIXTURES / "claude_code_2_1_2xx_compacted.jsonl"
METADATA_ONLY = FIXTURES / "claude_code_2_1_2xx_metadata_only.jsonl"
COVERAGE = DATA / "traces" / "claude-code" / "coverage-test-fix" / "transcript.jsonl"
SID = "s-2"


def jsonl(*records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def read(data: bytes, **kwargs):
    (run,) = iter_runs(data, source=kwargs.pop("source", "s.jsonl"), **kwargs)
    return run


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def tree(kind, uuid, parent, **fields):
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SID,
        "isSidechain": False,
        "timestamp": "2026-08-01T00:00:00.000Z",
        **fields,
    }


def user(uuid, parent, content, **fields):
    return tree("user", uuid, parent, message={"role": "user", "content": content}, **fields)


def result(uuid, parent, call_id, content, **block):
    return user(
        uuid, parent, [{"type": "tool_result", "tool_use_id": call_id, "content": content, **block}]
    )


def use(uuid, parent, msg_id, call_id, name, args, **fields):
    block = {"type": "tool_use", "id": call_id, "name": name, "input": args}
    message = {"id": msg_id, "role": "assistant", "model": "claude-x", "content": [block]}
    return tree("assistant", uuid, parent, message=message, **fields)


def attachment(uuid, parent, **payload):
    return tree("attachment", uuid, parent, attachment=payload)


# --- detection


def test_metadata_records_first_are_claude_code():
    """The case that drove the change: the old sniffer said no on an unknown first type."""
    head = INTERACTIVE.read_bytes()[:65536]
    first = lines(INTERACTIVE)[:5]
    assert [r["type"] for r in first] == [
        "permission-mode", "mode", "summary", "custom-title", "file-history-snapshot"
    ]  # fmt: skip
    assert not any("uuid" in r for r in first)
    assert detect_format(head) == "claude-code"
    name, best = explain_format(head).claims[0]
    assert name == "claude-code" and best.score >= 0.9
    assert "8 metadata records left out" in best.reason  # 8: hand-counted in the docstring
    assert claude_code.sniff(head)  # the yes/no form agrees


def test_the_real_sample_behind_five_metadata_records_reads_the_same():
    metadata = lines(INTERACTIVE)[:5]
    data = jsonl(*metadata) + COVERAGE.read_bytes()
    assert detect_format(data[:65536]) == "claude-code"
    run = read(data)
    # 13 calls and 1 error: hand-counted in tests/importers/test_claude_code.py
    assert run.tool_calls == 13 and sum(s.status == "error" for s in calls(run)) == 1
    assert run.metadata["metadata_records"] == {
        "permission-mode": 1, "mode": 1, "summary": 1, "custom-title": 1,
        "file-history-snapshot": 1, "queue-operation": 1,
    }  # fmt: skip
    assert run.name == "fix date parsing"  # the custom title wins over the slug


def test_a_file_of_metadata_records_only_is_claude_code_without_messages():
    head = METADATA_ONLY.read_bytes()
    assert detect_format(head) == "claude-code"
    with pytest.raises(TraceError, match="no messages") as info:
        read(head)
    message = str(info.value)
    assert "only Claude Code metadata records" in message
    assert "2 queue-operation" in message and "1 file-history-snapshot" in message
    assert message.startswith("s.jsonl: ")


def test_a_big_first_record_cut_by_the_head_is_still_claimed():
    big = user("u1", None, "x" * 70_000)
    assert claude_code.claim(sample_of(jsonl(big)[:65536])).score >= 0.5


def test_metadata_records_then_a_message_longer_than_the_head_is_claude_code():
    """A pasted image makes the first message longer than the 64 KiB head: the head shows
    only the metadata records before it."""
    data = jsonl(*lines(INTERACTIVE)[:5], user("u1", None, "x" * 70_000))
    assert detect_format(data[:65536]) == "claude-code"
    assert read(data).steps[0].kind == "user"


SESSION_FIXTURES = ("claude_code_agent-", "claude_code_branches", "claude_code_2_1_2xx_")
OTHER_FILES = sorted(
    p
    for p in (DATA / "importers").iterdir()
    if p.is_file() and not p.name.startswith(SESSION_FIXTURES) and p.suffix != ".md"
) + sorted(
    p
    for p in (DATA / "traces").rglob("*")
    if p.is_file() and "claude-code" not in p.parts and p.suffix != ".md"
)


@pytest.mark.parametrize("path", OTHER_FILES, ids=lambda p: p.name)
def test_other_formats_are_not_claimed(path):
    claim = claude_code.claim(sample_of(path.read_bytes()[:65536]))
    assert claim.score == 0, claim.reason


def test_metadata_of_general_names_alone_is_not_claude_code():
    data = jsonl({"type": "result", "ok": True}, {"type": "mode", "mode": "x"})
    assert claude_code.claim(sample_of(data)).score == 0


def test_the_reason_for_a_no_says_what_is_missing():
    claim = claude_code.claim(sample_of(jsonl({"type": "user", "message": {"content": "hi"}})))
    assert claim.score == 0 and "`sessionId` with `uuid`/`parentUuid`" in claim.reason


# --- the interactive fixture


def test_interactive_session_hand_counted():
    run = read(INTERACTIVE.read_bytes(), source=str(INTERACTIVE))
    assert run.format == "claude-code" and run.id == "4b1f9c2e-7a3d-4e5f-8b6a-0c1d2e3f4a5b"
    assert [(c.id, c.tool, c.status) for c in calls(run)] == [
        ("toolu_01", "Bash", "error"),  # is_error: true
        ("toolu_02", "Bash", "error"),  # refused by the PreToolUse hook, no is_error
        ("toolu_03", "Edit", "error"),  # toolDenialKind: user-rejected, no is_error
        ("toolu_04", "Edit", "ok"),
        ("toolu_05", "Bash", "ok"),
    ]
    assert [s.kind for s in run.steps] == [
        "user", "reasoning", "tool_call", "tool_call", "assistant", "tool_call",
        "user", "system", "tool_call", "tool_call", "assistant",
    ]  # fmt: skip
    users = [s.text for s in run.steps if s.kind == "user"]
    assert users == [
        "The date parser test fails on leap years; fix it.",
        "use calendar.isleap instead",  # the queued_command attachment
    ]
    (api_error,) = [s for s in run.steps if s.kind == "system"]
    assert api_error.status == "error"
    assert api_error.text == "api error: 529 Overloaded (retry 1 of 10)"
    assert run.name == "fix date parsing"
    meta = run.metadata
    assert meta["ai_title"] == "Fix leap-year date parsing"
    assert (meta["version"], meta["entrypoint"], meta["permission_mode"]) == (
        "2.1.231",
        "cli",
        "default",
    )
    assert meta["metadata_records"] == {
        "permission-mode": 1, "mode": 1, "summary": 1, "custom-title": 1,
        "file-history-snapshot": 2, "ai-title": 1, "last-prompt": 1,
    }  # fmt: skip
    assert meta["context_records"] == {"attachment": 3, "system:turn_duration": 1}
    # the chain runs through the attachments and the api_error record: nothing abandoned
    assert "abandoned_records" not in meta and "skipped_records" not in meta
    assert run.skipped == 0 and run.warnings == []
    assert all(s.parent_id is None for s in run.steps)


def test_thinking_tokens_are_part_of_the_output_tokens():
    run = read(INTERACTIVE.read_bytes())
    first = run.steps[1]  # msg_01's first step: its thinking block
    assert first.kind == "reasoning" and first.batch_id == "msg_01Th"
    assert first.tokens_out == 120  # output_tokens 120, thinking_tokens 80 not added
    assert first.tokens_in == 6 + 1200 + 18000


def test_the_hook_block_gives_its_reason_and_the_result_stays():
    run = read(INTERACTIVE.read_bytes())
    blocked = next(c for c in calls(run) if c.id == "toolu_02")
    assert blocked.result.startswith("PreToolUse:Bash hook error:")


# --- the compacted fixture


def test_compacted_headless_session_hand_counted():
    run = read(COMPACTED.read_bytes(), source=str(COMPACTED))
    assert [(c.id, c.status) for c in calls(run)] == [
        ("toolu_11", "ok"),
        ("toolu_12", "ok"),  # before the compaction boundary: kept through logicalParentUuid
        ("toolu_13", "error"),  # is_error: true
        ("toolu_14", "error"),  # cut off mid-stream, never ran
        ("toolu_15", "ok"),
    ]
    aborted = calls(run)[3]
    assert aborted.result is None
    system = [s.text for s in run.steps if s.kind == "system"]
    assert system[0] == "Conversation compacted"
    assert system[1].startswith("This session is being continued")  # isCompactSummary
    assert [s.kind for s in run.steps].count("user") == 2  # the prompt, the interruption
    meta = run.metadata
    assert meta["aborted_messages"] == 1
    assert meta["metadata_records"] == {"queue-operation": 2}
    assert meta["context_records"] == {
        "attachment": 2,
        "progress": 1,
        "system:stop_hook_summary": 1,
    }
    assert meta["skipped_records"] == {"x-checkpoint": 1, "x-future-meta": 1}
    assert run.skipped == 0  # unknown types are tolerated, not bad lines
    assert len(run.warnings) == 2 and all("unknown type" in w for w in run.warnings)
    assert "abandoned_records" not in meta
    assert meta["entrypoint"] == "sdk-ts" and run.name == "quiet-porting-heron"


def test_output_tokens_with_thinking_are_not_doubled_on_the_last_message():
    run = read(COMPACTED.read_bytes())
    assert run.steps[-1].tokens_out == 300  # output 300, of which thinking 250


# --- the rules, one record at a time


def test_a_hook_block_after_a_clean_result_still_fails_the_call():
    data = jsonl(
        user("u1", None, "lint it"),
        use("a1", "u1", "m1", "toolu_1", "Edit", {"file_path": "a.py"}),
        result("r1", "a1", "toolu_1", "The file a.py has been updated.", is_error=False),
        attachment(
            "h1",
            "r1",
            type="hook_blocking_error",
            hookName="PostToolUse:Edit",
            toolUseID="toolu_1",
            hookEvent="PostToolUse",
            blockingError={"blockingError": "ruff: E501 line too long", "command": "lint.sh"},
        ),
    )
    run = read(data)
    (call,) = calls(run)
    assert call.status == "error" and call.result == "The file a.py has been updated."


def test_a_hook_block_that_names_no_call_is_a_system_error_step():
    data = jsonl(
        user("u1", None, "go"),
        attachment(
            "h1",
            "u1",
            type="hook_blocking_error",
            hookName="Stop",
            toolUseID="9d1c-not-a-call",
            hookEvent="Stop",
            blockingError="tests still fail",
        ),
    )
    run = read(data)
    step = run.steps[-1]
    assert (step.kind, step.status, step.text) == (
        "system",
        "error",
        "Stop blocked: tests still fail",
    )


def test_a_hook_block_before_its_call_is_answered_marks_the_later_result():
    data = jsonl(
        user("u1", None, "go"),
        use("a1", "u1", "m1", "toolu_1", "Bash", {"command": "rm -rf /"}),
        attachment(
            "h1",
            "a1",
            type="hook_blocking_error",
            hookName="PreToolUse:Bash",
            toolUseID="toolu_1",
            blockingError={"blockingError": "refused"},
        ),
        result("r1", "h1", "toolu_1", "PreToolUse:Bash hook error: refused", is_error=False),
    )
    (call,) = calls(read(data))
    assert call.status == "error" and call.result == "PreToolUse:Bash hook error: refused"


@pytest.mark.parametrize("where", ["record", "block"])
def test_tool_denial_kind_is_an_error_without_is_error(where):
    answer = result("r1", "a1", "toolu_1", "Permission to use Bash has been denied.")
    if where == "record":
        answer["toolDenialKind"] = "permission-rule"
    else:
        answer["message"]["content"][0]["toolDenialKind"] = "automode-blocked"
    data = jsonl(
        user("u1", None, "go"), use("a1", "u1", "m1", "toolu_1", "Bash", {"command": "x"}), answer
    )
    (call,) = calls(read(data))
    assert call.status == "error"


def test_an_edit_that_forks_at_attachments_drops_the_old_branch():
    """The edited prompt and the old one each hang under their own attachment: the fork is
    seen only if the attachments are links in the chain."""
    data = jsonl(
        user("u1", None, "run the tests"),
        use("a1", "u1", "m1", "toolu_1", "Bash", {"command": "pytest"}),
        result("r1", "a1", "toolu_1", "Exit code 1", is_error=True),
        attachment("t-old", "r1", type="todo_reminder", content="..."),
        user("u-old", "t-old", "try again"),
        use("a-old", "u-old", "m2", "toolu_2", "Bash", {"command": "pytest"}),
        result("r-old", "a-old", "toolu_2", "Exit code 1", is_error=True),
        attachment("t-new", "r1", type="todo_reminder", content="..."),
        user("u-new", "t-new", "read the failing test first"),
        use("a-new", "u-new", "m3", "toolu_3", "Read", {"file_path": "t.py"}),
        result("r-new", "a-new", "toolu_3", "def test(): ..."),
    )
    run = read(data)
    assert [c.id for c in calls(run)] == ["toolu_1", "toolu_3"]
    assert run.metadata["abandoned_records"] == 3  # u-old, a-old, r-old
    assert [s.text for s in run.steps if s.kind == "user"] == [
        "run the tests",
        "read the failing test first",
    ]


def test_a_sub_agent_link_passes_through_its_attachment_records():
    """Two parallel Task calls: the sub-agent's call after an attachment is still placed
    under its own Task by following the chain (the prompt names only the first record)."""
    tasks = {
        "id": "m1",
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_A", "name": "Task", "input": {"prompt": "a"}},
            {"type": "tool_use", "id": "toolu_B", "name": "Task", "input": {"prompt": "b"}},
        ],
    }
    side = {"isSidechain": True, "agentId": "b1"}
    data = jsonl(
        user("u1", None, "explore"),
        tree("assistant", "a1", "u1", message=tasks),
        user("s1", "a1", "b", **side),
        dict(attachment("s2", "s1", type="nested_memory", content="CLAUDE.md"), **side),
        use("s3", "s2", "m2", "toolu_G", "Glob", {"pattern": "*"}, **side),
        result("r1", "a1", "toolu_B", "found 3"),
        result("r2", "a1", "toolu_A", "found 1"),
    )
    run = read(data)
    by_id = {s.id: s for s in run.steps}
    assert by_id["s1"].parent_id == "toolu_B"
    assert by_id["toolu_G"].parent_id == "s1"


def test_an_api_error_assistant_message_is_an_error_step():
    message = {
        "id": "m9",
        "role": "assistant",
        "model": "<synthetic>",
        "content": [{"type": "text", "text": "API Error: 500 Internal server error"}],
    }
    data = jsonl(
        user("u1", None, "go"),
        tree("assistant", "a1", "u1", message=message, isApiErrorMessage=True),
    )
    run = read(data)
    assert run.steps[-1].kind == "assistant" and run.steps[-1].status == "error"
    assert "model" not in run.metadata


def test_titles_and_error_texts_are_bounded():
    limits = Limits(max_value_chars=100)
    data = jsonl(
        {"type": "custom-title", "customTitle": "t" * 10_000, "sessionId": SID},
        user("u1", None, "go"),
        tree("system", "e1", "u1", subtype="api_error", error={"message": "m" * 10_000}),
    )
    run = read(data, limits=limits)
    assert len(run.name) < 600
    assert len(run.steps[-1].text) < 200 and "truncated" in run.steps[-1].text


ODD_VALUES = [None, 1, 2.5, True, [], ["user"], {}, {"type": "x"}, "", "x" * 300]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_odd_values_in_any_field_never_crash(value):
    """Trace content is untrusted: a field of the wrong JSON type is tolerated."""
    records = [
        {"type": value, "uuid": "x1", "parentUuid": None, "sessionId": SID},
        {"type": "permission-mode", "permissionMode": value, "sessionId": SID},
        user("u1", value, "go", toolDenialKind=value),
        tree("system", "s1", "u1", subtype=value, level=value, error=value, content=value),
        tree("attachment", "h1", "s1", attachment=value),
        attachment("h2", "h1", type="hook_blocking_error", toolUseID=value, blockingError=value),
        attachment("h3", "h2", type="queued_command", prompt=value, origin=value),
        tree("assistant", "a1", "h3", message=value, isAbortedMidStream=value),
        use("a2", "a1", "m1", "toolu_1", "Bash", value, isApiErrorMessage=value),
        result("r1", "a2", "toolu_1", value, is_error=value),
        tree("user", "r2", "r1", message={"content": value}),
    ]
    run = read(jsonl(*records), format="claude-code")
    assert run.tool_calls >= 1


def test_claude_code_is_still_registered_first():
    assert next(iter(IMPORTERS)) == "claude-code"


KEYS = [
    "type", "uuid", "parentUuid", "logicalParentUuid", "sessionId", "isSidechain", "agentId",
    "message", "attachment", "subtype", "content", "error", "toolDenialKind", "isMeta",
    "isAbortedMidStream", "customTitle", "leafUuid", "timestamp",
]  # fmt: skip
TYPES = ["user", "assistant", "system", "attachment", "progress", "summary", "mode", "x-new"]
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.sampled_from(TYPES + ["u1", "u2"])
)
VALUE = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS + ["id", "tool_use_id", "input", "name"]), inner)
    ),
    max_leaves=12,
)
RECORD = st.dictionaries(st.sampled_from(KEYS), VALUE, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(RECORD, min_size=1, max_size=8))
def test_any_records_give_a_run_or_a_trace_error(records):
    try:
        run = read(jsonl(*records), format="claude-code")
    except TraceError:
        return
    assert all(
        step.kind in ("user", "assistant", "tool_call", "system", "reasoning") for step in run.steps
    )
