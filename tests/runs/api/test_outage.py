"""A database that stops answering: the API and the OTLP receiver say 503 with Retry-After
(in their own encoding, so OTLP exporters retry), never a 500 page. The outage is real: the
connection is pointed at a closed port."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

pytestmark = pytest.mark.django_db(transaction=True)
PROTOBUF = "application/x-protobuf"


@pytest.fixture
def database_down(key):
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT="1", OPTIONS={"connect_timeout": 2})
    yield
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def test_the_api_answers_503_with_retry_after(api, database_down):
    for response in (
        api.get("/api/runs"),
        api.post("/api/traces?name=a.jsonl", b"{}", content_type="application/octet-stream"),
        api.post("/api/check", {"tool": "x"}, content_type="application/json"),
    ):
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert "database" in response.json()["detail"]


def test_the_otlp_receiver_answers_a_status_exporters_retry(client, key, database_down):
    body = ExportTraceServiceRequest().SerializeToString()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    response = client.post("/v1/traces", body, content_type=PROTOBUF, **auth)
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response["Content-Type"] == PROTOBUF and response.content.startswith(b"\x08\x0e")
    response = client.post("/v1/traces", b"{}", content_type="application/json", **auth)
    assert response.status_code == 503 and json.loads(response.content)["code"] == 14
