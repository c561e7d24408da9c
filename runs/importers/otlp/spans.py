"""OTLP trace export requests, from bytes to spans: the one decoder of the OTLP/HTTP receiver,
of the assembly of received spans, and of the OTLP file importer.

- `encoding_of`, `decompress`, `decode` (together `decode_body`): an HTTP body, protobuf or
  JSON, gzipped or not, to an ExportTraceServiceRequest (the protobuf message, or the
  OTLP/JSON dict), within the `BodyLimits` the caller passes in. A body that cannot be taken
  raises `OtlpError` with the HTTP status to answer.
- `read_request`: a body decoded and its valid spans counted by trace id, invalid ones counted
  as rejected (what the receiver stores and answers).
- `spans_from_request`, `spans_of_resource`: the valid spans of a request as `Span`s.
- `looks_like_protobuf`, `iter_pb_resources`: protobuf files, one ResourceSpans at a time.

Ids, the one rule for every path (`otlp_id`): a trace id is 16 bytes and a span id 8 bytes,
not all zero; in JSON they are hex (32 and 16 digits, any case, as OTLP/JSON writes them) or
base64 of those bytes (as protobuf's own JSON mapping writes them). A span without valid
trace and span ids is rejected; a parent id that is not a valid span id means no parent.

JSON field names may be camelCase or snake_case, int64 values text or numbers. Flat span
records (`trace_id`, `span_id`, `parent_span_id`, `attributes: {key: value}`, as some hooks
write them) are read as spans of their own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import TraceError
from ..reading import json_depth_ok
from .dialects import SESSION_KEYS, unwrap

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
GZIP_MAGIC = b"\x1f\x8b"
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
ERROR_CODES = {2, "2", "STATUS_CODE_ERROR", "ERROR", "error", "Error"}
_SESSION_SET = frozenset(SESSION_KEYS)
SESSION_PREFIX = "s"  # a run buffer key for a session: never 32 hex digits like a trace id

Rejected = Callable[[str], None]  # told why, once per span (or container) left out


class OtlpError(ValueError):
    """A request that cannot be taken, with the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class BodyTooLarge(OtlpError):
    """A body over its limit once decompressed (413): the receiver keeps it for the worker."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the body is over {max_bytes} bytes once decompressed", 413)


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """Bounds on a request body: its size once decompressed, and its JSON nesting."""

    max_bytes: int
    max_depth: int


@dataclass(slots=True)
class Span:
    """One span, decoded from JSON or protobuf, before it becomes a step."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: float | None
    end: float | None
    error: bool
    message: str
    attrs: dict[str, Any]
    session: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SpanIds:
    """The valid ids of a span, lower-case hex; parent_id None for a root."""

    trace_id: str
    span_id: str
    parent_id: str | None


@dataclass(slots=True)
class SpanGroup:
    """What one request holds of one trace: how many spans, and whether its root is there."""

    spans: int = 0
    has_root: bool = False


@dataclass(slots=True)
class ExportRequest:
    """One decoded export request: its valid spans by OTLP trace id, and what was rejected."""

    encoding: str  # "proto" or "json"
    request: Any  # ExportTraceServiceRequest or the OTLP/JSON dict
    groups: dict[str, SpanGroup] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # run buffer key by OTLP trace id
    accepted: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)  # the distinct reasons, in order

    def add(self, ids: SpanIds, key: str | None = None) -> None:
        """Count one valid span in its group (its run buffer key: `group_key`)."""
        key = key or ids.trace_id
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = SpanGroup()
        group.spans += 1
        group.has_root = group.has_root or ids.parent_id is None
        self.accepted += 1

    def reject(self, reason: str) -> None:
        """Count one span left out, keeping the reason once."""
        self.rejected += 1
        if reason not in self.errors:
            self.errors.append(reason)

    @property
    def error_message(self) -> str:
        return "; ".join(self.errors[:5])


