"""HTTP the way exporters send it, through gunicorn (the server `loopboard serve` runs): chunked
bodies with no Content-Length, gzip and chunked, the size cap enforced while a chunked body is
read, and `POST /v1/metrics` answered by the real OpenTelemetry metric exporter."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from runs.models import Run, Trace
from tests.runs.api.test_otlp import TRACE_A, TRACE_B, request, root_span, to_proto, tool_span
from tests.runs.services.test_worker import worker_env

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 2 * 1024 * 1024  # the server's LOOPBOARD_MAX_UPLOAD_BYTES in these tests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def gunicorn(log_path: Path, env: dict[str, str]) -> Iterator[int]:
    """Run a gunicorn serving loopboard (as `loopboard serve` does) with this environment,
    its output in log_path; yield its port once it accepts connections."""
    port = free_port()
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "loopboard.wsgi", "--bind",
         f"127.0.0.1:{port}", "--workers", "1", "--graceful-timeout", "5"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[int]:
    """A gunicorn serving loopboard on the test database; yields its port."""
    log_path = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    with django_db_blocker.unblock():
        env = worker_env(LOOPBOARD_MAX_UPLOAD_BYTES=str(LIMIT))
    with gunicorn(log_path, env) as port:
        yield port


def pieces(data: bytes, size: int = 1000) -> Iterator[bytes]:
    """The body as a stream of chunks (http.client sends each as one HTTP chunk)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def send_chunked(port: int, path: str, data: bytes, key: str, **headers: str):
    """POST data with Transfer-Encoding: chunked and no Content-Length; (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}", **headers}
    connection.request("POST", path, body=pieces(data), headers=headers, encode_chunked=True)
    response = connection.getresponse()
    answer = response.status, response.read()
    connection.close()
    return answer


PROTO = {"Content-Type": "application/x-protobuf"}


@pytest.mark.django_db(transaction=True)
def test_a_chunked_otlp_body_is_taken_as_if_it_had_a_length(server, key, project):
    body = to_proto(request(root_span(TRACE_A), *(tool_span(TRACE_A, n) for n in range(4))))
    status, answer = send_chunked(server, "/v1/traces", body, key, **PROTO)
    assert status == 200 and ExportTraceServiceResponse.FromString(answer) is not None
    trace = Trace.objects.get(project=project, source="otlp")
    assert trace.raw_bytes() == body  # every byte arrived, none of the chunk framing


@pytest.mark.django_db(transaction=True)
def test_a_gzipped_chunked_json_body_is_taken(server, key, project):
    body = json.dumps(request(root_span(TRACE_B), tool_span(TRACE_B, 0))).encode()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    status, answer = send_chunked(server, "/v1/traces", gzip.compress(body), key, **headers)
    assert status == 200 and json.loads(answer) == {}
    assert Trace.objects.filter(project=project, source="otlp").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_chunked_upload_raw_or_multipart_is_accepted(server, key, project):
    lines = [{"type": "tool_call", "tool": "search", "args": {"q": "same"}, "result": "none"}] * 6
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    status, answer = send_chunked(server, "/api/traces?name=raw.jsonl", data, key)
    assert status == 202, answer
    raw = Trace.objects.get(pk=json.loads(answer)["trace_id"])
    assert raw.raw_bytes() == data and raw.name == "raw.jsonl"

    boundary = "loopboard-test-boundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="m.jsonl.gz"\r\n'
            f"Content-Type: application/gzip\r\n\r\n"
        ).encode()
        + gzip.compress(data * 2)
        + f"\r\n--{boundary}--\r\n".encode()
    )
    content_type = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    status, answer = send_chunked(server, "/api/traces", form, key, **content_type)
    assert status == 202, answer
    multipart = Trace.objects.get(pk=json.loads(answer)["trace_id"])
    assert multipart.name == "m.jsonl.gz" and multipart.size > 0


@pytest.mark.django_db(transaction=True)
def test_the_live_run_endpoints_take_chunked_bodies(server, key, project):
    headers = {"Content-Type": "application/json"}
    opened = json.dumps({"external_id": "chunky", "name": "streamed"}).encode()
    status, answer = send_chunked(server, "/api/live/runs", opened, key, **headers)
    assert status == 200 and json.loads(answer)["external_id"] == "chunky"
    steps = [{"type": "tool_call", "tool": "search", "args": {"q": "same"}}] * 3
    body = json.dumps({"steps": steps}).encode()
    status, answer = send_chunked(server, "/api/live/runs/chunky/steps", body, key, **headers)
    assert status == 200 and len(json.loads(answer)["seqs"]) == 3, answer
    check = json.dumps({"tool": "search", "args": {"q": "same"}}).encode()
    status, answer = send_chunked(server, "/api/live/runs/chunky/check", check, key, **headers)
    assert status == 200 and "verdict" in json.loads(answer)
    assert Run.objects.get(project=project, external_id="chunky").step_count == 3


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_over_the_cap_is_refused_before_it_is_all_sent(server, key):
    """The server answers 413 once the body passes the cap, while the client still sends:
    it does not wait for (or keep) the rest."""
    sock = socket.create_connection(("127.0.0.1", server), timeout=30)
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    sock.sendall(head.encode())
    chunk = b"x" * 65536
    total = 20 * LIMIT  # 40 MiB offered; the cap is 2 MiB
    sent, answer = 0, b""
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed
    sock.settimeout(10)
    try:
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < total // 2  # refused long before the end


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_just_under_the_cap_is_taken(server, key, project):
    body = b"\x0a\x00" * (LIMIT // 2 - 8)  # empty ResourceSpans: valid protobuf, under 2 MiB
    status, answer = send_chunked(server, "/v1/traces", body, key, **PROTO)
    assert status == 200, answer
    status, answer = send_chunked(server, "/v1/traces", body + b"\x0a\x00" * 16, key, **PROTO)
    assert status == 413 and answer.startswith(b"\x08\x08")  # google.rpc.Status RESOURCE_EXHAUSTED


@pytest.mark.django_db(transaction=True)
def test_the_opentelemetry_metric_exporter_exports_without_an_error(server, key):
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("openllmetry-like")
    tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
    tokens.record(733, {"gen_ai.token.type": "input", "gen_ai.system": "openai"})
    tokens.record(350, {"gen_ai.token.type": "output", "gen_ai.system": "openai"})
    meter.create_counter("llm.calls").add(2)
    data = reader.get_metrics_data()
    exporter = OTLPMetricExporter(
        endpoint=f"http://127.0.0.1:{server}/v1/metrics",
        headers={"Authorization": f"Bearer {key}"},
    )
    try:
        assert exporter.export(data) == MetricExportResult.SUCCESS
    finally:
        exporter.shutdown()
        provider.shutdown()


@pytest.mark.django_db(transaction=True)
def test_metrics_in_json_chunked_or_not_and_their_errors(server, key, project):
    body = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": []}]}]}).encode()
    headers = {"Content-Type": "application/json"}
    status, answer = send_chunked(server, "/v1/metrics", body, key, **headers)
    assert status == 200 and json.loads(answer) == {}
    status, answer = send_chunked(server, "/v1/metrics", b"\x0a\x00", key, **PROTO)
    assert status == 200 and ExportMetricsServiceResponse.FromString(answer) is not None
    status, answer = send_chunked(server, "/v1/metrics", b"{not json", key, **headers)
    assert status == 400 and "cannot decode the JSON body" in json.loads(answer)["message"]
    status, answer = send_chunked(server, "/v1/metrics", body, "lb_wrong", **headers)
    assert status == 401
    assert not Trace.objects.filter(project=project).exists()  # metrics are dropped
