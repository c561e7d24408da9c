"""OTLP/HTTP `POST /v1/traces`: encodings, partial success, errors, span joining."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from loopboard.celery import app
from runs.importers import iter_runs
from runs.models import ApiKey, OtlpSpanGroup, Run, Trace

ROOT = Path(__file__).resolve().parents[3]
TRACE_A = "5b8efff798038103d269b633813fc60c"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(autouse=True)
def eager(settings):
    """Assemble inline: Celery tasks run in the request's thread, without delays."""
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = 0
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def attr(key: str, value) -> dict:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def span(trace_id: str, span_id: str, parent: str, name: str, start: int, **attrs) -> dict:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start * 1_000_000),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + start * 1_000_000 + 500_000),
        "attributes": [attr(k.replace("__", "."), v) for k, v in attrs.items()],
    }


def tool_span(trace_id: str, n: int, tool: str = "web_search", query: str = "same") -> dict:
    return span(
        trace_id, f"{n + 1:016x}", "a" * 16, f"execute_tool {tool}", n + 1,
        gen_ai__operation__name="execute_tool", gen_ai__tool__name=tool,
        gen_ai__tool__call__arguments=json.dumps({"query": query}),
        gen_ai__tool__call__result="nothing found",
    )  # fmt: skip


def root_span(trace_id: str) -> dict:
    return span(trace_id, "a" * 16, "", "invoke_agent bot", 0,
                gen_ai__operation__name="invoke_agent", input__value="find it")  # fmt: skip


def request(*spans: dict) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", "bot")]},
                               "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}  # fmt: skip


