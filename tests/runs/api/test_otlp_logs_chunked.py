"""`POST /v1/logs` with a chunked body and no Content-Length, through gunicorn (the server
`loopboard serve` runs), as the OpenTelemetry JS log exporter streams it (issue 24 part 2):
taken whole, protobuf and gzipped JSON; over the cap it is refused while it is read."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from runs.models import Trace
from tests.runs.api.test_otlp import TRACE_A
from tests.runs.api.test_otlp_http import LIMIT, PROTO, send_chunked, server  # noqa: F401
from tests.runs.api.test_otlp_logs import logs_request, logs_to_proto, tool_record


def _logs(records: int = 3) -> dict:
    return logs_request(
        *(tool_record(TRACE_A, f"{n + 1:016x}", "found", n) for n in range(records))
    )


@pytest.mark.django_db(transaction=True)
def test_a_chunked_protobuf_logs_body_is_taken_whole(server, key, project):  # noqa: F811
    body = logs_to_proto(_logs())
    status, answer = send_chunked(server, "/v1/logs", body, key, **PROTO)
    assert status == 200, answer
    assert ExportLogsServiceResponse.FromString(answer) is not None
    trace = Trace.objects.get(project=project, source="otlp")
    assert trace.raw_bytes() == body  # every byte arrived, none of the chunk framing


@pytest.mark.django_db(transaction=True)
def test_a_gzipped_chunked_json_logs_body_is_taken(server, key, project):  # noqa: F811
    body = gzip.compress(json.dumps(_logs()).encode())
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    status, answer = send_chunked(server, "/v1/logs", body, key, **headers)
    assert status == 200 and json.loads(answer) == {}, answer
    assert Trace.objects.filter(project=project, source="otlp").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_chunked_logs_body_over_the_cap_is_refused(server, key, project):  # noqa: F811
    status, _ = send_chunked(server, "/v1/logs", b"\x0a" * (LIMIT + 1), key, **PROTO)
    assert status == 413
    assert not Trace.objects.filter(project=project).exists()