# --- bytes to a request


def encoding_of(content_type: str) -> str:
    """Return "proto" or "json" for a request's Content-Type, or raise OtlpError(415)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return "proto"
    if media == JSON:
        return "json"
    raise OtlpError(
        f"unsupported content type {media or '(none)'!r}: send {PROTOBUF} or {JSON}", 415
    )


def decompress(body: bytes, content_encoding: str = "", *, max_bytes: int) -> bytes:
    """Return the body un-gzipped (when the header or the magic bytes say gzip).

    An unknown encoding is a 415, a body over max_bytes (once decompressed) a 413, a body that
    is not gzip or whose gzip stream ends early (a truncated upload) a 400. An empty body
    stays empty.
    """
    coding = content_encoding.strip().lower()
    if coding not in ("", "identity", "gzip"):
        raise OtlpError(f"unsupported content encoding {coding!r}: use gzip or none", 415)
    if not body or (coding != "gzip" and not body.startswith(GZIP_MAGIC)):
        if len(body) > max_bytes:
            raise BodyTooLarge(max_bytes)
        return body
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise OtlpError(f"cannot decompress the gzip body: {exc}") from None
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise BodyTooLarge(max_bytes)
    if not inflater.eof:
        raise OtlpError("cannot decompress the gzip body: it ends early (truncated?)")
    return data


def decode(body: bytes, encoding: str, *, max_depth: int) -> Any:
    """Return the export request from (decompressed) bytes, or raise OtlpError(400)."""
    return decode_export(
        body,
        encoding,
        max_depth=max_depth,
        from_protobuf=_pb_request,
        resources=_resources_field,
        expected='an ExportTraceServiceRequest: {"resourceSpans": [...]}',
    )


def decode_export(
    body: bytes,
    encoding: str,
    *,
    max_depth: int,
    from_protobuf: Callable[[bytes], Any],
    resources: Callable[[dict], Any],
    expected: str,
) -> Any:
    """Decode one OTLP export request, traces or logs: protobuf with from_protobuf, or JSON
    whose resources() field must be a list (or absent); errors are OtlpError(400)."""
    if encoding == "proto":
        from google.protobuf.message import DecodeError

        try:
            return from_protobuf(body)
        except (DecodeError, RuntimeError) as exc:  # RuntimeError: recursion in upb
            raise OtlpError(f"cannot decode the protobuf body: {exc}") from None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(f"cannot decode the JSON body: {exc}") from None
    if not json_depth_ok(data, max_depth):
        raise OtlpError(f"the JSON body nests deeper than {max_depth} levels")
    if not isinstance(data, dict) or not isinstance(resources(data), list | None):
        raise OtlpError(f"expected {expected}")
    return data


def decode_body(
    body: bytes,
    encoding: str,
    content_encoding: str = "",
    *,
    limits: BodyLimits,
    decoder: Callable[..., Any] = decode,
) -> Any:
    """Return the export request of a body as received (decompress, then decode): a traces
    request, or with `decoder=logs.decode` a logs request."""
    data = decompress(body, content_encoding, max_bytes=limits.max_bytes)
    return decoder(data, encoding, max_depth=limits.max_depth)


def read_request(
    body: bytes, content_type: str, content_encoding: str = "", *, limits: BodyLimits
) -> ExportRequest:
    """Decode a request body and count its valid spans by trace id (invalid ones rejected)."""
    encoding = encoding_of(content_type)
    request = decode_body(body, encoding, content_encoding, limits=limits)
    export = ExportRequest(encoding=encoding, request=request)
    taken: list[SpanIds] = []
    keys = export.keys = span_keys(request, rejected=export.reject, taken=taken)
    for ids in taken:
        export.add(ids, keys[ids.trace_id])
    return export


def span_keys(
    request: Any, *, rejected: Rejected | None = None, taken: list[SpanIds] | None = None
) -> dict[str, str]:
    """Return the run buffer key (`group_key`) of each trace id in a request: the session of
    its first span that names one (span attributes, then resource, as `Span.session`), else
    the trace id. Reads ids and session attributes only; valid spans' ids go to `taken`."""
    sessions: dict[str, str | None] = {}
    for resource_spans in resources_of(request):
        resource: dict[str, Any] | None = None
        for raw, ids in valid_spans(resource_spans, rejected or _ignore):
            if taken is not None:
                taken.append(ids)
            if sessions.get(ids.trace_id) is not None:
                continue
            if resource is None:
                resource = _session_attributes(_resource_attributes(resource_spans))
            attrs = _raw_session_attributes(raw)
            session = _session(attrs, resource)
            if session is None and isinstance(raw, dict):
                session = optional_text(raw.get("session_id"))
            sessions[ids.trace_id] = session
    return {trace_id: group_key(trace_id, session) for trace_id, session in sessions.items()}