def to_proto(data: dict) -> bytes:
    """OTLP/JSON (hex ids) -> protobuf bytes."""
    from google.protobuf.json_format import ParseDict

    message = json.loads(json.dumps(data))
    for rs in message["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    import base64

                    s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    return ParseDict(message, ExportTraceServiceRequest()).SerializeToString()


def post(client, key, body: bytes, content_type="application/x-protobuf", **extra):
    return client.post("/v1/traces", body, content_type=content_type,
                       HTTP_AUTHORIZATION=f"Bearer {key}", **extra)  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_spans_in_two_protobuf_requests_join_one_analyzed_run(client, key, project):
    first = post(client, key, to_proto(request(*[tool_span(TRACE_A, n) for n in range(3)])))
    assert first.status_code == 200 and first["Content-Type"] == "application/x-protobuf"
    reply = ExportTraceServiceResponse.FromString(first.content)
    assert reply.partial_success.rejected_spans == 0
    later = [tool_span(TRACE_A, n) for n in range(3, 6)] + [root_span(TRACE_A)]
    assert post(client, key, to_proto(request(*later))).status_code == 200
    run = Run.objects.get(project=project)
    assert run.external_id == TRACE_A and run.tool_call_count == 6
    assert run.verdict == "stop" and run.findings.filter(detector="repeat").exists()
    assert OtlpSpanGroup.objects.filter(run=run).count() == 2
    batches = Trace.objects.filter(project=project, source="otlp")
    assert batches.count() == 2 and set(batches.values_list("status", flat=True)) == {"analyzed"}


@pytest.mark.django_db(transaction=True)
def test_late_spans_rebuild_the_same_run(client, key, project):
    assert (
        post(client, key, to_proto(request(root_span(TRACE_B), tool_span(TRACE_B, 0)))).status_code
        == 200
    )
    run = Run.objects.get(project=project)
    assert run.tool_call_count == 1
    post(client, key, to_proto(request(tool_span(TRACE_B, 1, query="other"))))
    run.refresh_from_db()
    assert Run.objects.count() == 1 and run.tool_call_count == 2 and run.verdict == "ok"


@pytest.mark.django_db(transaction=True)
def test_json_encoding_gzip_and_raw_bytes_kept(client, key, project):
    body = gzip.compress(json.dumps(request(root_span(TRACE_A), tool_span(TRACE_A, 0))).encode())
    response = post(client, key, body, "application/json", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == {}  # an empty ExportTraceServiceResponse
    trace = Trace.objects.get(project=project, source="otlp")
    assert trace.raw_bytes() == body and trace.declared_format == "otlp-json"
    assert Run.objects.get(project=project).verdict == "ok"


@pytest.mark.django_db(transaction=True)
def test_partial_success_counts_rejected_spans(client, key, project):
    bad = tool_span("00" * 16, 1)
    data = request(root_span(TRACE_A), tool_span(TRACE_A, 0), bad)
    response = post(client, key, json.dumps(data).encode(), "application/json")
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "traceId" in response.json()["partialSuccess"]["errorMessage"]
    proto = post(client, key, to_proto(request(root_span(TRACE_B), tool_span(TRACE_B, 0),
                                               span(TRACE_B, "00" * 8, "", "x", 3))))  # fmt: skip
    reply = ExportTraceServiceResponse.FromString(proto.content)
    assert reply.partial_success.rejected_spans == 1 and reply.partial_success.error_message


@pytest.mark.django_db
def test_error_statuses(client, key, project, settings):
    assert post(client, key, b"\xff\xff\xff garbage").status_code == 400
    assert post(client, key, b"{nope", "application/json").status_code == 400
    assert post(client, key, b"x", "text/plain").status_code == 415
    assert post(client, key, b"x", HTTP_CONTENT_ENCODING="br").status_code == 415
    assert post(client, key, b"\x1f\x8bnot gzip", HTTP_CONTENT_ENCODING="gzip").status_code == 400
    deep = ("[" * 200 + "]" * 200).encode()
    assert post(client, key, deep, "application/json").status_code == 400
    assert client.post("/v1/traces", b"", content_type="application/x-protobuf").status_code == 401
    assert post(client, "lb_wrong", b"").status_code == 401
    row, revoked = ApiKey.issue(project, "old")
    ApiKey.objects.filter(pk=row.pk).update(revoked_at="2026-01-01T00:00:00Z")
    assert post(client, revoked, b"").status_code == 403
    assert client.get("/v1/traces").status_code == 405
    settings.MAX_UPLOAD_BYTES = 100
    assert post(client, key, b"x" * 200).status_code == 413
    settings.LOOPBOARD_API_RATE = 0.01
    settings.LOOPBOARD_API_BURST = 1
    post(client, key, b"")
    limited = post(client, key, b"")
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
    assert Trace.objects.count() == 0


@pytest.mark.django_db
def test_a_truncated_gzip_body_is_refused(client, key):
    body = gzip.compress(json.dumps(request(root_span(TRACE_A), tool_span(TRACE_A, 0))).encode())
    for cut in (body[:-8], body[: len(body) // 2]):
        response = post(client, key, cut, "application/json", HTTP_CONTENT_ENCODING="gzip")
        assert response.status_code == 400 and "ends early" in response.json()["message"]
    assert not Trace.objects.exists()


ID_CASES = [  # (spanId under TRACE_A, whether it is valid)
    ("a" * 16, True),
    ("00F067AA0BA902B7", True),  # hex in any case
    ("cafe", False),  # short
    ("0" * 16, False),  # all zero
    ("g" * 16, False),  # not hex
]
BAD_TRACES = ["5b8e", "0" * 32, "z" * 32]  # short, all zero, not hex


@pytest.mark.django_db(transaction=True)
def test_the_receiver_takes_exactly_the_spans_a_file_import_takes(client, key, project):
    spans = [span(TRACE_A, span_id, "", f"s{n}", n) for n, (span_id, _) in enumerate(ID_CASES)]
    spans += [span(trace_id, "b" * 16, "", "bad trace", 9) for trace_id in BAD_TRACES]
    body = json.dumps(request(*spans)).encode()
    (imported,) = iter_runs(body, source="same.json", format="otlp")
    response = post(client, key, body, "application/json")
    assert response.status_code == 200
    rejected = int(response.json()["partialSuccess"]["rejectedSpans"])
    taken = [span_id.lower() for span_id, ok in ID_CASES if ok]
    assert rejected == imported.skipped == len(ID_CASES) - len(taken) + len(BAD_TRACES)
    received = Run.objects.get(project=project)
    stored = list(received.steps.values_list("source_id", flat=True))
    assert stored == [step.id for step in imported.steps] == taken


@pytest.mark.django_db
def test_an_empty_request_is_fine(client, key):
    # (Django's test client drops the content type of an empty body: set it by hand)
    response = post(client, key, b"", CONTENT_TYPE="application/x-protobuf")
    assert response.status_code == 200 and ExportTraceServiceResponse.FromString(response.content)


@pytest.mark.django_db(transaction=True)
def test_the_opentelemetry_sdk_example_agent_shows_up_analyzed(live_server, key, project):
    """examples/otel_agent.py: only opentelemetry-sdk + its OTLP/HTTP exporter."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import otel_agent
    finally:
        sys.path.pop(0)
    provider = otel_agent.tracer_provider(live_server.url, key)
    tracer = provider.get_tracer("test")
    stuck = otel_agent.run_agent(tracer)
    healthy = otel_agent.run_agent(tracer, healthy=True)
    assert provider.force_flush(10_000)
    provider.shutdown()
    runs = {run.external_id: run for run in Run.objects.filter(project=project)}
    assert runs[stuck].verdict == "stop" and runs[stuck].tool_call_count == 6
    assert runs[healthy].verdict == "ok"
    from django.test import Client

    page = Client()
    page.force_login(project.members.get())
    assert page.get(f"/runs/{runs[stuck].pk}/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_request_sent_twice_is_stored_once(client, key, project):
    body = to_proto(request(root_span(TRACE_A), tool_span(TRACE_A, 0)))
    assert post(client, key, body).status_code == 200
    assert post(client, key, body).status_code == 200
    trace = Trace.objects.get(project=project, source="otlp")
    assert trace.raw_bytes() == body and OtlpSpanGroup.objects.count() == 1
    assert Run.objects.get(project=project).tool_call_count == 1


@pytest.mark.django_db(transaction=True)
def test_interleaved_traces_in_one_request_become_their_own_runs(client, key, project):
    spans = [root_span(TRACE_A), root_span(TRACE_B)]
    for n in range(5):
        spans += [tool_span(TRACE_A, n), tool_span(TRACE_B, n, query=f"q{n}")]
    spans.append(span(TRACE_B, "00" * 8, "a" * 16, "rejected", 9))  # an invalid span id
    assert post(client, key, to_proto(request(*spans))).status_code == 200
    runs = {run.external_id: run for run in Run.objects.filter(project=project)}
    assert runs[TRACE_A].tool_call_count == 5 and runs[TRACE_A].verdict == "stop"
    assert runs[TRACE_B].tool_call_count == 5 and runs[TRACE_B].verdict != "stop"
    assert runs[TRACE_B].step_count == 6  # the rejected span is not in the run


@pytest.mark.django_db(transaction=True)
def test_spans_stranded_by_a_lost_countdown_task_are_assembled_by_requeue_stale(
    client, key, project, settings, monkeypatch
):
    from datetime import timedelta

    from runs import tasks
    from runs.services import recovery

    with monkeypatch.context() as lost:
        lost.setattr(tasks.assemble_otlp, "apply_async", lambda *a, **k: None)
        post(client, key, to_proto(request(*[tool_span(TRACE_A, n) for n in range(5)])))
        post(client, key, to_proto(request(root_span(TRACE_B), tool_span(TRACE_B, 0))))
    assert not Run.objects.exists() and OtlpSpanGroup.objects.filter(assembled=False).count() == 2
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = 3600  # TRACE_A (no root yet) is not quiet yet
    eager = tasks.assemble_otlp.apply_async

    def without_timers(args=None, kwargs=None, countdown=None, **options):
        # Eager tasks ignore countdowns: TRACE_A's put-off would run again at once, for ever.
        return None if countdown else eager(args, kwargs, **options)

    with monkeypatch.context() as timers:
        timers.setattr(tasks.assemble_otlp, "apply_async", without_timers)
        recovery.requeue_stale(older_than=timedelta(0))
    assert list(Run.objects.values_list("external_id", flat=True)) == [TRACE_B]
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = 0  # a worker starting later: past the quiet period
    tasks.requeue_unfinished()
    run = Run.objects.get(external_id=TRACE_A)
    assert run.tool_call_count == 5 and run.verdict == "stop"
    assert not OtlpSpanGroup.objects.filter(assembled=False).exists()
    assert set(Trace.objects.values_list("status", flat=True)) == {"analyzed"}


def test_a_body_over_the_limit_is_a_status_not_json_detail(client, key, settings):
    settings.MAX_UPLOAD_BYTES = 10
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    response = client.post("/v1/traces", b"x" * 50, content_type="application/x-protobuf", **auth)
    assert response.status_code == 413 and response.content.startswith(b"\x08\x08")
    response = client.post("/v1/traces", b"x" * 50, content_type="application/json", **auth)
    assert response.status_code == 413 and response.json()["code"] == 8


def test_a_chunked_body_without_a_length_is_refused_not_read_as_empty(client, key):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}", "HTTP_TRANSFER_ENCODING": "chunked"}
    response = client.post("/v1/traces", b"", content_type="application/x-protobuf", **auth)
    assert response.status_code == 411 and response.content.startswith(b"\x08\x03")
    response = client.post("/api/traces", b"", content_type="application/octet-stream", **auth)
    assert response.status_code == 411 and "Content-Length" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_nul_and_lone_surrogates_in_spans_are_stored_cleaned_beside_valid_traces(
    client, key, project
):
    poisoned = request(root_span(TRACE_A), tool_span(TRACE_A, 1, tool="web\x00search\ud800"))
    poisoned["resourceSpans"][0]["resource"]["attributes"].append(attr("host.name", "a\x00b"))
    poisoned["resourceSpans"][0]["scopeSpans"][0]["spans"] += [
        root_span(TRACE_B),
        tool_span(TRACE_B, 1),
    ]
    body = json.dumps(poisoned).encode()  # \u0000 and \ud800 escapes, as exporters send them
    assert post(client, key, body, content_type="application/json").status_code == 200
    runs = {run.external_id: run for run in Run.objects.filter(project=project)}
    assert set(runs) == {TRACE_A, TRACE_B}
    assert "\x00" not in "".join(runs[TRACE_A].tools)
    assert Trace.objects.get(project=project, source="otlp").status == "analyzed"


@pytest.mark.django_db(transaction=True)
def test_a_trace_id_that_cannot_be_assembled_fails_alone_and_visibly(
    client, key, project, monkeypatch
):
    from runs.services import otlp as otlp_service

    build = otlp_service._run_of

    def broken_for_a(trace_id, spans, rows):  # a fault in one trace id only
        if trace_id == TRACE_A:
            raise RuntimeError("fault injected for this test")
        return build(trace_id, spans, rows)

    monkeypatch.setattr(otlp_service, "_run_of", broken_for_a)
    both = request(
        root_span(TRACE_A), tool_span(TRACE_A, 1), root_span(TRACE_B), tool_span(TRACE_B, 1)
    )
    assert post(client, key, to_proto(both)).status_code == 200
    assert list(Run.objects.filter(project=project).values_list("external_id", flat=True)) == [
        TRACE_B
    ]
    stored = Trace.objects.get(project=project, source="otlp")
    assert f"trace {TRACE_A}: could not be assembled: RuntimeError" in stored.error
    assert not OtlpSpanGroup.objects.filter(assembled=False).exists()  # nothing stranded
    only_a = request(root_span(TRACE_A), tool_span(TRACE_A, 2))
    post(client, key, to_proto(only_a))
    assert Trace.objects.filter(project=project, source="otlp", status="failed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_request_whose_spans_were_all_rejected_is_kept_failed_with_the_reasons(
    client, key, project
):
    body = json.dumps(request(tool_span("00" * 16, 1), tool_span("zz" * 16, 2))).encode()
    response = post(client, key, body, "application/json")
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "2"
    kept = Trace.objects.get(project=project, source="otlp")
    assert kept.status == "failed" and kept.error.startswith("every span was rejected: ")
    assert kept.raw_bytes() == body
    assert post(client, key, b'{"resourceSpans": []}', "application/json").status_code == 200
    assert Trace.objects.filter(project=project).count() == 1  # nothing to keep in an empty one


@pytest.mark.django_db(transaction=True)
def test_a_body_too_big_to_decode_inline_is_kept_and_imported_by_the_worker(
    client, key, project, settings
):
    settings.LOOPBOARD_OTLP_INLINE_BYTES = 256  # these bodies inflate past it
    both = request(
        root_span(TRACE_A), tool_span(TRACE_A, 1), root_span(TRACE_B), tool_span(TRACE_B, 1)
    )
    for body, content_type in ((gzip.compress(to_proto(both)), "application/x-protobuf"),
                               (json.dumps(both).encode(), "application/json")):  # fmt: skip
        Run.objects.all().delete()
        response = post(client, key, body, content_type=content_type)
        assert response.status_code == 200
        trace = Trace.objects.get(project=project, sha256=hashlib.sha256(body).hexdigest())
        assert trace.status == "analyzed", trace.error  # imported by the worker (eager here)
        assert trace.declared_format == "otlp" and trace.raw_bytes() == body
        assert set(trace.runs.values_list("external_id", flat=True)) == {TRACE_A, TRACE_B}


@pytest.mark.django_db(transaction=True)
def test_a_gzip_bomb_is_never_inflated_in_the_request_and_fails_in_the_worker(
    client, key, project, settings
):
    settings.LOOPBOARD_OTLP_INLINE_BYTES = 1 << 20
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in about 64 KiB
    response = post(client, key, bomb, content_type="application/json")
    assert response.status_code == 200
    trace = Trace.objects.get(project=project)
    assert trace.status == "failed" and trace.error.startswith("otlp ")
    assert trace.raw_bytes() == bomb


@pytest.mark.django_db
def test_an_unexpected_error_is_still_a_status(client, key, monkeypatch):
    from runs.api import otlp as receiver

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(receiver, "store_request", broken)  # a fault, injected
    response = post(client, key, to_proto(request(root_span(TRACE_A))))
    assert response.status_code == 500 and response.content.startswith(b"\x08\x0d")


@pytest.mark.django_db(transaction=True)
def test_the_worker_assembles_spans_within_the_deployments_held_steps_limit(
    client, key, project, settings
):
    """Issue 25 ("held OTLP spans"): the assembly read LOOPBOARD_MAX_HELD_STEPS nowhere and
    held up to the built-in million; it now fails a trace past the setting, saying why."""
    settings.LOOPBOARD_MAX_HELD_STEPS = 4
    spans = [root_span(TRACE_A), *(tool_span(TRACE_A, n) for n in range(6))]
    assert post(client, key, to_proto(request(*spans))).status_code == 200
    assert not Run.objects.filter(project=project).exists()
    stored = Trace.objects.get(project=project, source="otlp")
    assert stored.status == "failed"
    assert f"trace {TRACE_A}: " in stored.error and "more than 4 steps" in stored.error
    settings.LOOPBOARD_MAX_HELD_STEPS = 100
    spans = [root_span(TRACE_B), *(tool_span(TRACE_B, n) for n in range(6))]
    assert post(client, key, to_proto(request(*spans))).status_code == 200
    assert Run.objects.get(project=project).external_id == TRACE_B
