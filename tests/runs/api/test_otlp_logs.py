"""OTLP/HTTP `POST /v1/logs`: encodings, partial success, errors, and log records joining the
runs of their spans or of their session (mirrors test_otlp.py for /v1/traces).

The Claude Code requests are the fixtures written from the notes §3.23
(tests/data/importers/otlp_claude_code_*); the GenAI ones come from the real SDK and, in the
live test, its real OTLP/HTTP log exporter.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from loopboard.celery import app
from runs.importers import iter_runs
from runs.models import OtlpSpanGroup, Run, Trace
from tests.helpers import at_once

from .test_otlp import TRACE_A, attr, request, root_span, to_proto, tool_span

DATA = Path(__file__).resolve().parents[2] / "data" / "importers"
SESSION = "9f2c1d4e-7a1b-4c3d-8e5f-0a1b2c3d4e5f"


@pytest.fixture(autouse=True)
def eager(settings):
    """Assemble inline: Celery tasks run in the request's thread, without delays."""
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = 0
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def post(client, key, body: bytes, content_type="application/x-protobuf", path="/v1/logs", **extra):
    return client.post(path, body, content_type=content_type,
                       HTTP_AUTHORIZATION=f"Bearer {key}", **extra)  # fmt: skip


def logs_to_proto(data: dict) -> bytes:
    message = json.loads(json.dumps(data))
    for resource in message["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:
                        try:
                            raw = bytes.fromhex(record[key])
                        except ValueError:
                            raw = b"\x01\x02\x03"  # a bad id stays bad
                        record[key] = base64.b64encode(raw).decode()
    return ParseDict(message, ExportLogsServiceRequest()).SerializeToString()


def claude_code_requests() -> tuple[bytes, bytes]:
    """The traces and the logs request of otlp_claude_code_session.jsonl, as JSON bodies."""
    traces, logs = (DATA / "otlp_claude_code_session.jsonl").read_bytes().splitlines()
    return traces, logs


def tool_record(trace_id: str, span_id: str, result: str, seq: int) -> dict:
    return {"timeUnixNano": str(1_700_000_000_000_000_000 + seq * 1_000_000),
            "traceId": trace_id, "spanId": span_id, "eventName": "gen_ai.tool.message",
            "body": {"kvlistValue": {"values": [
                {"key": "content", "value": {"stringValue": result}},
                {"key": "id", "value": {"stringValue": f"call_{seq}"}}]}}}  # fmt: skip


def logs_request(*records: dict, resource: list | None = None) -> dict:
    return {"resourceLogs": [{"resource": {"attributes": resource or [attr("service.name", "bot")]},
                              "scopeLogs": [{"scope": {"name": "t"}, "logRecords": list(records)}]}]}  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_claude_code_spans_then_events_make_one_run_with_tool_calls(client, key, project):
    """The "done" criterion through the receivers: spans on /v1/traces, events on /v1/logs."""
    traces, logs = claude_code_requests()
    assert post(client, key, traces, "application/json", path="/v1/traces").status_code == 200
    response = post(client, key, logs, "application/json")
    assert response.status_code == 200 and response.json() == {}
    run = Run.objects.get(project=project)
    # the session of two traces, one run; its 6 claude_code.tool spans (the Edit's arguments
    # from its tool_result event): Read, Bash (exit 1), Bash (rejected), Edit, Task, Grep
    assert run.external_id == SESSION and run.tool_call_count == 6
    steps = list(run.steps.filter(kind="tool_call").order_by("seq"))
    assert [s.tool for s in steps] == ["Read", "Bash", "Bash", "Edit", "Task", "Grep"]
    assert [s.status for s in steps] == ["ok", "error", "error", "ok", "ok", "ok"]
    assert steps[3].args == {"file_path": "/repo/app.py", "old_string": "return 1",
                             "new_string": "return 0"}  # fmt: skip
    assert steps[0].result.startswith("1\tdef main")
    assert set(Trace.objects.filter(source="otlp").values_list("declared_format", flat=True)) == {
        "otlp-json", "otlp-logs-json"}  # fmt: skip
    assert set(Trace.objects.values_list("status", flat=True)) == {"analyzed"}


@pytest.mark.django_db(transaction=True)
def test_logs_only_claude_code_session_in_two_requests_is_one_run(client, key, project):
    data = json.loads((DATA / "otlp_claude_code_logs_only.json").read_text())
    records = data["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    first, second = dict(data), json.loads(json.dumps(data))
    first["resourceLogs"] = [{**data["resourceLogs"][0],
                              "scopeLogs": [{"logRecords": records[:4]}]}]  # fmt: skip
    second["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = records[4:]
    one = post(client, key, logs_to_proto(first))
    assert one.status_code == 200
    reply = ExportLogsServiceResponse.FromString(one.content)
    assert reply.partial_success.rejected_log_records == 0
    two = post(client, key, gzip.compress(logs_to_proto(second)), HTTP_CONTENT_ENCODING="gzip")
    # the record with the broken traceId (the last one) is rejected and counted
    assert (
        ExportLogsServiceResponse.FromString(two.content).partial_success.rejected_log_records == 1
    )
    run = Run.objects.get(project=project)
    # as the file import: 4 tool calls (Read, Bash 127, Write rejected, MCP), 2 failed
    (imported,) = iter_runs(
        (DATA / "otlp_claude_code_logs_only.json").read_bytes(), source="x.json"
    )
    assert run.external_id == SESSION == imported.id
    assert list(run.steps.order_by("seq").values_list("kind", flat=True)) == [
        s.kind for s in imported.steps
    ]
    assert run.tool_call_count == 4
    assert OtlpSpanGroup.objects.filter(run=run).count() == 2  # one row per request


@pytest.mark.django_db(transaction=True)
def test_genai_log_records_join_the_run_of_their_trace(client, key, project):
    post(
        client, key, to_proto(request(root_span(TRACE_A), tool_span(TRACE_A, 0))), path="/v1/traces"
    )
    # a gen_ai.tool.message for a call no span has an id for: it supplies nothing, and the
    # run is rebuilt in place (same run, same tool calls)
    record = tool_record(TRACE_A, "a" * 16, "3 hits", 1)
    assert (
        post(client, key, json.dumps(logs_request(record)).encode(), "application/json").status_code
        == 200
    )
    run = Run.objects.get(project=project)
    assert run.external_id == TRACE_A and run.tool_call_count == 1
    assert OtlpSpanGroup.objects.filter(run=run).count() == 2


@pytest.mark.django_db
def test_partial_success_and_error_statuses(client, key, project, settings):
    bad = {"traceId": "zz" * 16, "body": {"stringValue": "x"}}
    good = tool_record(TRACE_A, "a" * 16, "ok", 1)
    response = post(client, key, json.dumps(logs_request(good, bad)).encode(), "application/json")
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    assert "traceId" in response.json()["partialSuccess"]["errorMessage"]
    assert post(client, key, b"\xff\xff\xff garbage").status_code == 400
    assert post(client, key, b"{nope", "application/json").status_code == 400
    assert post(client, key, b'{"resourceLogs": "x"}', "application/json").status_code == 400
    assert post(client, key, b"x", "text/plain").status_code == 415
    assert post(client, key, b"x", HTTP_CONTENT_ENCODING="br").status_code == 415
    body = gzip.compress(json.dumps(logs_request(good)).encode())
    cut = post(client, key, body[:-8], "application/json", HTTP_CONTENT_ENCODING="gzip")
    assert cut.status_code == 400 and "ends early" in cut.json()["message"]
    deep = ("[" * 200 + "]" * 200).encode()
    assert post(client, key, deep, "application/json").status_code == 400
    assert client.post("/v1/logs", b"", content_type="application/x-protobuf").status_code == 401
    assert post(client, "lb_wrong", b"").status_code == 401
    assert client.get("/v1/logs").status_code == 405
    empty = post(client, key, b"", CONTENT_TYPE="application/x-protobuf")
    assert empty.status_code == 200 and ExportLogsServiceResponse.FromString(empty.content)
    settings.MAX_UPLOAD_BYTES = 100
    assert post(client, key, b"x" * 200).status_code == 413
    assert Trace.objects.count() == 1  # only the first, partly accepted request


@pytest.mark.django_db(transaction=True)
def test_all_records_rejected_is_kept_failed_with_the_reasons(client, key, project):
    bad = logs_request({"traceId": "00" * 15 + "01" + "ff", "body": {"stringValue": "x"}})
    response = post(client, key, json.dumps(bad).encode(), "application/json")
    assert response.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    kept = Trace.objects.get(project=project)
    assert kept.status == "failed" and kept.error.startswith("every log record was rejected: ")


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_halfway_leaves_the_logs_for_requeue_stale(
    client, key, project, monkeypatch
):
    """The assembly task is lost (a worker killed before it ran): the groups stay buffered
    and recovery assembles them, once."""
    from datetime import timedelta

    from runs import tasks
    from runs.services import recovery

    with monkeypatch.context() as lost:
        lost.setattr(tasks.assemble_otlp, "apply_async", lambda *a, **k: None)
        body = (DATA / "otlp_claude_code_logs_only.json").read_bytes()
        assert post(client, key, body, "application/json").status_code == 200
        assert post(client, key, body, "application/json").status_code == 200  # a retry
    assert not Run.objects.exists() and OtlpSpanGroup.objects.filter(assembled=False).count() == 1
    recovery.requeue_stale(older_than=timedelta(0))
    run = Run.objects.get(project=project)
    assert run.tool_call_count == 4 and not OtlpSpanGroup.objects.filter(assembled=False).exists()


@pytest.mark.django_db(transaction=True)
def test_the_opentelemetry_log_exporter_against_the_live_receiver(live_server, key, project):
    """The real OTLP/HTTP exporters (traces and logs) of the SDK, GenAI events in a span."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    headers = {"Authorization": f"Bearer {key}"}
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(f"{live_server.url}/v1/traces", headers=headers)))  # fmt: skip
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(f"{live_server.url}/v1/logs", headers=headers)))  # fmt: skip
    tracer, logger = tracer_provider.get_tracer("t"), logger_provider.get_logger("t")
    with tracer.start_as_current_span(
        "invoke_agent bot", attributes={"gen_ai.operation.name": "invoke_agent"}
    ) as root:
        for n in range(3):  # the model asks for the same search three times; logs carry the calls
            with tracer.start_as_current_span(
                "chat m", attributes={"gen_ai.operation.name": "chat"}
            ):
                call = {"id": f"c{n}", "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "same"}'}}  # fmt: skip
                logger.emit(LogRecord(event_name="gen_ai.choice",
                                      body={"index": 0, "message": {"content": "", "tool_calls": [call]}}))  # fmt: skip
            logger.emit(
                LogRecord(
                    event_name="gen_ai.tool.message", body={"content": "nothing", "id": f"c{n}"}
                )
            )
        trace_id = f"{root.get_span_context().trace_id:032x}"
    assert logger_provider.force_flush(10_000) and tracer_provider.force_flush(10_000)
    logger_provider.shutdown()
    tracer_provider.shutdown()
    run = Run.objects.get(project=project, external_id=trace_id)
    # 3 gen_ai.choice events, one call each, answered by their gen_ai.tool.message
    assert run.tool_call_count == 3
    results = list(run.steps.filter(kind="tool_call").values_list("result", flat=True))
    assert results == ["nothing"] * 3


@pytest.mark.django_db(transaction=True)
def test_two_requests_of_one_session_at_once_make_one_run(key, project):
    """Both halves of a logs-only session arrive on two connections at the same moment; each
    assembles inline (eager tasks) under the session key's advisory lock: one run, complete."""
    from django.test import Client

    data = json.loads((DATA / "otlp_claude_code_logs_only.json").read_text())
    records = data["resourceLogs"][0]["scopeLogs"][0]["logRecords"][:8]  # the 8 valid ones
    halves = []
    for part in (records[::2], records[1::2]):
        half = json.loads(json.dumps(data))
        half["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = part
        halves.append(json.dumps(half).encode())
    statuses = at_once(
        lambda body: post(Client(), key, body, "application/json").status_code, halves
    )
    assert statuses == [200, 200]
    (run,) = Run.objects.filter(project=project)
    # whichever assembled last saw both requests: 4 tool calls (3 results, 1 rejection)
    assert run.external_id == SESSION and run.tool_call_count == 4
    assert OtlpSpanGroup.objects.filter(run=run).count() == 2
    assert not OtlpSpanGroup.objects.filter(assembled=False).exists()