def _session_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    return {key: attrs[key] for key in SESSION_KEYS if key in attrs}


def _raw_session_attributes(span: Any) -> dict[str, Any]:
    """Return the session attributes of a span as it came, without converting the others."""
    if isinstance(span, dict):
        raw = span.get("attributes")
        if isinstance(raw, dict):
            return {k: _any_value(v) for k, v in raw.items() if k in _SESSION_SET}
        return {
            item["key"]: _any_value(item.get("value"))
            for item in (raw if isinstance(raw, list) else ())
            if isinstance(item, dict) and item.get("key") in _SESSION_SET
        }
    return {kv.key: _pb_value(kv.value) for kv in span.attributes if kv.key in _SESSION_SET}


def _pb_request(body: bytes) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest.FromString(body)


# --- ids


def otlp_id(value: Any, size: int) -> str | None:
    """Return the lower-case hex of an id of `size` bytes, or None when value is not one.

    Bytes (protobuf) must be exactly `size` long; text must be 2 * size hex digits or the
    base64 of `size` bytes. An id of all zero bytes is no id.
    """
    if isinstance(value, bytes):  # protobuf, the common case: checked first
        raw: bytes | None = value
    elif isinstance(value, str):
        raw = _id_bytes(value, size) if value else None
    elif isinstance(value, bytearray):
        raw = bytes(value)
    else:
        return None
    if raw is None or len(raw) != size or raw.count(0) == size:
        return None
    return raw.hex()


def _id_bytes(text: str, size: int) -> bytes | None:
    if len(text) == 2 * size:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def span_ids(span: Any) -> SpanIds | str:
    """Return the ids of a span as it came (protobuf message or JSON object), or why it
    cannot be taken."""
    if isinstance(span, dict):
        trace = _get(span, "traceId", "trace_id")
        own = _get(span, "spanId", "span_id")
        parent = _get(span, "parentSpanId", "parent_span_id")
    elif hasattr(span, "span_id"):
        trace, own, parent = span.trace_id, span.span_id, span.parent_span_id
    else:
        return f"a span must be an object, not {type(span).__name__}"
    trace_id = otlp_id(trace, TRACE_ID_BYTES)
    if trace_id is None:
        return "invalid traceId (expected 16 bytes: 32 hex digits, not all zero)"
    span_id = otlp_id(own, SPAN_ID_BYTES)
    if span_id is None:
        return "invalid spanId (expected 8 bytes: 16 hex digits, not all zero)"
    return SpanIds(trace_id, span_id, otlp_id(parent, SPAN_ID_BYTES))


# --- walking a request


def _get(obj: dict, camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))


def _resources_field(request: dict) -> Any:
    return _get(request, "resourceSpans", "resource_spans")


def is_request(value: Any) -> bool:
    """Return whether a JSON value is an ExportTraceServiceRequest."""
    return isinstance(value, dict) and ("resourceSpans" in value or "resource_spans" in value)


