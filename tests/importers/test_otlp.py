"""OTLP importer (`otlp`): an export produced by the real opentelemetry-sdk in the test itself,
in protobuf, protobuf-JSON (base64 ids) and JSONL, plus a small gen_traces.py output (hex ids).
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from runs.importers import detect_format, iter_runs, otlp
from runs.importers.errors import TraceError
from runs.importers.otlp import spans

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
OUTPUT = json.dumps(
    [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "searching"},
                {"type": "tool_call", "id": "call_1", "name": "search", "arguments": {"q": "x"}},
            ],
        }
    ]
)


@pytest.fixture(scope="module")
def request_pb():
    """Two agent runs: GenAI attributes in the first, OpenInference in the second."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("loopboard.test")
    with tracer.start_as_current_span(
        "invoke_agent bot",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "bot",
            "gen_ai.conversation.id": "conv-1",
        },
    ):
        with tracer.start_as_current_span(
            "chat gpt-5",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-5",
                "gen_ai.usage.input_tokens": 100,
                "gen_ai.usage.output_tokens": 20,
                "gen_ai.output.messages": OUTPUT,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool search",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "search",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": '{"q": "x"}',
                "error.type": "TimeoutError",
            },
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "timed out"))
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}):
        with tracer.start_as_current_span(
            "llm",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "claude",
                "llm.token_count.prompt": 7,
                "llm.token_count.completion": 3,
                "llm.output_messages.0.message.content": "I will read it",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "read_file",
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "read_file",
                "tool.parameters": '{"type": "object"}',
                "input.value": '{"path": "a.py"}',
                "output.value": "print(1)",
            },
        ):
            pass
    return encode_spans(exporter.get_finished_spans())


def check_runs(runs):
    first, second = runs
    assert (first.id, first.metadata["agent"], first.metadata["model"]) == (
        "conv-1",
        "bot",
        "gpt-5",
    )
    root, chat, tool = first.steps
    assert (root.kind, root.text, root.parent_id) == ("system", "invoke_agent bot", None)
    assert (chat.kind, chat.text, chat.tokens_in, chat.tokens_out) == (
        "assistant",
        "searching",
        100,
        20,
    )
    assert chat.parent_id == tool.parent_id == root.id
    assert (tool.tool, tool.args, tool.status, tool.result) == (
        "search",
        {"q": "x"},
        "error",
        "timed out",
    )
    assert tool.batch_id == chat.id and first.tool_calls == 1
    agent, llm, read = second.steps
    assert (llm.text, llm.tokens_in, second.metadata["model"]) == ("I will read it", 7, "claude")
    assert (read.tool, read.args, read.result, read.status) == (
        "read_file",
        {"path": "a.py"},
        "print(1)",
        "ok",
    )
    assert read.batch_id == llm.id and agent.parent_id is None
    assert second.id != first.id  # no session attribute: the run is its trace
    # Runs are named after their agent, or else their root span, plus a short id.
    assert first.name == "bot · conv-1"
    assert second.name == f"agent · {second.id[:12]}"


def test_protobuf_export_from_the_sdk(request_pb):
    data = request_pb.SerializeToString()
    assert detect_format(data) == "otlp"
    check_runs(list(iter_runs(data, source="export.pb")))


def test_protobuf_json_with_base64_ids(request_pb):
    data = MessageToJson(request_pb).encode()
    assert detect_format(data) == "otlp"
    check_runs(list(iter_runs(data, source="export.json")))


def test_jsonl_of_requests_and_gzip(request_pb):
    line = json.dumps(json.loads(MessageToJson(request_pb)))
    runs = list(iter_runs(gzip.compress(f"{line}\n{line}\n".encode()), source="x.jsonl"))
    check_runs(runs)  # the second copy of every span is a duplicate id: kept once
    assert "appears twice" in runs[0].warnings[0]


def test_runs_from_request_for_the_http_endpoint(request_pb):
    check_runs(otlp.runs_from_request(request_pb, source="http"))
    check_runs(otlp.runs_from_request(json.loads(MessageToJson(request_pb)), source="http"))


def test_gen_traces_output_hex_ids_json_and_protobuf():
    for name in ("otlp_gen_traces.json", "otlp_gen_traces.pb"):
        runs = list(iter_runs(DATA / name))
        assert len(runs) == 2 and all(r.tool_calls == 2 for r in runs)
        assert all(s.batch_id for r in runs for s in r.steps if s.is_tool_call)


def test_file_that_starts_mid_tree_keeps_orphans_as_roots():
    span = {
        "traceId": "0" * 31 + "1",
        "spanId": "0" * 15 + "2",
        "parentSpanId": "0" * 15 + "9",
        "name": "execute_tool ls",
        "startTimeUnixNano": "1700000000000000000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}],
        "status": {"code": "STATUS_CODE_ERROR"},
    }
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    (run,) = iter_runs(json.dumps(request).encode(), source="mid.json")
    (step,) = run.steps
    assert (step.tool, step.parent_id, step.status) == ("ls", "0" * 15 + "9", "error")


