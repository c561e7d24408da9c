"""OTLP log export requests, from bytes to `LogEvent`s: the decoder of `POST /v1/logs`, of
the assembly of received log records, and of the OTLP file importer's `resourceLogs` files.

Written from the format notes §3.23 ("OTLP/HTTP logs signal"), not from a real export:

- a request is an `ExportLogsServiceRequest`, protobuf or its JSON mapping:
  `{"resourceLogs": [{"resource": {"attributes": [KeyValue]}, "scopeLogs": [{"scope": {...},
  "logRecords": [LogRecord]}]}]}` (snake_case names and the older `instrumentationLibraryLogs`
  are read too);
- a `LogRecord`: `timeUnixNano` (0 or missing: `observedTimeUnixNano`, then the attribute
  `event.timestamp`), `severityNumber` (17+ is ERROR), `body` (an AnyValue: text, a kvlist, an
  array), `attributes`, `traceId` / `spanId` (hex in JSON, bytes in protobuf, empty outside a
  span), `eventName` (newer protocol versions; older emitters use the attribute `event.name`,
  Claude Code also puts "claude_code.<name>" in the body);
- ids follow spans.py's rule; a record whose trace or span id is present but not a valid id is
  rejected (counted, with the reason), an empty one means "not in a span";
- the session of a record: the first of the dialect table's session keys on the record, then
  on its resource (Claude Code puts `session.id` on every record).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any

from ..content import parse_time
from . import spans
from .spans import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    BodyLimits,
    ExportRequest,
    Rejected,
    SpanGroup,
    _any_value,
    _attributes,
    _get,
    _ignore,
    _nanos,
    _pb_value,
    _session,
    decode_export,
    encoding_of,
    first_record,
    group_key,
    iter_pb_fields,
    otlp_id,
)

CLAUDE_CODE_PREFIX = "claude_code."


@dataclass(slots=True)
class LogEvent:
    """One log record, decoded from JSON or protobuf, before it joins a run."""

    trace_id: str | None
    span_id: str | None
    name: str  # the event name ("tool_result", "gen_ai.choice", ...), "" when none
    time: float | None
    seq: int | None  # Claude Code's event.sequence
    severity: int
    body: Any
    attrs: dict[str, Any]
    session: str | None = None
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The run buffer key (spans.group_key): the session's, else the trace id's."""
        return group_key(self.trace_id, self.session)


def is_logs_request(value: Any) -> bool:
    """Return whether a JSON value is an ExportLogsServiceRequest."""
    return isinstance(value, dict) and ("resourceLogs" in value or "resource_logs" in value)


def _resources_field(request: dict) -> Any:
    return _get(request, "resourceLogs", "resource_logs")


def _pb_request(body: bytes) -> Any:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return ExportLogsServiceRequest.FromString(body)


def decode(body: bytes, encoding: str, *, max_depth: int) -> Any:
    """Return the logs export request from (decompressed) bytes, or raise OtlpError(400)."""
    return decode_export(
        body,
        encoding,
        max_depth=max_depth,
        from_protobuf=_pb_request,
        resources=_resources_field,
        expected='an ExportLogsServiceRequest: {"resourceLogs": [...]}',
    )


# A logs body arrives as a traces body does (`spans.decode_body`), and decodes as logs.
decode_body = partial(spans.decode_body, decoder=decode)


def read_request(
    body: bytes, content_type: str, content_encoding: str = "", *, limits: BodyLimits
) -> ExportRequest:
    """Decode a logs request body; count its valid records by run buffer key (a trace id, or
    a session's key), invalid ones rejected. Records never hold a root: has_root stays False.
    """
    encoding = encoding_of(content_type)
    request = decode_body(body, encoding, content_encoding, limits=limits)
    export = ExportRequest(encoding=encoding, request=request)
    for event in events_from_request(request, rejected=export.reject):
        group = export.groups.get(event.key)
        if group is None:
            group = export.groups[event.key] = SpanGroup()
        group.spans += 1
        export.accepted += 1
    return export


def resources_of(request: Any) -> Iterator[Any]:
    """Yield the ResourceLogs of a request (protobuf message or OTLP/JSON dict)."""
    if isinstance(request, dict):
        items = _resources_field(request)
        yield from items if isinstance(items, list) else ()
    else:
        yield from request.resource_logs


def events_from_request(
    request: Any, *, rejected: Rejected = _ignore, keys: set[str] | None = None
) -> Iterator[LogEvent]:
    """Yield the valid log records of one request (protobuf message or bytes, or JSON dict),
    only those whose run buffer key is in `keys` when given."""
    if isinstance(request, bytes | bytearray):
        request = _pb_request(bytes(request))
    if not isinstance(request, dict) and not hasattr(request, "resource_logs"):
        rejected(f"a logs request must be an object, not {type(request).__name__}")
        return
    for resource_logs in resources_of(request):
        for event in events_of_resource(resource_logs, rejected=rejected):
            if keys is None or event.key in keys:
                yield event