def is_span_record(value: Any) -> bool:
    """Return whether a JSON value is one span of its own (a flat span record)."""
    return (
        isinstance(value, dict)
        and ("traceId" in value or "trace_id" in value)
        and ("spanId" in value or "span_id" in value)
        and "name" in value
    )


def resources_of(request: Any) -> Iterator[Any]:
    """Yield the ResourceSpans of a request (protobuf message or OTLP/JSON dict)."""
    if isinstance(request, dict):
        items = _resources_field(request)
        yield from items if isinstance(items, list) else ()
    else:
        yield from request.resource_spans


def raw_spans(resource_spans: Any, rejected: Rejected) -> Iterator[Any]:
    """Yield the spans of one ResourceSpans as they came; a container that is not an object
    is reported to rejected and passed over."""
    if not isinstance(resource_spans, dict):
        if not hasattr(resource_spans, "scope_spans"):
            rejected("a resourceSpans item must be an object")
            return
        for scope in resource_spans.scope_spans:
            yield from scope.spans
        return
    scopes = (
        _get(resource_spans, "scopeSpans", "scope_spans")
        or resource_spans.get("instrumentationLibrarySpans")
        or []
    )
    for scope in scopes if isinstance(scopes, list) else ():
        if not isinstance(scope, dict):
            rejected("a scopeSpans item must be an object")
            continue
        spans = scope.get("spans")
        yield from spans if isinstance(spans, list) else ()


def valid_spans(resource_spans: Any, rejected: Rejected) -> Iterator[tuple[Any, SpanIds]]:
    """Yield (span as it came, its ids) for each span with valid ids; the others are
    reported to rejected, one call each."""
    for span in raw_spans(resource_spans, rejected):
        ids = span_ids(span)
        if isinstance(ids, str):
            rejected(ids)
        else:
            yield span, ids


def _ignore(reason: str) -> None:
    """Rejected spans are left out without a word."""


def spans_from_request(
    request: Any, *, rejected: Rejected = _ignore, traces: Collection[str] | None = None
) -> Iterator[Span]:
    """Yield the valid spans of one request (protobuf message or bytes, OTLP/JSON dict, or a
    flat span record), only those of `traces` when given; invalid ones go to rejected."""
    if isinstance(request, bytes | bytearray):
        request = _pb_request(bytes(request))
    if is_span_record(request):
        ids = span_ids(request)
        if isinstance(ids, str):
            rejected(ids)
        elif traces is None or ids.trace_id in traces:
            yield _json_span(request, ids, {})
        return
    if not isinstance(request, dict) and not hasattr(request, "resource_spans"):
        rejected(f"a span must be an object, not {type(request).__name__}")
        return
    for resource_spans in resources_of(request):
        yield from spans_of_resource(resource_spans, rejected=rejected, traces=traces)


def spans_of_resource(
    resource_spans: Any, *, rejected: Rejected = _ignore, traces: Collection[str] | None = None
) -> Iterator[Span]:
    """Yield the valid spans of one ResourceSpans (protobuf or JSON) as `Span`s."""
    resource: dict[str, Any] | None = None
    for raw, ids in valid_spans(resource_spans, rejected):
        if traces is not None and ids.trace_id not in traces:
            continue
        if resource is None:
            resource = _resource_attributes(resource_spans)
        yield (
            _json_span(raw, ids, resource)
            if isinstance(raw, dict)
            else _pb_span(raw, ids, resource)
        )


# --- span contents


def _resource_attributes(resource_spans: Any) -> dict[str, Any]:
    if not isinstance(resource_spans, dict):
        return {kv.key: _pb_value(kv.value) for kv in resource_spans.resource.attributes}
    resource = resource_spans.get("resource")
    return _attributes(resource.get("attributes") if isinstance(resource, dict) else None)


