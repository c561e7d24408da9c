"""Runs named after the uploaded file where the trace has no better name (issue 27 part 5):
a session known only by its UUID is listed under its file's name, and keeps its id."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.importers import iter_runs

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def runs_of(sample: str, source: str):
    return list(iter_runs((DATA / sample).read_bytes(), source=source))


def test_a_session_known_by_its_uuid_takes_the_files_name_and_keeps_its_id():
    (run,) = runs_of("codex_rollout.jsonl", "/home/me/fix-auth.jsonl")
    assert run.name == "fix-auth.jsonl · 0199a1b2"
    assert run.id == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def test_a_file_named_after_the_session_is_not_told_its_id_twice():
    source = "rollout-2025-10-01T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"
    (run,) = runs_of("codex_rollout.jsonl", source)
    assert run.name == source


@pytest.mark.parametrize(
    "sample",
    ["gemini_chat.json", "claude_code_branches.jsonl", "codex_0_1xx_polling.jsonl"],
)
def test_other_formats_that_name_a_session_by_its_uuid_take_the_files_name(sample):
    (run,) = runs_of(sample, "session.jsonl")
    assert run.name == f"session.jsonl · {run.id[:8]}"


def test_a_trace_that_names_its_run_keeps_that_name():
    (pi,) = runs_of("pi_v3_branches.jsonl", "session.jsonl")
    assert pi.name == "fix failing test"  # the session's own title
    (claude,) = runs_of("claude_code_2_1_2xx_compacted.jsonl", "session.jsonl")
    assert claude.name == "quiet-porting-heron"  # its slug
    first, _ = runs_of("openai_agents_trace.jsonl", "session.jsonl")
    assert first.name == "Weather workflow"


def test_otlp_runs_and_nameless_uploads_are_left_as_they_were():
    (logs,) = runs_of("otlp_claude_code_logs_only.json", "export.json")
    assert logs.name == logs.id  # the OTLP importer names its runs
    (run,) = runs_of("codex_rollout.jsonl", "upload")  # the API's name for a nameless body
    assert run.name == run.id


@pytest.mark.django_db
def test_an_uploaded_codex_session_is_listed_under_its_files_name(project, process):
    trace = process(project, (DATA / "codex_rollout.jsonl").read_bytes(), name="fix-auth.jsonl")
    run = trace.runs.get()
    assert run.name == "fix-auth.jsonl · 0199a1b2"
    assert run.external_id == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
