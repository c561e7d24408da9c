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
    assert traces.get(name="ok.jsonl.gz").raw_bytes() == second.read_bytes()


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


def test_push_retries_while_the_server_is_unavailable(tmp_path, capsys):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies: list[bytes] = []

    class Flaky(BaseHTTPRequestHandler):  # a real HTTP peer: 503 twice, then 202
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            unavailable = len(bodies) <= 2
            payload = {"detail": "busy"} if unavailable else {"trace_id": 7, "status": "received"}
            self.send_response(503 if unavailable else 202)
            if unavailable:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(payload).encode())

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trace = tmp_path / "a.jsonl"
        trace.write_bytes(healthy_trace())
        url = f"http://127.0.0.1:{server.server_port}"
        assert push.main([str(trace), "--url", url, "--key", "lb_x"]) == 0
    finally:
        server.shutdown()
    assert len(bodies) == 3 and set(bodies) == {healthy_trace()}
    assert "trace 7 received" in capsys.readouterr().out