def _any_value(value: Any) -> Any:
    """Return the Python value of an OTLP/JSON AnyValue (plain values pass through)."""
    if not isinstance(value, dict):
        return value
    for key, cast in (
        ("stringValue", str),
        ("string_value", str),
        ("boolValue", bool),
        ("bool_value", bool),
        ("intValue", int),
        ("int_value", int),
        ("doubleValue", float),
        ("double_value", float),
    ):
        if key in value:
            try:
                return cast(value[key])
            except (TypeError, ValueError):
                return value[key]
    array = value.get("arrayValue", value.get("array_value"))
    if isinstance(array, dict):
        return [_any_value(item) for item in array.get("values") or []]
    kvlist = value.get("kvlistValue", value.get("kvlist_value"))
    if isinstance(kvlist, dict):
        return _attributes(kvlist.get("values"))
    if "bytesValue" in value or "bytes_value" in value:
        return value.get("bytesValue", value.get("bytes_value"))
    return value or None


def _attributes(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # flat records: {key: value}
        return {str(k): _any_value(v) for k, v in raw.items()}
    attrs: dict[str, Any] = {}
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attrs[item["key"]] = _any_value(item.get("value"))
    return attrs


def _nanos(value: Any) -> float | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 is a float infinity
        return None
    return number / 1e9 if number else None


def optional_text(value: Any) -> str | None:
    """Return value as text, None for None or ""."""
    return None if value in (None, "") else str(value)


def _session(attrs: dict[str, Any], resource: dict[str, Any]) -> str | None:
    """Return the first session key of the dialect table on the record, then its resource."""
    for source in (attrs, resource):
        for key in SESSION_KEYS:
            value = unwrap(source.get(key))
            if value not in (None, ""):
                return str(value)
    return None


def group_key(trace_id: str | None, session: str | None) -> str:
    """Return the key the receiver buffers a span or log record under until its run is built:
    its session's (32 characters: "s" and a digest of the session id, so any session id fits
    and none reads as a trace id), else its trace id (a record with neither: "s" + the digest
    of nothing, one run of loose records)."""
    if session is None and trace_id is not None:
        return trace_id
    digest = hashlib.sha256((session or "").encode("utf-8", "surrogatepass")).hexdigest()
    return SESSION_PREFIX + digest[:31]


def _json_span(obj: dict, ids: SpanIds, resource: dict[str, Any]) -> Span:
    status = obj.get("status")
    code = status.get("code") if isinstance(status, dict) else status
    message = status.get("message", "") if isinstance(status, dict) else ""
    attrs = _attributes(obj.get("attributes"))
    events = obj.get("events")
    return Span(
        trace_id=ids.trace_id,
        span_id=ids.span_id,
        parent_id=ids.parent_id,
        name=str(obj.get("name", "")),
        start=_nanos(_get(obj, "startTimeUnixNano", "start_time_unix_nano")),
        end=_nanos(_get(obj, "endTimeUnixNano", "end_time_unix_nano")),
        error=code in ERROR_CODES,
        message=str(message or ""),
        attrs=attrs,
        session=_session(attrs, resource) or optional_text(obj.get("session_id")),
        events=[
            (str(e.get("name", "")), _attributes(e.get("attributes")))
            for e in (events if isinstance(events, list) else ())
            if isinstance(e, dict)
        ],
    )


def _pb_value(value: Any) -> Any:
    text = value.string_value  # a non-empty string is the set field: no WhichOneof needed
    if text:
        return text
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_pb_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _pb_span(pb: Any, ids: SpanIds, resource: dict[str, Any]) -> Span:
    attrs = {kv.key: _pb_value(kv.value) for kv in pb.attributes}
    return Span(
        trace_id=ids.trace_id,
        span_id=ids.span_id,
        parent_id=ids.parent_id,
        name=pb.name,
        start=pb.start_time_unix_nano / 1e9 or None,
        end=pb.end_time_unix_nano / 1e9 or None,
        error=pb.status.code == 2,
        message=pb.status.message,
        attrs=attrs,
        session=_session(attrs, resource),
        events=[(e.name, {kv.key: _pb_value(kv.value) for kv in e.attributes}) for e in pb.events],
    )


# --- protobuf files


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise IndexError("varint runs past the data")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, allowed: set[int]) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (field number, body, complete) of length-delimited fields; stop at the data's end."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        if tag & 7 != 2 or tag >> 3 not in allowed:
            raise ValueError("not an OTLP field")
        length, pos = _varint(buf, pos)
        yield tag >> 3, buf[pos : pos + length], pos + length <= len(buf)
        pos += length