def test_flat_span_records_jsonl():
    record = {
        "trace_id": "a" * 32,
        "span_id": "b" * 16,
        "parent_span_id": None,
        "name": "coding_agent.tool.call",
        "session_id": "s1",
        "status": "OK",
        "attributes": {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "Shell",
            "gen_ai.tool.call.arguments": '{"cmd": "ls"}',
        },
    }
    (run,) = iter_runs((json.dumps(record) + "\n").encode(), source="spans.jsonl")
    assert (run.id, run.steps[0].tool, run.steps[0].args) == ("s1", "Shell", {"cmd": "ls"})


def test_text_starting_with_a_newline_is_not_taken_for_protobuf():
    for text in (b'\n{"resourceSpans": []}', b"\n\n[1, 2]", b"\n" * 100, b"\nhello\n"):
        assert not otlp.looks_like_protobuf(text)


def test_truncated_protobuf_fails_with_a_byte_offset(request_pb):
    data = request_pb.SerializeToString()
    with pytest.raises(TraceError, match="truncated protobuf"):
        list(iter_runs(data[:-10], source="cut.pb", format="otlp"))


TRACE = "5b8efff798038103d269b633813fc60c"
#: (traceId, spanId, the span id the run shows, or None where both must reject the span)
ID_CASES = [
    (TRACE, "a" * 16, "a" * 16),
    (TRACE.upper(), "00F067AA0BA902B7", "00f067aa0ba902b7"),  # hex in any case
    (TRACE, base64.b64encode(bytes.fromhex("0102030405060708")).decode(), "0102030405060708"),
    (base64.b64encode(bytes.fromhex(TRACE)).decode(), "0a" * 8, "0a" * 8),  # protobuf JSON
    ("5b8e", "c" * 16, None),  # short trace id
    (TRACE, "cafe", None),  # short span id
    ("0" * 32, "d" * 16, None),  # all-zero trace id
    (TRACE, "0" * 16, None),  # all-zero span id
    ("z" * 32, "e" * 16, None),  # not hex (nor base64 of 16 bytes)
    (TRACE, "g" * 16, None),
    (TRACE, None, None),  # no span id
]


def id_request() -> dict:
    spans = [
        {"traceId": trace_id, "spanId": span_id, "name": f"s{n}", "parentSpanId": ""}
        for n, (trace_id, span_id, _) in enumerate(ID_CASES)
    ]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_the_receiver_decoder_and_the_file_importer_take_the_same_ids():
    body = json.dumps(id_request()).encode()
    batch = spans.read_request(body, "application/json", limits=spans.BodyLimits(1 << 20, 64))
    (run,) = iter_runs(body, source="ids.json", format="otlp")
    taken = [shown for _, _, shown in ID_CASES if shown is not None]
    assert batch.accepted == len(run.steps) == len(taken)
    assert batch.rejected == run.skipped == len(ID_CASES) - len(taken)
    assert [step.id for step in run.steps] == taken
    assert list(batch.groups) == [TRACE] and batch.groups[TRACE].has_root
    assert "traceId" in batch.error_message and "spanId" in batch.error_message


def test_protobuf_ids_of_the_wrong_size_or_all_zero_are_rejected_by_both():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for trace_id, span_id in [
        (bytes.fromhex(TRACE), b"\x01" * 8),
        (bytes.fromhex(TRACE), b"\x02" * 8),
        (bytes.fromhex(TRACE)[:8], b"\x03" * 8),
        (bytes(16), b"\x04" * 8),
        (bytes.fromhex(TRACE), b"\x05" * 4),
        (bytes.fromhex(TRACE), bytes(8)),
    ]:
        scope.spans.add(trace_id=trace_id, span_id=span_id, name="s")
    body = request.SerializeToString()
    batch = spans.read_request(body, "application/x-protobuf", limits=spans.BodyLimits(1 << 20, 64))
    (run,) = iter_runs(body, source="ids.pb", format="otlp")
    assert (batch.accepted, batch.rejected) == (len(run.steps), run.skipped) == (2, 4)
    assert [step.id for step in run.steps] == ["01" * 8, "02" * 8]


@pytest.mark.parametrize("cut", [8, 1, 40])
def test_a_truncated_gzip_body_is_refused(cut):
    body = gzip.compress(json.dumps(id_request()).encode())
    with pytest.raises(spans.OtlpError, match="ends early") as info:
        spans.decompress(body[:-cut], "gzip", max_bytes=1 << 20)
    assert info.value.status == 400
    assert spans.decompress(body, "gzip", max_bytes=1 << 20) == json.dumps(id_request()).encode()
