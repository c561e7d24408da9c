"""`loopboard labels export` against the live test server, and `loopboard scan --labels`
scoring a scan of the same trace files against the exported labels."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loopboard.cli import labels as labels_cli
from loopboard.cli import scan
from runs.services import labels
from tests.helpers import healthy_trace, looping_trace

LOOP = looping_trace(6)
FETCH_LOOP = looping_trace(6, tool="fetch")


def alarm(run):
    return run.findings.exclude(severity="info").order_by("fired_at", "pk").first()


@pytest.fixture
def labeled(user, project, process):
    """stuck.jsonl's loop labeled real, fetchy.jsonl's a false alarm, and a label on a run
    whose file is not scanned below."""
    stuck = process(project, LOOP, name="stuck.jsonl").runs.get()
    fetchy = process(project, FETCH_LOOP, name="fetchy.jsonl").runs.get()
    elsewhere = process(project, looping_trace(7), name="elsewhere.jsonl").runs.get()
    labels.label_finding(user, alarm(stuck), "real")
    labels.label_finding(user, alarm(fetchy), "false", "polling")
    labels.label_finding(user, alarm(elsewhere), "real")
    return stuck, fetchy


def export_to(tmp_path, url: str, key: str, *extra: str) -> tuple[int, list[dict]]:
    out = tmp_path / "labels.jsonl"
    code = labels_cli.main(["export", "--url", url, "--key", key, "-o", str(out), *extra])
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return code, rows


@pytest.mark.django_db(transaction=True)
def test_export_writes_the_projects_labels_as_json_lines(
    live_server, key, labeled, tmp_path, capsys
):
    code, rows = export_to(tmp_path, live_server.url, key)
    assert code == 0
    assert [r["external_id"] for r in rows] == ["stuck.jsonl", "fetchy.jsonl", "elsewhere.jsonl"]
    assert [r["verdict"] for r in rows] == ["real", "false", "real"]
    assert "3 labels" in capsys.readouterr().err
    code, rows = export_to(tmp_path, live_server.url, key, "--since", "2999-01-01")
    assert (code, rows) == (0, [])


@pytest.mark.django_db(transaction=True)
def test_export_to_stdout_and_its_errors(live_server, key, labeled, capsysbinary):
    assert labels_cli.main(["export", "--url", live_server.url, "--key", key]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert len(out.splitlines()) == 3 and json.loads(out.splitlines()[0])["verdict"] == "real"
    assert labels_cli.main(["export", "--url", live_server.url, "--key", "lb_nope"]) == 1
    assert b"error 401: invalid API key" in capsysbinary.readouterr().err
    bad_time = ["export", "--url", live_server.url, "--key", key, "--since", "soon"]
    assert labels_cli.main(bad_time) == 1
    assert labels_cli.main(["export", "--url", "http://127.0.0.1:9", "--key", key]) == 1


@pytest.mark.django_db(transaction=True)
def test_scan_scores_the_same_files_against_the_exported_labels(
    live_server, key, labeled, tmp_path, capsys
):
    code, _ = export_to(tmp_path, live_server.url, key)
    assert code == 0
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "stuck.jsonl").write_bytes(LOOP)
    (traces / "fetchy.jsonl").write_bytes(FETCH_LOOP)
    (traces / "fine.jsonl").write_bytes(healthy_trace())
    capsys.readouterr()
    labels_file = str(tmp_path / "labels.jsonl")
    assert scan.main([str(traces), "--labels", labels_file]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    # the real loop is found (tp), the false alarm still raised (fp); elsewhere.jsonl not scanned
    assert last == (
        f"labels {labels_file}: precision 0.50, recall 1.00 "
        "(tp 1, fp 1, fn 0, tn 0; 2 of 3 labels are on the scanned runs)"
    )
    # a policy that no longer flags fetch: the false alarm is gone
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.fetch]\npolling = true\nwarn = 50\nstop = 60\n")
    assert scan.main([str(traces), "--labels", labels_file, "--policy", str(policy), "--json"]) == 1
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert record["labels"] == labels_file and record["ignored"] == 1
    assert record["score"] | {} == {
        "tp": 1, "fp": 0, "fn": 0, "tn": 1, "labels": 2, "precision": 1.0, "recall": 1.0,
    }  # fmt: skip


def test_scan_refuses_a_file_that_is_not_exported_labels(tmp_path, capsys):
    trace = tmp_path / "stuck.jsonl"
    trace.write_bytes(LOOP)
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"verdict": "real"}\n')
    assert scan.main([str(trace), "--labels", str(bad)]) == 2
    assert "line 1: not an exported label" in capsys.readouterr().err
    assert scan.main([str(trace), "--labels", str(tmp_path / "missing.jsonl")]) == 2


def test_scan_with_labels_loads_no_django(tmp_path):
    trace = tmp_path / "stuck.jsonl"
    trace.write_bytes(LOOP)
    row = {"external_id": "stuck.jsonl", "detector": "repeat", "tool": "web_search"}
    (tmp_path / "labels.jsonl").write_text(json.dumps(row | {"seqs": [1, 3], "verdict": "real"}))
    code = (
        "import sys; from loopboard.cli import scan; "
        f"rc = scan.main([{str(trace)!r}, '--labels', {str(tmp_path / 'labels.jsonl')!r}]); "
        "print(rc, 'django' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "recall 1.00" in done.stdout
    assert done.stdout.strip().endswith("1 False")