def events_of_resource(resource_logs: Any, *, rejected: Rejected = _ignore) -> Iterator[LogEvent]:
    """Yield the valid log records of one ResourceLogs (protobuf or JSON) as `LogEvent`s."""
    if not isinstance(resource_logs, dict):
        if not hasattr(resource_logs, "scope_logs"):
            rejected("a resourceLogs item must be an object")
            return
        resource = {kv.key: _pb_value(kv.value) for kv in resource_logs.resource.attributes}
        for scope in resource_logs.scope_logs:
            for record in scope.log_records:
                event = _pb_event(record, resource)
                if isinstance(event, str):
                    rejected(event)
                else:
                    yield event
        return
    res = resource_logs.get("resource")
    resource = _attributes(res.get("attributes") if isinstance(res, dict) else None)
    scopes = (
        _get(resource_logs, "scopeLogs", "scope_logs")
        or resource_logs.get("instrumentationLibraryLogs")
        or []
    )
    for scope in scopes if isinstance(scopes, list) else ():
        if not isinstance(scope, dict):
            rejected("a scopeLogs item must be an object")
            continue
        records = _get(scope, "logRecords", "log_records")
        for record in records if isinstance(records, list) else ():
            event = _json_event(record, resource)
            if isinstance(event, str):
                rejected(event)
            else:
                yield event


def _ids(trace: Any, span: Any) -> tuple[str | None, str | None] | str:
    """Return the (trace id, span id) of a record, None where empty, or why they are bad."""
    trace_id = span_id = None
    if trace not in (None, "", b""):
        trace_id = otlp_id(trace, TRACE_ID_BYTES)
        if trace_id is None and (isinstance(trace, bytes) or trace.strip("0")):
            return "invalid traceId on a log record (expected 16 bytes: 32 hex digits)"
    if span not in (None, "", b""):
        span_id = otlp_id(span, SPAN_ID_BYTES)
        if span_id is None and (isinstance(span, bytes) or span.strip("0")):
            return "invalid spanId on a log record (expected 8 bytes: 16 hex digits)"
    return trace_id, span_id


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 is a float infinity
        return None


def _event_name(explicit: Any, attrs: dict[str, Any], body: Any) -> str:
    name = explicit or attrs.get("event.name")
    if not name and isinstance(body, str) and body.startswith(CLAUDE_CODE_PREFIX):
        name = body
    name = str(name or "")
    if name.startswith(CLAUDE_CODE_PREFIX) and "service.name" not in attrs:
        name = name.removeprefix(CLAUDE_CODE_PREFIX)  # body "claude_code.tool_result"
    return name


def _event(
    ids: tuple[str | None, str | None],
    explicit_name: Any,
    times: tuple[Any, Any],
    severity: Any,
    body: Any,
    attrs: dict[str, Any],
    resource: dict[str, Any],
) -> LogEvent:
    time = _nanos(times[0]) or _nanos(times[1]) or parse_time(attrs.get("event.timestamp"))
    return LogEvent(
        trace_id=ids[0],
        span_id=ids[1],
        name=_event_name(explicit_name, attrs, body),
        time=time,
        seq=_int(attrs.get("event.sequence")),
        severity=_int(severity) or 0,
        body=body,
        attrs=attrs,
        session=_session(attrs, resource),
        resource=resource,
    )


def _json_event(record: Any, resource: dict[str, Any]) -> LogEvent | str:
    if not isinstance(record, dict):
        return f"a log record must be an object, not {type(record).__name__}"
    ids = _ids(_get(record, "traceId", "trace_id"), _get(record, "spanId", "span_id"))
    if isinstance(ids, str):
        return ids
    return _event(
        ids,
        _get(record, "eventName", "event_name"),
        (
            _get(record, "timeUnixNano", "time_unix_nano"),
            _get(record, "observedTimeUnixNano", "observed_time_unix_nano"),
        ),  # fmt: skip
        _get(record, "severityNumber", "severity_number"),
        _any_value(record.get("body")),
        _attributes(record.get("attributes")),
        resource,
    )


def _pb_event(record: Any, resource: dict[str, Any]) -> LogEvent | str:
    ids = _ids(record.trace_id, record.span_id)
    if isinstance(ids, str):
        return ids
    return _event(
        ids,
        getattr(record, "event_name", ""),
        (record.time_unix_nano, record.observed_time_unix_nano),
        record.severity_number,
        _pb_value(record.body) if record.HasField("body") else None,
        {kv.key: _pb_value(kv.value) for kv in record.attributes},
        resource,
    )


# --- protobuf files

# LogRecord's field numbers and their wire types (0 varint, 1 fixed64, 2 bytes, 5 fixed32)
_RECORD_FIELDS = {1: 1, 2: 0, 3: 2, 5: 2, 6: 2, 7: 0, 8: 5, 9: 2, 10: 2, 11: 1, 12: 2}


def looks_like_protobuf(head: bytes) -> bool:
    """Return whether head is an ExportLogsServiceRequest: walk the wire format down to the
    first log record and check that its first field is one a LogRecord has, with its wire
    type (a span begins with a 16-byte trace id instead: spans.looks_like_protobuf)."""
    record = first_record(head)
    return record is not None and _record_start_ok(record)


def _record_start_ok(record: bytes) -> bool:
    if not record:
        return False
    number, wire = record[0] >> 3, record[0] & 7
    return _RECORD_FIELDS.get(number) == wire


def iter_pb_resources(stream: IO[bytes], *, source: str) -> Iterator[Any]:
    """Yield the ResourceLogs messages of a protobuf logs file, one top-level field at a time."""
    from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs

    return iter_pb_fields(stream, ResourceLogs, source=source)
