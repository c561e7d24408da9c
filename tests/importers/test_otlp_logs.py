"""The OTLP logs signal in files (`resourceLogs`, JSON/JSONL/protobuf): Claude Code's native
events joined to its spans or making a logs-only run, and GenAI log events (old per-message
semconv and `gen_ai.client.inference.operation.details`) joined by trace and span id.

Claude Code cannot run here: its fixtures are written from the notes §3.23
(tests/data/importers/otlp_claude_code_*, see the README there). The GenAI events are emitted
by the real opentelemetry-sdk logs API inside real spans, and encoded by its OTLP encoder.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson, ParseDict
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runs.importers import detect_format, iter_runs
from runs.importers.errors import TraceError

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
SESSION = "9f2c1d4e-7a1b-4c3d-8e5f-0a1b2c3d4e5f"


def read(data: bytes, source: str = "otlp.json") -> list:
    assert detect_format(data[:65536]) == "otlp"
    return list(iter_runs(data, source=source))


def calls(run) -> list[tuple]:
    return [(s.tool, s.status) for s in run.steps if s.kind == "tool_call"]


def logs_pb(data: dict) -> bytes:
    """OTLP/JSON logs (hex ids) -> protobuf bytes."""
    message = json.loads(json.dumps(data))
    for resource in message["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:
                        try:
                            raw = bytes.fromhex(record[key])
                        except ValueError:
                            raw = b"\x01\x02\x03"  # a bad id stays bad: 3 bytes
                        record[key] = base64.b64encode(raw).decode()
    return ParseDict(message, ExportLogsServiceRequest()).SerializeToString()


def test_claude_code_spans_and_events_show_tool_calls_with_arguments_and_results():
    """The "done" criterion: a Claude Code session exported through its native telemetry."""
    (run,) = read((DATA / "otlp_claude_code_session.jsonl").read_bytes())
    # one session, two interaction traces; the claude_code.tool spans in the fixture:
    # Read, Bash (exit 1), Bash (rejected), Edit, Task, Grep (inside the Task)
    assert run.id == SESSION and len(run.metadata["trace_ids"]) == 2
    assert run.metadata["dialects"] == ["claude_code"]
    assert calls(run) == [("Read", "ok"), ("Bash", "error"), ("Bash", "error"), ("Edit", "ok"),
                          ("Task", "ok"), ("Grep", "ok")]  # fmt: skip
    read_, pytest_, rm, edit, task, grep = (s for s in run.steps if s.kind == "tool_call")
    assert read_.args == {"file_path": "/repo/app.py"} and read_.result.startswith("1\tdef main")
    assert pytest_.args["full_command"] == "python -m pytest -q"
    assert "1 failed" in pytest_.result  # the span's output; execution success=false fails it
    assert rm.result == "rejected (user_reject)"  # tool.blocked_on_user: decision reject
    # the Edit span has no content: its arguments come from its tool_result event
    assert edit.args == {"file_path": "/repo/app.py", "old_string": "return 1",
                         "new_string": "return 0"}  # fmt: skip
    assert grep.parent_id == task.id  # the sub-agent's tool under the Task span
    # tool.execution / blocked_on_user spans are folded in, not steps: 15 spans - 3 = 12,
    # plus the two user_prompt events (api_request events repeat the llm_request spans)
    assert len(run.steps) == 14
    prompts = [s.text for s in run.steps if s.kind == "user"]
    assert prompts == ["(a prompt of 31 characters, not logged)", "now fix main"]
    assert [s.tokens_in for s in run.steps if s.kind == "assistant"] == [1200, 1500, 2000, 300]


def test_claude_code_logs_only_build_the_run_from_session_id_in_sequence_order():
    data = (DATA / "otlp_claude_code_logs_only.json").read_bytes()
    for body in (data, logs_pb(json.loads(data))):
        (run,) = read(body)
        assert run.id == SESSION and run.metadata["trace_ids"] == []
        # records are out of order in the file; event.sequence 1..8 orders them
        assert [s.kind for s in run.steps] == ["user", "assistant", "tool_call", "assistant",
                                               "tool_call", "tool_call", "assistant", "tool_call"]  # fmt: skip
        # 3 tool_result events (one "success": "false"), 1 rejected tool_decision
        assert calls(run) == [("Read", "ok"), ("Bash", "error"), ("Write", "error"),
                              ("mcp__github__get_issue", "ok")]  # fmt: skip
        bash = run.steps[4]
        assert bash.args["full_command"] == "pytset -q" and bash.result == "Exit code 127"
        assert run.steps[6].status == "error" and "529" in run.steps[6].text
        assert [s.cost for s in run.steps if s.cost] == [0.01, 0.02]
        assert run.skipped == 1  # the record with traceId "not-a-trace-id"


def genai_export(
    *, with_tool_span: bool, new_semconv: bool = False, result: str = "3 hits"
) -> tuple[bytes, bytes]:
    """A chat span that asks for one tool call, the call, a second chat span answering; the
    GenAI events emitted inside the chat spans with the real SDK."""
    spans, records = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(records))
    tracer, logger = tracer_provider.get_tracer("t"), logger_provider.get_logger("t")
    call = {"id": "call_1", "type": "function",
            "function": {"name": "search", "arguments": '{"q": "otlp"}'}}  # fmt: skip
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    with tracer.start_as_current_span(
        "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        with tracer.start_as_current_span("chat gpt-4o", attributes=chat):
            if new_semconv:
                output = [{"role": "assistant", "parts": [
                    {"type": "text", "content": "searching"},
                    {"type": "tool_call", "id": "call_1", "name": "search", "arguments": {"q": "otlp"}}]}]  # fmt: skip
                logger.emit(LogRecord(event_name="gen_ai.client.inference.operation.details",
                                      attributes={"gen_ai.operation.name": "chat",
                                                  "gen_ai.output.messages": json.dumps(output)}))  # fmt: skip
            else:
                logger.emit(
                    LogRecord(event_name="gen_ai.user.message", body={"content": "find otlp"})
                )
                logger.emit(LogRecord(event_name="gen_ai.choice", body={
                    "index": 0, "finish_reason": "tool_calls",
                    "message": {"content": "searching", "tool_calls": [call]}}))  # fmt: skip
        if with_tool_span:
            with tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": "call_1"}):  # fmt: skip
                pass
        with tracer.start_as_current_span("chat gpt-4o", attributes=chat):
            if new_semconv:
                inputs = [{"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "call_1", "response": result}]}]  # fmt: skip
                logger.emit(LogRecord(event_name="gen_ai.client.inference.operation.details",
                                      attributes={"gen_ai.input.messages": json.dumps(inputs),
                                                  "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "found 3"}]}])}))  # fmt: skip
            else:
                logger.emit(
                    LogRecord(event_name="gen_ai.assistant.message", body={"tool_calls": [call]})
                )  # history: no second call
                logger.emit(
                    LogRecord(
                        event_name="gen_ai.tool.message", body={"content": result, "id": "call_1"}
                    )
                )
                logger.emit(
                    LogRecord(
                        event_name="gen_ai.choice",
                        body={"index": 0, "message": {"content": "found 3"}},
                    )
                )
    trace_pb = encode_spans(spans.get_finished_spans()).SerializeToString()
    logs = encode_logs(records.get_finished_logs()).SerializeToString()
    return trace_pb, logs


def jsonl(*requests: bytes) -> bytes:
    """Protobuf requests as protobuf-JSON lines (base64 ids), traces first."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    trace = MessageToJson(ExportTraceServiceRequest.FromString(requests[0]), indent=None)
    logs = MessageToJson(ExportLogsServiceRequest.FromString(requests[1]), indent=None)
    return (trace + "\n" + logs + "\n").encode()


