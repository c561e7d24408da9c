"""`POST /v1/traces` and `POST /v1/logs`: the OTLP/HTTP trace and logs receivers, answering as
the OTLP specification says, with the same key, limits and answers. `POST /v1/metrics` takes
metrics the same way (exporters such as OpenLLMetry send them beside their spans) and drops
them once they decode: loopboard keeps no metrics.

Success is `200` with an `ExportTraceServiceResponse` (`ExportLogsServiceResponse`) in the
request's encoding (with `partial_success.rejected_spans` (`rejected_log_records`) and
`error_message` when some spans (log records) were invalid). Failures
carry a `google.rpc.Status` in the request's encoding: 400 undecodable, 401 no/unknown key,
403 revoked key, 405 not POST, 413 too large, 415 unsupported content type, 429 rate limited
(with Retry-After).

The body is decoded by `runs.importers.otlp.spans` / `.logs` (the decoders the OTLP file
importer uses, so both take and reject the same spans and records) and buffered by
`runs.services.otlp.store_request`; log records join the runs of their spans (by trace id) or
of their session.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from google.protobuf.internal.encoder import _VarintBytes
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..importers.otlp import logs, spans
from ..services import access
from ..services.otlp import store_large_request, store_request
from . import auth, ratelimit

# google.rpc.Code for each HTTP status we answer with
RPC_CODES = {400: 3, 401: 16, 403: 7, 405: 12, 411: 3, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


def _encoding_for_reply(request: HttpRequest) -> str:
    media = request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    return "json" if media == spans.JSON else "proto"


def _reply(message, encoding: str, status: int = 200) -> HttpResponse:  # type: ignore[no-untyped-def]
    if encoding == "json":
        return HttpResponse(
            MessageToJson(message, indent=None), status=status, content_type=spans.JSON
        )
    return HttpResponse(message.SerializeToString(), status=status, content_type=spans.PROTOBUF)


def rpc_status(code: int, message: str) -> bytes:
    """Return a google.rpc.Status {code, message} in protobuf (encoded by hand: the
    googleapis-common-protos package is not needed for two fields)."""
    text = message.encode()
    return b"\x08" + _VarintBytes(code) + b"\x12" + _VarintBytes(len(text)) + text


def _error(message: str, status: int, encoding: str, **headers: str) -> HttpResponse:
    code = RPC_CODES.get(status, 2)
    if encoding == "json":
        response = HttpResponse(
            json.dumps({"code": code, "message": message}),
            status=status,
            content_type=spans.JSON,
        )
    else:
        response = HttpResponse(
            rpc_status(code, message), status=status, content_type=spans.PROTOBUF
        )
    for name, value in headers.items():
        response[name] = value
    return response


def error_response(request: HttpRequest, message: str, status: int, **headers: str) -> HttpResponse:
    """Return a google.rpc.Status answer in the encoding of the request's body."""
    return _error(message, status, _encoding_for_reply(request), **headers)


def _body_limits() -> spans.BodyLimits:
    """Return the limits of a body once decompressed, from the OTLP and JSON settings."""
    return spans.BodyLimits(settings.LOOPBOARD_OTLP_INLINE_BYTES, settings.LOOPBOARD_MAX_JSON_DEPTH)


def _read(request: HttpRequest, signal: str = "traces") -> tuple[bytes, spans.ExportRequest | None]:
    """Return the body and its decoded export request, or raise OtlpError: the content type is
    checked before the body is read, the body's size before it is decoded.

    A body that inflates past LOOPBOARD_OTLP_INLINE_BYTES is not decoded here (the request
    None): decompression stops at that size, and the worker reads the body as a stream.
    """
    content_type = request.META.get("CONTENT_TYPE", "")
    spans.encoding_of(content_type)
    body = _body(request)
    content_encoding = request.META.get("HTTP_CONTENT_ENCODING", "")
    reader = logs.read_request if signal == "logs" else spans.read_request
    try:
        export = reader(body, content_type, content_encoding, limits=_body_limits())
    except spans.BodyTooLarge:
        return body, None
    return body, export


