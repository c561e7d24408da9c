"""Where a loop started (`started_at`): stored, on the run page, in the API, in the check."""

import pytest

from tests.helpers import call, message, native_jsonl

NO_REPLACEMENT = "No replacement was performed, old_str `{}` did not appear verbatim in app.py."


def variant_edits(olds):
    """A run that edits app.py with another old_str each time, each failing the same way."""
    events = [message("user", "fix it"), call("read_file", {"path": "notes.md"}, "notes")]
    for old in olds:
        args = {"command": "str_replace", "path": "app.py", "old_str": old, "new_str": "x"}
        events.append(call("str_replace_editor", args, NO_REPLACEMENT.format(old), "error"))
    return events


@pytest.mark.django_db
def test_the_run_page_marks_where_the_loop_started(client_in, project, process):
    olds = ["<script>alert(1)</script>", "def f():", "def f( ):", "def  f():"]
    run = process(project, native_jsonl(*variant_edits(olds))).runs.get()
    finding = run.findings.get(detector="blocker")
    assert (finding.started_at, finding.fired_at, finding.stop_at) == (2, 4, None)
    html = client_in.get(run.get_absolute_url()).content.decode()
    assert 'data-started="2"' in html and "started at #2" in html
    assert "the loop started at step #2" in html
    assert "<script>alert(1)</script>" not in html  # the agent's words, escaped


@pytest.mark.django_db
def test_the_api_gives_started_at_with_each_finding(api, project, process):
    run = process(project, native_jsonl(*variant_edits(["a1", "a2", "a3"]))).runs.get()
    findings = api.get(f"/api/runs/{run.pk}").json()["findings"]
    assert [(f["detector"], f["started_at"], f["fired_at"]) for f in findings] == [
        ("blocker", 2, 4)
    ]


@pytest.mark.django_db
def test_the_live_check_sees_a_blocker_and_invalid_turns(api):
    calls = [
        {"tool": e["tool"], "args": e["args"], "result": e["result"], "status": e["status"]}
        for e in variant_edits(["a1", "a2"])[1:]
    ]
    body = {"calls": calls, "tool": "str_replace_editor", "args": {"path": "app.py"}}
    answer = api.post("/api/check", body, content_type="application/json").json()
    assert answer["verdict"] == "warn"
    assert [(f["detector"], f["started_at"]) for f in answer["findings"]] == [("blocker", 1)]
    invalid = [{"tool": "(format error)", "result": "found 2 actions", "status": "invalid"}]
    body = {"calls": invalid * 3 + [{"tool": "bash", "args": {"command": "ls"}, "result": "a"}]}
    answer = api.post("/api/check", {**body, "tool": "bash"}, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["verdict"] == "ok"
