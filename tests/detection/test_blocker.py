"""The blocker detector, same-check-same-failure, invalid turns and exploration, with the
fixtures in tests/data/detection/cases/ (one per case, in the native format)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection import Monitor, Policy, Step, analyze
from detection.detectors.blocker import call_target, command_head

from .helpers import Trace, detectors

CASES = Path(__file__).resolve().parents[1] / "data" / "detection" / "cases"
NO_REPLACEMENT = "No replacement was performed, old_str `{}` did not appear verbatim in {}."


def load(name):
    """Return a fixture's steps (the native format's fields these fixtures use)."""
    steps = []
    for seq, line in enumerate((CASES / name).read_text().splitlines()):
        record = json.loads(line)
        if record["type"] == "message":
            steps.append(Step(seq, record["role"], text=record["content"]))
        else:
            fields = {key: record.get(key) for key in ("tool", "args", "result")}
            steps.append(Step(seq, "tool_call", status=record.get("status", "ok"), **fields))
    return steps


def warned(analysis):
    return [f for f in analysis.findings if f.severity != "info"]


# -- the fixtures: each case flagged (by the detector that should) or cleared ------------
@pytest.mark.parametrize(
    ("name", "detector", "started_at", "fired_at"),
    [
        ("variant_edits.jsonl", "blocker", 3, 7),
        ("variant_builds.jsonl", "blocker", 1, 5),
        ("variant_fetches.jsonl", "blocker", 1, 5),
        ("same_failure_between_edits.jsonl", "repeat", 1, 5),
        ("same_check_same_failure.jsonl", "repeat", 1, 10),
        ("invalid_streak.jsonl", "blocker", 3, 7),
    ],
)
def test_each_loop_case_is_flagged_where_it_started(name, detector, started_at, fired_at):
    result = analyze(load(name))
    (finding,) = warned(result)
    assert finding.detector == detector
    assert (finding.started_at, finding.fired_at) == (started_at, fired_at)
    assert f"since step {started_at}" in finding.message


@pytest.mark.parametrize(
    "name",
    [
        "exploration.jsonl",
        "trap_build_fix_cycle.jsonl",
        "trap_edit_fails_then_fixed.jsonl",
        "trap_empty_greps.jsonl",
        "trap_date_sweep.jsonl",
    ],
)
def test_progress_and_traps_stay_clean(name):
    assert analyze(load(name)).verdict == "ok"


def test_the_message_names_the_blocker_in_the_tools_words_and_what_to_do():
    (finding,) = warned(analyze(load("variant_edits.jsonl")))
    assert "calls of str_replace_editor on app.py all failed with" in finding.message
    assert "No replacement was performed" in finding.message
    assert "Read the file again" in finding.message
    (finding,) = warned(analyze(load("variant_builds.jsonl")))
    assert "(cmake, make, ninja)" in finding.message
    assert "No such file or directory" in finding.message
    (finding,) = warned(analyze(load("variant_fetches.jsonl")))
    assert finding.message.startswith("The last 5 requests to example.com")


def test_message_quotes_are_bounded():
    trace = Trace()
    for index in range(3):
        trace.call(
            "fetch", {"url": f"https://x.org/{index}"}, "Error: " + "<b>x</b>" * 500, "error"
        )
    (finding,) = warned(analyze(trace.steps))
    assert len(finding.message) < 600


# -- what re-arms a blocker and what does not ----------------------------------------------
def failed_edit(trace, path, old):
    args = {"command": "str_replace", "path": path, "old_str": old, "new_str": "y"}
    trace.call("str_replace_editor", args, NO_REPLACEMENT.format(old, path), "error")


def test_a_successful_edit_of_the_same_file_rearms_it():
    trace = Trace()
    for old in ["a1", "a2"]:
        failed_edit(trace, "/r/app.py", old)
    trace.call("str_replace_editor", {"command": "str_replace", "path": "/r/app.py"}, "edited")
    for old in ["a3", "a4"]:
        failed_edit(trace, "/r/app.py", old)
    assert "blocker" not in detectors(analyze(trace.steps))


def test_an_edit_of_another_file_or_a_read_does_not():
    trace = Trace()
    failed_edit(trace, "/r/app.py", "a1")
    trace.call("str_replace_editor", {"command": "str_replace", "path": "/r/other.py"}, "edited")
    failed_edit(trace, "/r/app.py", "a2")
    trace.call("str_replace_editor", {"command": "view", "path": "/r/app.py"}, "1\tx = 1")
    failed_edit(trace, "/r/app.py", "a3")
    assert "blocker" in detectors(analyze(trace.steps))


def test_a_shell_command_that_fixes_the_file_rearms_it():
    trace = Trace()
    failed_edit(trace, "/r/app.py", "a1")
    failed_edit(trace, "/r/app.py", "a2")
    trace.call("bash", {"command": "git checkout -- app.py"}, "Updated 1 path")
    failed_edit(trace, "/r/app.py", "a3")
    assert "blocker" not in detectors(analyze(trace.steps))


def test_a_different_failure_after_a_change_moves_the_blocker():
    trace = Trace()
    trace.call("bash", {"command": "make"}, "error: 'count' undeclared", "error")
    trace.call("bash", {"command": "make all"}, "error: 'count' undeclared", "error")
    trace.call("edit_file", {"path": "app.c", "old": "a", "new": "b"}, "File updated.")
    trace.call("bash", {"command": "make"}, "error: 'total' undeclared", "error")
    trace.call("bash", {"command": "make"}, "error: 'count' undeclared", "error")
    assert analyze(trace.steps).verdict == "ok"


def test_the_same_host_from_two_tools_is_one_blocker():
    trace = Trace()
    trace.call("fetch", {"url": "https://x.org/a"}, "HTTP Error 429: Too Many Requests", "error")
    trace.call(
        "bash", {"command": "curl -sf https://x.org/b"}, "curl: (22) 429 Too Many Requests", "error"
    )
    trace.call("browser_open", {"url": "https://www.x.org/c"}, "Error: status code 429", "error")
    (finding,) = warned(analyze(trace.steps))
    assert (finding.detector, finding.count) == ("blocker", 3)
    assert "x.org" in finding.message


def test_blocker_thresholds_come_from_the_policy_rows():
    trace = Trace()
    for old in ["a", "b", "c", "d", "e"]:
        failed_edit(trace, "/r/app.py", old)
    policy = Policy.from_dict(
        {"tools": {"str_replace_editor": {"detectors": {"blocker": {"warn": 4, "stop": 5}}}}}
    )
    (finding,) = warned(analyze(trace.steps, policy))
    assert (finding.fired_at, finding.rule) == (3, 'tools."str_replace_editor".detectors.blocker')
    off = Policy.from_dict({"defaults": {"detectors": {"blocker": {"enabled": False}}}})
    assert analyze(trace.steps, off).verdict == "ok"


def test_an_exact_repeat_is_the_repeat_rules_not_a_second_finding():
    trace = Trace()
    for _ in range(4):
        trace.call("book", {"flight": "F1"}, "Error: payment declined", "error")
    assert [f.detector for f in warned(analyze(trace.steps))] == ["repeat"]


# -- invalid turns -------------------------------------------------------------------------
def test_invalid_turns_are_failed_calls_and_a_streak_is_one_loop():
    trace = Trace()
    for count in [2, 0, 3]:
        trace.call("(format error)", {"blocks": count}, f"found {count} actions", "invalid")
    result = analyze(trace.steps)
    (finding,) = warned(result)
    assert (finding.detector, finding.count, finding.started_at) == ("blocker", 3, 0)
    assert "no valid action" in finding.message
    assert {entry.progress_signature.split(":")[-1] for entry in result.ledger} == {"invalid"}


def test_a_valid_action_ends_the_streak():
    trace = Trace()
    for index in range(6):
        trace.call("(format error)", {}, f"found {index} actions", "invalid")
        if index % 2:
            trace.call("bash", {"command": f"ls d{index}"}, "a.py", "error")
    assert "blocker" not in detectors(analyze(trace.steps))


# -- exploration is progress ---------------------------------------------------------------
def test_deeper_paths_with_new_results_are_not_near_repeats():
    trace = Trace()
    for path in ["src", "src/app", "src/app/core", "src/app/core/db"]:
        listing = " ".join(f"{path}/{name}" for name in ["a.py", "b.py", "c.py", "README"])
        trace.call("list_files", {"path": path, "depth": 3, "hidden": False}, listing + " x y z")
    assert analyze(trace.steps).verdict == "ok"


def test_narrower_calls_with_the_same_result_still_count():
    trace = Trace()
    for query in ["libfoo", "libfoo release", "libfoo release date"]:
        trace.call("web_search", {"query": query}, "No results found.")
    assert "result_stall" in detectors(analyze(trace.steps))


# -- targets -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "head"),
    [
        ("cd /app/build && make -j4", "make"),
        ("FOO=1 sudo -E npm run build", "npm run"),
        ("timeout 30 python -m pytest -q tests/", "python -m pytest"),
        ("python3 /repo/scripts/check.py --fast", "python3 check.py"),
        ("git push origin main 2>&1 | tail -3", "git push"),
        ("export X=1; ./configure --prefix=/usr", "configure"),
    ],
)
def test_command_heads(command, head):
    assert command_head(command) == head


def test_targets():
    assert call_target("Edit", {"file_path": "./src//a.py"}) == "file:src/a.py"
    assert call_target("fetch", {"url": "https://WWW.Example.com:443/a?b"}) == "host:example.com"
    assert call_target("bash", {"command": "curl -s 'https://x.org/a'"}) == "host:x.org"
    assert call_target("exec", {"cmd": ["cargo", "build"]}) == "cmd:cargo build"
    assert call_target("book", {"flight": "F1"}) == "tool:book"


# -- the live check ------------------------------------------------------------------------
def test_the_live_check_predicts_a_blocker_on_the_same_target():
    monitor = Monitor()
    trace = Trace()
    for old in ["a", "b"]:
        failed_edit(trace, "/r/app.py", old)
    for step in trace.steps:
        monitor.observe(step)
    check = monitor.check("str_replace_editor", {"command": "str_replace", "path": "/r/app.py"})
    assert check.verdict == "warn" and check.findings[0].detector == "blocker"
    assert check.findings[0].started_at == 0
    assert monitor.check("str_replace_editor", {"path": "/r/other.py"}).verdict == "ok"


# -- properties ----------------------------------------------------------------------------
UNRELATED = [
    ("read_file", {"path": "/r/notes.md"}, "notes"),
    ("web_search", {"query": "how to"}, "results"),
    ("edit_file", {"path": "/r/other.py", "old": "a", "new": "b"}, "File updated."),
    ("bash", {"command": "ls -la /r"}, "app.py other.py"),
    ("str_replace_editor", {"command": "str_replace", "path": "/r/other.py"}, "edited"),
]
olds = st.text(
    st.characters(codec="ascii", categories=["L", "N", "P", "Zs"]), min_size=1, max_size=20
)


@given(
    st.lists(olds, min_size=3, max_size=7, unique=True),
    st.lists(st.tuples(st.integers(0, 6), st.sampled_from(UNRELATED)), max_size=6),
)
@settings(max_examples=200, deadline=None)
def test_an_unrelated_successful_call_never_hides_a_blocker(attempts, extras):
    trace = Trace()
    for index, old in enumerate(attempts):
        for at, (tool, args, result) in extras:
            if at == index:
                trace.call(tool, args, result)
        failed_edit(trace, "/r/app.py", old.strip() or "x")
    assert {"blocker", "mutating_failure", "repeat"} & detectors(analyze(trace.steps))


@given(st.lists(st.lists(olds, min_size=1, max_size=2), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_a_related_fix_always_rearms(chunks):
    trace = Trace()
    for chunk in chunks:
        for old in chunk:
            failed_edit(trace, "/r/app.py", "v:" + old)
        trace.call("Edit", {"file_path": "/r/app.py", "old_string": "x", "new_string": "y"}, "ok")
    assert "blocker" not in detectors(analyze(trace.steps))


def test_calls_issued_together_are_not_retries_of_each_other():
    trace = Trace()
    for index in range(6):
        args = {"path": "/r/app.py", "oldText": f"block {index}", "newText": "x"}
        trace.call("edit", args, "[not run: the turn ended with an error]", "error", batch_id="m1")
    assert analyze(trace.steps).verdict == "ok"
    for index in range(3):
        args = {"path": "/r/app.py", "oldText": f"again {index}", "newText": "x"}
        trace.call(
            "edit", args, "[not run: the turn ended with an error]", "error", batch_id=f"n{index}"
        )
    assert "blocker" in detectors(analyze(trace.steps))
