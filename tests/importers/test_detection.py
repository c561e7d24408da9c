"""Detection by evidence: every file in tests/data is taken for its own format, an unknown
file's error gives each format's reason, and `scan --explain-format` prints the scores.

Which format a file is comes from its place and name (the table below), not from the code
under test; a new fixture whose name fits no row fails `test_every_fixture_has_a_row`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopboard.cli import scan
from runs.importers import IMPORTERS, TraceError, detect_format, explain_format, iter_runs
from runs.importers.detect import MAX_RECORDS, sample_of

DATA = Path(__file__).resolve().parents[1] / "data"

# (folder under tests/data, file-name prefix) -> format; None: must be unknown
EXPECTED = [
    ("detection", "", "native"),
    ("traces/claude-code", "", "claude-code"),
    ("traces/swe-agent", "", "swe-agent"),
    ("traces/mini-swe-agent", "", "mini-swe-agent"),
    ("traces/openhands", "", "openhands"),
    ("importers", "claude_code", "claude-code"),
    ("importers", "codex", "codex"),
    ("importers", "gemini_stream", "gemini-stream"),
    ("importers", "gemini_chat", "gemini-chat"),
    ("importers", "openhands", "openhands"),
    ("importers", "otlp", "otlp"),
    ("importers", "mini_swe_agent", "mini-swe-agent"),
    ("importers", "swe_agent", "swe-agent"),
    ("importers", "chat", "chat"),
    ("importers", "anthropic", "anthropic"),
    ("importers", "responses", "responses"),
    ("importers", "tree", "tree"),
    ("importers", "native", "native"),
    ("importers", "tau2", "tau2"),
    ("importers", "openai_agents", "openai-agents"),
    ("importers", "copilot_cli", "copilot-cli"),
    ("importers", "opencode", "opencode"),
    ("importers", "claude_code_hooks", "claude-code-hooks"),
    ("importers", "cursor", "cursor"),
    ("traces/pi", "", "pi"),
    ("traces/atif", "", "atif"),
    ("traces/claude-managed-agents", "", "managed-agents"),
    ("traces/inspect-ai", "", "inspect-ai"),
    ("traces/langsmith", "", "langsmith"),
    ("importers", "pi_", "pi"),
    ("importers", "atif", "atif"),
    ("importers", "managed_agents", "managed-agents"),
    ("importers", "inspect_ai", "inspect-ai"),
    ("importers", "langsmith", "langsmith"),
    ("importers", "generic", None),
]


def expected_format(path: Path) -> str | None | bool:
    """The table's format for a file, or False when no row names it."""
    folder = path.parent.relative_to(DATA).as_posix()
    best = None
    for place, prefix, name in EXPECTED:
        here = folder == place or folder.startswith(place + "/")
        longer = best is None or len(prefix) > len(best[0])
        if here and path.name.startswith(prefix) and longer:
            best = (prefix, name)
    return False if best is None else best[1]


NOT_TRACES = {"labels.json"}  # bench_localisation's labels for tests/data/detection/cases

FILES = sorted(
    p
    for p in DATA.rglob("*")
    if p.is_file()
    and p.suffix not in (".md", ".txt")
    and not p.name.startswith(".")
    and p.name not in NOT_TRACES
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_fixture_is_detected_as_its_format(path: Path) -> None:
    expected = expected_format(path)
    assert expected is not False, f"add a row for {path} to EXPECTED"
    head = path.read_bytes()[:65536]
    if expected is None:
        with pytest.raises(TraceError, match="unknown trace format"):
            detect_format(head, source=path.name)
        return
    verdict = explain_format(head)
    assert detect_format(head) == expected, verdict.explain()
    runner_up = verdict.claims[1][1]
    assert verdict.claims[0][1].score > runner_up.score, verdict.explain()


def test_metadata_records_first_do_not_hide_the_format() -> None:
    # ten records no importer knows, then native events: judged on all the records
    lines = [json.dumps({"type": "x-meta", "n": n}) for n in range(10)]
    lines += [
        json.dumps({"type": "tool_call", "tool": "grep", "args": {"n": n}}) for n in range(20)
    ]
    data = "\n".join(lines).encode() + b"\n"
    assert detect_format(data) == "native"
    (run,) = iter_runs(data, source="meta.jsonl")
    assert run.tool_calls == 20 and run.skipped == 0  # the unknown types are not errors


def test_the_sample_reads_up_to_max_records_and_splits_two_values_on_a_line() -> None:
    line = json.dumps({"type": "tool_call", "tool": "t", "args": {}})
    sample = sample_of(((line + line + "\n") * 150).encode())
    assert sample.layout == "jsonl" and len(sample.records) == MAX_RECORDS


def test_a_document_cut_by_the_head_is_read_as_far_as_it_goes() -> None:
    doc = {"messages": [{"role": "user", "content": "x" * 1000} for _ in range(200)]}
    sample = sample_of(json.dumps(doc, indent=1).encode()[:65536])
    assert sample.layout == "json" and not sample.complete
    assert isinstance(sample.top, dict) and len(sample.top["messages"]) > 10


def test_unknown_file_error_lists_every_format_and_its_reason() -> None:
    data = json.dumps({"hello": "world", "items": [1, 2, 3]}).encode()
    with pytest.raises(TraceError) as info:
        list(iter_runs(data, source="odd.json"))
    message = str(info.value)
    assert message.startswith("odd.json:1: unknown trace format")
    for name in IMPORTERS:
        if name != "generic":
            assert f"{name}: " in message
    assert "no `resourceSpans` request" in message  # a reason, not just a name


def test_explain_format_prints_scores_and_the_choice(capsys) -> None:
    path = DATA / "detection" / "loop.jsonl"
    code = scan.main(["--explain-format", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}: jsonl")
    assert lines[1].split()[:2] == ["native", "0.60"]
    assert lines[-1].strip() == "-> native"
    scored = [line for line in lines[1:-1] if not line.startswith("  (")]
    assert len(scored) == len(IMPORTERS) - 1  # every format but generic, one line each
    assert sum("0.00" not in line for line in scored) <= 3


def test_explain_format_json_and_exit_2_for_an_unknown_file(capsys, tmp_path) -> None:
    odd = tmp_path / "odd.txt.log"
    odd.write_text("just some text\n")
    code = scan.main(["--explain-format", "--json", str(odd)])
    record = json.loads(capsys.readouterr().out)
    assert code == 2
    assert record["format"] is None and record["layout"] == "text"
    assert {claim["format"] for claim in record["claims"]} == set(IMPORTERS) - {"generic"}
    assert all(claim["score"] == 0 and claim["reason"] for claim in record["claims"])