@pytest.mark.parametrize("new_semconv", [False, True])
def test_genai_events_fill_their_spans_and_the_tool_span_is_not_doubled(new_semconv):
    (run,) = read(jsonl(*genai_export(with_tool_span=True, new_semconv=new_semconv)), "x.jsonl")
    # one execute_tool span with call id call_1; the events' call_1 is that span
    assert calls(run) == [("search", "ok")]
    (tool,) = (s for s in run.steps if s.kind == "tool_call")
    assert tool.result == "3 hits"  # from gen_ai.tool.message / tool_call_response
    assert [s.text for s in run.steps if s.kind == "assistant"] == ["searching", "found 3"]
    first_chat = next(s for s in run.steps if s.kind == "assistant")
    assert tool.batch_id == first_chat.id


@pytest.mark.parametrize("new_semconv", [False, True])
def test_genai_events_without_a_tool_span_make_the_call(new_semconv):
    (run,) = read(jsonl(*genai_export(with_tool_span=False, new_semconv=new_semconv)), "x.jsonl")
    # the call only in the model's output event, its result from the next call's input
    ((tool, status),) = calls(run)
    step = next(s for s in run.steps if s.kind == "tool_call")
    assert (tool, step.args, step.result, status) == ("search", {"q": "otlp"}, "3 hits", "ok")