def looks_like_protobuf(head: bytes) -> bool:
    """Return whether head is an ExportTraceServiceRequest: walk the wire format down to a span
    whose first field is a 16-byte trace id. Text never passes: after 0x0a (a newline) the next
    bytes would have to be valid nested length-delimited fields, ending in a real span.
    """
    span = first_record(head)
    if span is None:
        return False
    try:
        tag, pos = _varint(span, 0)
        length, _ = _varint(span, pos)
    except (ValueError, IndexError):
        return False
    return tag == 0x0A and length == 16


def first_record(head: bytes) -> bytes | None:
    """The bytes of the first span (or log record) of an OTLP protobuf export request: field
    2 of the first scope entry (field 2) of the first resource entry (field 1); None when the
    head is not shaped so."""
    try:
        for _, resource, _ in _fields(head, {1}):
            for number, scope, _ in _fields(resource, {1, 2, 3}):
                if number != 2:
                    continue
                for kind, record, _ in _fields(scope, {1, 2, 3}):
                    if kind == 2:
                        return record
    except (ValueError, IndexError):
        return None
    return None


def iter_pb_resources(stream: IO[bytes], *, source: str) -> Iterator[Any]:
    """Yield the ResourceSpans messages of a protobuf file (one request, or several
    concatenated), reading one top-level field at a time so only one is in memory."""
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

    return iter_pb_fields(stream, ResourceSpans, source=source)


def iter_pb_fields(stream: IO[bytes], message: Any, *, source: str) -> Iterator[Any]:
    """Yield field 1 of a protobuf export request file (its resources: ResourceSpans or
    ResourceLogs) as `message`, one top-level field at a time; other fields are skipped."""
    from google.protobuf.message import DecodeError

    offset = 0
    while True:
        start = offset
        tag, offset = _read_varint(stream, offset, source=source, allow_eof=True)
        if tag is None:
            return
        if tag & 7 != 2:
            raise TraceError(
                f"invalid protobuf: unexpected wire type at byte {start}", source=source
            )
        body, offset = _read_field(stream, offset, start, source=source)
        if tag >> 3 != 1:
            continue  # an unknown field: protobuf readers skip those
        try:
            yield message.FromString(body)
        except DecodeError as exc:
            raise TraceError(
                f"invalid protobuf in the {message.__name__} at byte {start}: {exc}",
                source=source,
            ) from None


def _read_field(stream: IO[bytes], offset: int, start: int, *, source: str) -> tuple[bytes, int]:
    """Read a length-delimited field's body (its tag read already); return it and the offset."""
    length, offset = _read_varint(stream, offset, source=source)
    body = stream.read(length)
    if len(body) < length:
        raise TraceError(
            f"truncated protobuf: field at byte {start} needs {length} bytes, {len(body)} left",
            source=source,
        )
    return body, offset + length


def _read_varint(
    stream: IO[bytes], offset: int, *, source: str, allow_eof: bool = False
) -> tuple[Any, int]:
    value = shift = 0
    while True:
        byte = stream.read(1)
        if not byte:
            if allow_eof and shift == 0:
                return None, offset
            raise TraceError(f"truncated protobuf at byte {offset}", source=source)
        offset += 1
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise TraceError(f"invalid protobuf varint at byte {offset}", source=source)
