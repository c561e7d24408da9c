"""`loopboard push` against the live test server."""

from __future__ import annotations

import gzip

import pytest

from loopboard.cli import push
from runs.models import Trace
from tests.helpers import healthy_trace, looping_trace


@pytest.mark.django_db(transaction=True)
def test_push_sends_files_and_prints_trace_ids(live_server, key, project, tmp_path, capsys):
    first, second = tmp_path / "loop.jsonl", tmp_path / "ok.jsonl.gz"
    first.write_bytes(looping_trace())
    second.write_bytes(gzip.compress(healthy_trace()))
    status = push.main([str(first), str(second), "--url", live_server.url, "--key", key])
    out = capsys.readouterr().out
    assert status == 0, out
    traces = Trace.objects.filter(project=project, source="api")
    assert traces.count() == 2
    for trace in traces:
        assert f"trace {trace.pk} received" in out
    assert bytes(traces.get(name="ok.jsonl.gz").raw) == second.read_bytes()


@pytest.mark.django_db(transaction=True)
def test_push_exits_non_zero_on_errors(live_server, key, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert push.main([str(empty), "--url", live_server.url, "--key", key]) == 1
    assert "error 400" in capsys.readouterr().out
    good = tmp_path / "a.jsonl"
    good.write_bytes(healthy_trace())
    assert push.main([str(good), "--url", live_server.url, "--key", "lb_bad"]) == 1
    assert push.main([str(tmp_path / "missing"), "--url", live_server.url, "--key", key]) == 2