def _body(request: HttpRequest) -> bytes:
    """Return the request's body, or raise OtlpError(413) when it is over MAX_UPLOAD_BYTES."""
    body = request.read(settings.MAX_UPLOAD_BYTES + 1)
    if len(body) > settings.MAX_UPLOAD_BYTES:
        raise spans.OtlpError(
            f"request body is over the limit of {settings.MAX_UPLOAD_BYTES} bytes", 413
        )
    return body


@csrf_exempt
def receive_traces(request: HttpRequest) -> HttpResponse:
    """Take one OTLP/HTTP trace export request for the project of the Bearer key."""
    return _receive(request, "traces")


@csrf_exempt
def receive_logs(request: HttpRequest) -> HttpResponse:
    """Take one OTLP/HTTP logs export request for the project of the Bearer key."""
    return _receive(request, "logs")


@csrf_exempt
def receive_metrics(request: HttpRequest) -> HttpResponse:
    """Take one OTLP/HTTP metrics export request and drop it: a body that decodes gets an
    empty `ExportMetricsServiceResponse`, with the key, limits and errors of the others."""
    encoding = _encoding_for_reply(request)
    key = _authorize(request, "sending metrics", encoding)
    if isinstance(key, HttpResponse):
        return key
    try:
        spans.encoding_of(request.META.get("CONTENT_TYPE", ""))
        body = _body(request)
        data = spans.decompress(
            body, request.META.get("HTTP_CONTENT_ENCODING", ""), max_bytes=_body_limits().max_bytes
        )
        spans.decode_export(
            data,
            encoding,
            max_depth=settings.LOOPBOARD_MAX_JSON_DEPTH,
            from_protobuf=ExportMetricsServiceRequest.FromString,
            resources=lambda request: request.get("resourceMetrics"),
            expected='an ExportMetricsServiceRequest: {"resourceMetrics": [...]}',
        )
    except spans.BodyTooLarge:
        pass  # too big to decode here; it would be dropped all the same
    except spans.OtlpError as exc:
        return _error(exc.message, exc.status, encoding)
    return _reply(ExportMetricsServiceResponse(), encoding)


def _authorize(request: HttpRequest, doing: str, encoding: str) -> auth.KeyAuth | HttpResponse:
    """Return the request's ingest key, or the answer to a request that may not send (not
    POST, no or bad key, scope, rate limit)."""
    if request.method != "POST":
        return _error("use POST", 405, encoding, Allow="POST")
    try:
        key = auth.authenticate_request(request)
        key.require(access.SEND, doing)
    except auth.AuthError as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        return _error(exc.message, exc.status, encoding, **headers)
    except ratelimit.RateLimited as exc:
        return _error(str(exc), 429, encoding, **{"Retry-After": str(exc.retry_after)})
    return key


def _receive(request: HttpRequest, signal: str) -> HttpResponse:
    encoding = _encoding_for_reply(request)
    doing = "sending traces" if signal == "traces" else "sending logs"
    key = _authorize(request, doing, encoding)
    if isinstance(key, HttpResponse):
        return key
    try:
        body, export = _read(request, signal)
    except spans.OtlpError as exc:
        return _error(exc.message, exc.status, encoding)
    reply = ExportLogsServiceResponse() if signal == "logs" else ExportTraceServiceResponse()
    if export is None:  # kept whole; the worker imports it (rejected ones are not known yet)
        store_large_request(key.project, body)
        return _reply(reply, encoding)
    store_request(key.project, body, export, signal=signal)
    if export.rejected:
        if signal == "logs":
            reply.partial_success.rejected_log_records = export.rejected
            what = "log record(s)"
        else:
            reply.partial_success.rejected_spans = export.rejected
            what = "span(s)"
        reply.partial_success.error_message = (
            f"{export.rejected} {what} rejected: {export.error_message}"
        )
    return _reply(reply, encoding)
