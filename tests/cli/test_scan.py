"""`loopboard scan`: no database, human and JSON output, exit codes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loopboard.cli import scan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "detection"


def run_scan(capsys, *argv):
    code = scan.main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_loop_fixture_is_flagged(capsys):
    code, out, _ = run_scan(capsys, DATA / "loop.jsonl")
    assert code == 1
    assert out.startswith("STOP")
    assert "result_stall" in out and "repeat" in out and "since step" in out


@pytest.mark.parametrize("name", ["progress.jsonl", "poll.jsonl"])
def test_healthy_fixtures_are_ok(capsys, name):
    code, out, _ = run_scan(capsys, DATA / name)
    assert code == 0
    assert out.startswith("OK")


def test_json_lines_one_per_run_in_input_order(capsys, tmp_path):
    for name in ("b_loop.jsonl", "a_poll.jsonl"):
        shutil.copy(DATA / ("loop.jsonl" if "loop" in name else "poll.jsonl"), tmp_path / name)
    code, out, _ = run_scan(capsys, "--json", tmp_path)
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert [r["run_id"] for r in records] == ["a_poll.jsonl", "b_loop.jsonl"]
    loop = records[1]
    assert loop["verdict"] == "stop" and loop["steps"] == 11 and loop["tool_calls"] == 8
    assert 0 < loop["stall_score"] <= 1
    keys = {"detector", "severity", "tool", "signature", "seqs", "count", "threshold", "message"}
    assert all(keys <= set(f) for f in loop["findings"])
    assert records[0]["verdict"] == "ok"


def test_bad_input_exits_2_names_file_and_line_and_still_reports_good_files(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json at all\n")
    code, out, err = run_scan(capsys, "--json", bad, DATA / "poll.jsonl")
    assert code == 2
    assert f"{bad}:1" in err
    assert json.loads(out)["verdict"] == "ok"


def test_skipped_lines_are_warned_on_stderr(capsys, tmp_path):
    path = tmp_path / "partial.jsonl"
    path.write_text((DATA / "poll.jsonl").read_text() + "{broken\n")
    code, _, err = run_scan(capsys, path)
    assert code == 0
    assert "warning" in err and "partial.jsonl:16" in err


def test_policy_file_changes_the_verdict(capsys, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[tools.web_search.detectors.result_stall]\nenabled = false\n"
        "[tools.read_file]\npolling = true\n"
    )
    code, out, _ = run_scan(capsys, "--policy", policy, DATA / "loop.jsonl")
    assert code == 0, out
    policy.write_text("[defaults]\nwran = 3\n")
    code, _, err = run_scan(capsys, "--policy", policy, DATA / "loop.jsonl")
    assert code == 2 and "wran" in err


def test_scan_loads_no_django():
    code = (
        "import sys; from loopboard.cli import main; rc = main(['scan', '--json', "
        f"{str(DATA / 'poll.jsonl')!r}]); print(rc, 'django' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "0 False"


def _ipython_run(path):
    """An OpenHands-style run: reads and a failing edit, all through run_ipython."""
    edit = "edit_file_by_replace('/workspace/src/app.tsx', to_replace='const A', new_content='B')"
    error = "[No exact match found in /workspace/src/app.tsx for 'const A']"
    calls = [
        ("open_file('/workspace/src/app.tsx')", "[File: /workspace/src/app.tsx (120 lines)]", "ok"),
        ("search_dir('const A', '/workspace/src')", "[Found 1 matches for 'const A']", "ok"),
        (edit, error, "error"),
        (edit, error, "error"),  # the same failure twice in a row
        ("open_file('/workspace/src/app.tsx', 40)", "[File: /workspace/src/app.tsx]", "ok"),
    ]
    lines = [{"type": "message", "role": "user", "content": "Fix the viewer."}]
    for code, result, status in calls:
        lines.append(
            {"type": "tool_call", "tool": "run_ipython", "args": {"code": code}, "result": result,
             "status": status}
        )  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_interpreters_get_ordinary_thresholds_unless_the_policy_says_mutating(capsys, tmp_path):
    run = _ipython_run(tmp_path / "ipython.jsonl")
    code, out, _ = run_scan(capsys, run)  # one failure repeated once: below repeat's warn
    assert code == 0 and out.startswith("OK"), out
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.run_ipython]\nmutating = true\n")
    code, out, _ = run_scan(capsys, "--policy", policy, run)
    assert code == 1 and out.startswith("WARN") and "mutating_failure" in out, out


def test_json_gives_where_each_loop_started_fired_and_stopped(capsys):
    path = DATA / "cases" / "variant_fetches.jsonl"
    code, out, _ = run_scan(capsys, "--json", path)
    assert code == 1
    (finding,) = json.loads(out)["findings"]
    assert finding["detector"] == "blocker"
    assert (finding["started_at"], finding["fired_at"], finding["stop_at"]) == (1, 5, 9)
    code, out, _ = run_scan(capsys, path)
    assert "at step 5, started at 1, stop at 9;" in out


def test_a_closed_pipe_ends_the_command_quietly():
    """`loopboard scan … | head -1`: no traceback when the reader goes away."""
    reader = subprocess.Popen(
        # more than a pipe buffer of output (64 KiB), so the writer meets the closed pipe
        [sys.executable, "-m", "loopboard.cli", "scan", "--explain-format", *[str(DATA)] * 10],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader.stdout.readline()
    reader.stdout.close()
    _, err = reader.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err