def test_a_logs_protobuf_file_is_detected_and_read():
    _, logs = genai_export(with_tool_span=False)
    (run,) = read(logs, "logs.pb")
    assert calls(run) == [("search", "ok")]


def test_bad_logs_files():
    with pytest.raises(TraceError, match="no spans or log records"):
        list(iter_runs(b'{"resourceLogs": []}', source="e.json", format="otlp"))
    bad = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz", "body": {}}, 7]}]}]}
    with pytest.raises(TraceError, match="invalid traceId"):
        list(iter_runs(json.dumps(bad).encode(), source="b.json", format="otlp"))


def logs_doc(args: object, tool: str = "f") -> dict:
    """A one-call logs-only file: one Claude Code tool_result event with these arguments."""
    attrs = {"session.id": "s1", "event.name": "tool_result", "tool_name": tool,
             "success": "true", "tool_parameters": json.dumps(args)}  # fmt: skip
    record = {"timeUnixNano": "1", "body": {"stringValue": "claude_code.tool_result"},
              "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}  # fmt: skip
    return {"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}


def test_logs_files_hold_the_edge_cases():
    from runs.importers.reading import Limits

    data = json.dumps(logs_doc({"v": 1}), indent=1).encode()
    with pytest.raises(TraceError) as info:  # truncated
        list(iter_runs(data[:-8], source="t.json", format="otlp"))
    assert info.value.line is not None and "truncated" in info.value.reason
    with pytest.raises(TraceError, match="UTF"):
        list(iter_runs(data.replace(b'f"', b'\xff"', 1), source="t.json", format="otlp"))
    (run,) = iter_runs(
        json.dumps(logs_doc({"v": "y" * 5000}, tool="x" * 500)).encode(),
        source="t.json",
        format="otlp",
        limits=Limits(max_value_chars=100),
    )
    (call,) = (s for s in run.steps if s.kind == "tool_call")
    assert call.args == {"v": "y" * 100 + "…[truncated 4900 chars]"} and call.tool == "x" * 200
    value: object = "leaf"
    for _ in range(30):
        value = {"a": value}
    (run,) = iter_runs(json.dumps(logs_doc(value)).encode(), source="t.json", format="otlp",
                       limits=Limits(max_depth=20))  # fmt: skip
    (call,) = (s for s in run.steps if s.kind == "tool_call")
    assert "nested deeper than 20 levels, cut" in json.dumps(call.args, ensure_ascii=False)


def test_the_otlp_claim_takes_logs_exports():
    """What drove the change: a `resourceLogs` export was an unknown file."""
    from runs.importers import otlp
    from runs.importers.detect import sample_of
    from runs.importers.otlp import logs as otlp_logs
    from runs.importers.otlp import spans as otlp_spans

    document = (DATA / "otlp_claude_code_logs_only.json").read_bytes()
    claim = otlp.claim(sample_of(document))
    assert claim.score == pytest.approx(0.9) and "OTLP requests" in claim.reason
    lines = (DATA / "otlp_claude_code_session.jsonl").read_bytes()
    assert otlp.claim(sample_of(lines)).score == pytest.approx(0.9)  # both lines fit
    trace_pb, logs_pb_ = genai_export(with_tool_span=True)
    assert otlp.claim(sample_of(logs_pb_)).reason.startswith("an OTLP protobuf logs export")
    assert otlp.claim(sample_of(trace_pb)).reason.startswith("an OTLP protobuf export")
    # the wire-format checks tell the two signals apart
    assert otlp_logs.looks_like_protobuf(logs_pb_) and not otlp_spans.looks_like_protobuf(logs_pb_)
    assert otlp_spans.looks_like_protobuf(trace_pb) and not otlp_logs.looks_like_protobuf(trace_pb)
    no = otlp.claim(sample_of(b'{"logs": []}'))
    assert no.score == 0 and "no `resourceLogs` request" in no.reason


@pytest.mark.parametrize("with_tool_span", [False, True])
@pytest.mark.parametrize("new_semconv", [False, True])
def test_a_result_rebuilt_from_chat_messages_that_reads_as_an_error_fails(
    new_semconv, with_tool_span
):
    text = "Error: FileNotFoundError(2, 'No such file or directory')"
    export = genai_export(with_tool_span=with_tool_span, new_semconv=new_semconv, result=text)
    (run,) = read(jsonl(*export), "x.jsonl")
    (step,) = (s for s in run.steps if s.kind == "tool_call")
    assert (step.result, step.status) == (text, "error")
