"""Services for OTLP/HTTP: decode an export request, buffer its spans, assemble runs.

Every request's bytes are kept whole as a `Trace` (source "otlp", declared format
"otlp-proto" or "otlp-json"); an `OtlpSpanGroup` row per (request, OTLP trace id) says which
trace ids it holds and whether the root span is among them. A worker task assembles the spans
of a trace id, from every request that brought some, into one run: a short grace period after
its root span arrived (so spans of the same trace still in flight on another connection
join), or after a quiet period without new spans when the root never comes. Spans that arrive
after the run was assembled rebuild it in place (same run id) and analyze it again.

The conversion of spans into steps is the OTLP importer's (`runs.importers.otlp
.runs_from_request`); until it is available a small built-in mapping of the GenAI and
OpenInference attributes is used (`_fallback_runs`).
"""

from __future__ import annotations

import json
import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import detection

from . import ingest
from .models import OtlpSpanGroup, Project, Run, Step, Trace, Verdict

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
GZIP_MAGIC = b"\x1f\x8b"


class OtlpError(ValueError):
    """A request that cannot be taken, with the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(slots=True)
class Batch:
    """One decoded export request: what it holds, by OTLP trace id."""

    encoding: str  # "proto" or "json"
    request: Any  # ExportTraceServiceRequest or the OTLP/JSON dict
    groups: dict[str, list[int]] = field(default_factory=dict)  # trace id -> [spans, has_root]
    accepted: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def error_message(self) -> str:
        return "; ".join(self.errors[:5])


# -- decoding ---------------------------------------------------------------------------------
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


def decompress(body: bytes, content_encoding: str = "") -> bytes:
    """Return the body un-gzipped (by header or magic), bounded by MAX_UPLOAD_BYTES * 10."""
    coding = content_encoding.strip().lower()
    if coding not in ("", "identity", "gzip"):
        raise OtlpError(f"unsupported content encoding {coding!r}: use gzip or none", 415)
    if coding != "gzip" and not body.startswith(GZIP_MAGIC):
        return body
    limit = settings.MAX_UPLOAD_BYTES * 10
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(f"cannot decompress the gzip body: {exc}") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise OtlpError(f"the body is over {limit} bytes once decompressed", 413)
    return data


def decode(body: bytes, encoding: str) -> Any:
    """Return the export request from (decompressed) bytes, or raise OtlpError(400)."""
    if encoding == "proto":
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except (DecodeError, RuntimeError) as exc:  # RuntimeError: recursion in upb
            raise OtlpError(f"cannot decode the protobuf body: {exc}") from None
        return request
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(f"cannot decode the JSON body: {exc}") from None
    from .auth import json_depth

    if not json_depth(data, settings.LOOPBOARD_MAX_JSON_DEPTH):
        raise OtlpError(
            f"the JSON body nests deeper than {settings.LOOPBOARD_MAX_JSON_DEPTH} levels"
        )
    if not isinstance(data, dict) or not isinstance(data.get("resourceSpans", []), list):
        raise OtlpError('expected an ExportTraceServiceRequest: {"resourceSpans": [...]}')
    return data


def _json_id(value: Any, size: int) -> str | None:
    """Return a lower-case hex id of `size` bytes from OTLP/JSON, or None if invalid."""
    if not isinstance(value, str) or len(value) != size * 2:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return None if raw == bytes(size) else value.lower()


def iter_spans(request: Any, encoding: str) -> Iterator[tuple[Any, Any, Any]]:
    """Yield (resource_spans, scope_spans, span) for either encoding."""
    if encoding == "proto":
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    yield rs, ss, span
        return
    for rs in request.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            continue
        for ss in rs.get("scopeSpans") or []:
            if not isinstance(ss, dict):
                continue
            for span in ss.get("spans") or []:
                yield rs, ss, span


def span_ids(span: Any, encoding: str) -> tuple[str, bool] | str:
    """Return (trace id hex, is_root) for a valid span, or the reason it is invalid."""
    if encoding == "proto":
        trace_id, span_id = span.trace_id, span.span_id
        if len(trace_id) != 16 or trace_id == bytes(16):
            return "invalid traceId"
        if len(span_id) != 8 or span_id == bytes(8):
            return "invalid spanId"
        return trace_id.hex(), not span.parent_span_id
    if not isinstance(span, dict):
        return "a span is not an object"
    trace_id = _json_id(span.get("traceId"), 16)
    if trace_id is None:
        return "invalid traceId (expected 32 hex digits)"
    if _json_id(span.get("spanId"), 8) is None:
        return "invalid spanId (expected 16 hex digits)"
    return trace_id, not span.get("parentSpanId")


def read_batch(body: bytes, content_type: str, content_encoding: str = "") -> Batch:
    """Decode a request body and index its spans by trace id (invalid spans are rejected)."""
    encoding = encoding_of(content_type)
    request = decode(decompress(body, content_encoding), encoding)
    batch = Batch(encoding=encoding, request=request)
    for _rs, _ss, span in iter_spans(request, encoding):
        ids = span_ids(span, encoding)
        if isinstance(ids, str):
            batch.rejected += 1
            if ids not in batch.errors:
                batch.errors.append(ids)
            continue
        trace_id, is_root = ids
        group = batch.groups.setdefault(trace_id, [0, False])
        group[0] += 1
        group[1] = group[1] or is_root
        batch.accepted += 1
    return batch


# -- receiving --------------------------------------------------------------------------------
def store_batch(project: Project, body: bytes, batch: Batch, *, name: str = "") -> Trace | None:
    """Keep the request bytes as a Trace and buffer its spans; queue their assembly.

    Returns the trace (None when the request holds no valid span). A request sent twice (an
    exporter retrying) is stored once.
    """
    from . import tasks

    if not batch.groups:
        return None
    import hashlib

    digest = hashlib.sha256(body).hexdigest()
    now = timezone.now()
    with transaction.atomic():
        trace, created = Trace.objects.get_or_create(
            project=project,
            sha256=digest,
            defaults={
                "name": name or f"otlp {now:%Y-%m-%d %H:%M:%S.%f}",
                "size": len(body),
                "raw": body,
                "declared_format": f"otlp-{batch.encoding}",
                "format": f"otlp-{batch.encoding}",
                # Not "received"/"parsing": requeue_stale must not hand it to the importers.
                "status": Trace.Status.ANALYZING,
                "source": Trace.Source.OTLP,
            },
        )
        if not created:
            return trace
        OtlpSpanGroup.objects.bulk_create(
            OtlpSpanGroup(
                project=project,
                batch=trace,
                trace_id=trace_id,
                span_count=count,
                has_root=has_root,
                received_at=now,
            )
            for trace_id, (count, has_root) in batch.groups.items()
        )
        ready = sorted(t for t, (_, root) in batch.groups.items() if root)
        waiting = sorted(t for t, (_, root) in batch.groups.items() if not root)
        grace = settings.LOOPBOARD_OTLP_ROOT_GRACE
        quiet = settings.LOOPBOARD_OTLP_QUIET_SECONDS

        def queue() -> None:
            if ready:
                tasks.assemble_otlp.apply_async((project.pk, ready), countdown=grace)
            if waiting:
                tasks.assemble_otlp.apply_async((project.pk, waiting, True), countdown=quiet)

        transaction.on_commit(queue)
    return trace


# -- assembling -------------------------------------------------------------------------------
def assemble(project_id: int, trace_ids: list[str], quiet: bool = False) -> list[int]:
    """Assemble the buffered spans of these OTLP trace ids into runs, then analyze them.

    With quiet=True (the quiet-period timer) a trace id that received spans within the quiet
    period is put off again instead. Returns the ids of the runs written.
    """
    from . import analysis, tasks

    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return []
    pending = OtlpSpanGroup.objects.filter(
        project_id=project_id, trace_id__in=trace_ids, assembled=False
    )
    if quiet:
        window = timedelta(seconds=settings.LOOPBOARD_OTLP_QUIET_SECONDS)
        latest = defaultdict(lambda: datetime.min.replace(tzinfo=UTC))
        has_root = set()
        for trace_id, received_at, root in pending.values_list(
            "trace_id", "received_at", "has_root"
        ):
            latest[trace_id] = max(latest[trace_id], received_at)
            if root:
                has_root.add(trace_id)
        now = timezone.now()
        later = sorted(t for t, at in latest.items() if now - at < window and t not in has_root)
        if later:
            wait = max(1.0, (window - (now - min(latest[t] for t in later))).total_seconds())
            tasks.assemble_otlp.apply_async((project_id, later, True), countdown=wait)
        trace_ids = [t for t in latest if t not in later]
    else:
        trace_ids = sorted(set(pending.values_list("trace_id", flat=True)))
    if not trace_ids:
        return []
    policy = project.policy()
    decoded: dict[int, tuple[str, Any]] = {}
    run_ids: list[int] = []
    for trace_id in trace_ids:
        run_id = _assemble_one(project, trace_id, decoded, policy)
        if run_id is not None:
            run_ids.append(run_id)
    for run_id in run_ids:
        analysis.analyze_run(run_id, policy)
    _finish_batches(project_id, trace_ids)
    return run_ids


def _lock_key(project_id: int, trace_id: str) -> int:
    """Return a signed 64-bit advisory lock key for one (project, OTLP trace id)."""
    value = zlib.crc32(trace_id.encode()) | (project_id & 0x7FFFFFFF) << 32
    return value - (1 << 63) if value >= 1 << 63 else value


def _assemble_one(
    project: Project,
    trace_id: str,
    decoded: dict[int, tuple[str, Any]],
    policy: detection.Policy,
) -> int | None:
    """Build (or rebuild) the run of one OTLP trace id from all its buffered spans."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(project.pk, trace_id)])
        groups = list(
            OtlpSpanGroup.objects.filter(project=project, trace_id=trace_id).order_by("id")
        )
        if not groups or all(g.assembled for g in groups):
            return None  # another task did it
        existing = next((g.run_id for g in groups if g.run_id), None)
        batch_ids = [g.batch_id for g in groups]
        missing = [b for b in batch_ids if b not in decoded]
        if missing:
            for pk, raw, fmt in Trace.objects.filter(pk__in=missing).values_list(
                "pk", "raw", "declared_format"
            ):
                encoding = "json" if fmt == "otlp-json" else "proto"
                decoded[pk] = (encoding, decode(decompress(bytes(raw)), encoding))
        request = _request_for(trace_id, [decoded[b] for b in batch_ids if b in decoded])
        parsed = next(iter(runs_from_request(request, source=f"otlp:{trace_id}")), None)
        if parsed is None:
            return None
        parsed.id = trace_id
        root_batch = next((g.batch_id for g in groups if g.has_root), groups[0].batch_id)
        run = _write_run(project, parsed, existing, root_batch, policy)
        OtlpSpanGroup.objects.filter(pk__in=[g.pk for g in groups]).update(assembled=True, run=run)
        return run.pk


def _write_run(
    project: Project,
    parsed: detection.Run,
    run_id: int | None,
    batch_id: int,
    policy: detection.Policy,
) -> Run:
    """Insert the run, or replace the steps of the existing one (same id, analyzed again)."""
    batch = Trace(pk=batch_id)
    if run_id is None or not Run.objects.filter(pk=run_id).exists():
        return ingest.store_run(project, parsed, trace=batch, policy=policy)
    fresh = ingest.store_run(project, parsed, trace=batch, policy=policy)
    # Keep the old id: move the fresh run's steps over, copy its columns, drop the fresh row.
    Step.objects.filter(run_id=run_id).delete()
    Step.objects.filter(run_id=fresh.pk).update(run_id=run_id)
    Run.objects.filter(pk=run_id).update(
        trace_id=batch_id,
        name=fresh.name,
        format=fresh.format,
        metadata=fresh.metadata,
        step_count=fresh.step_count,
        tool_call_count=fresh.tool_call_count,
        tools=fresh.tools,
        started_at=fresh.started_at,
        ended_at=fresh.ended_at,
        verdict=Verdict.PENDING,
    )
    fresh.delete()
    return Run.objects.get(pk=run_id)


def _finish_batches(project_id: int, trace_ids: Iterable[str]) -> None:
    """Mark analyzed the request traces whose spans are all in analyzed runs."""
    batch_ids = set(
        OtlpSpanGroup.objects.filter(project_id=project_id, trace_id__in=trace_ids).values_list(
            "batch_id", flat=True
        )
    )
    open_ = set(
        OtlpSpanGroup.objects.filter(batch_id__in=batch_ids, assembled=False).values_list(
            "batch_id", flat=True
        )
    ) | set(
        OtlpSpanGroup.objects.filter(
            batch_id__in=batch_ids, run__verdict=Verdict.PENDING
        ).values_list("batch_id", flat=True)
    )
    Trace.objects.filter(pk__in=batch_ids - open_, status=Trace.Status.ANALYZING).update(
        status=Trace.Status.ANALYZED, updated_at=timezone.now()
    )


def _request_for(trace_id: str, parts: list[tuple[str, Any]]) -> Any:
    """Return one export request holding only the spans of `trace_id`, from decoded batches."""
    if all(encoding == "proto" for encoding, _ in parts):
        out = ExportTraceServiceRequest()
        wanted = bytes.fromhex(trace_id)
        for _, request in parts:
            for rs in request.resource_spans:
                new_rs = None
                for ss in rs.scope_spans:
                    spans = [s for s in ss.spans if s.trace_id == wanted]
                    if not spans:
                        continue
                    if new_rs is None:
                        new_rs = out.resource_spans.add()
                        new_rs.resource.CopyFrom(rs.resource)
                        new_rs.schema_url = rs.schema_url
                    new_ss = new_rs.scope_spans.add()
                    new_ss.scope.CopyFrom(ss.scope)
                    new_ss.schema_url = ss.schema_url
                    new_ss.spans.extend(spans)
        return out
    out_json: dict[str, Any] = {"resourceSpans": []}
    for encoding, request in parts:
        data = _proto_to_json(request) if encoding == "proto" else request
        for rs in data.get("resourceSpans") or []:
            scopes = []
            for ss in (rs.get("scopeSpans") or []) if isinstance(rs, dict) else []:
                if not isinstance(ss, dict):
                    continue
                spans = [
                    s
                    for s in ss.get("spans") or []
                    if isinstance(s, dict) and _json_id(s.get("traceId"), 16) == trace_id
                ]
                if spans:
                    scopes.append({**ss, "spans": spans})
            if scopes:
                out_json["resourceSpans"].append({**rs, "scopeSpans": scopes})
    return out_json


def _proto_to_json(request: ExportTraceServiceRequest) -> dict:
    """Return the OTLP/JSON form of a protobuf request (ids as hex, as OTLP/JSON has them)."""
    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(request)
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        import base64

                        span[key] = base64.b64decode(span[key]).hex()
    return data


# -- spans -> runs ----------------------------------------------------------------------------
def runs_from_request(request: Any, *, source: str) -> Iterator[detection.Run]:
    """Return the runs of one export request: the OTLP importer's, or the built-in mapping."""
    try:
        from runs.importers.otlp import runs_from_request as importer
    except ImportError:
        return _fallback_runs(request, source=source)
    return iter(importer(request, source=source))


def _any_value(value: Any) -> Any:
    """Return the Python value of an OTLP AnyValue (protobuf or JSON)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "arrayValue":
                return [_any_value(v) for v in (inner or {}).get("values", [])]
            if key == "kvlistValue":
                return {
                    kv["key"]: _any_value(kv.get("value", {})) for kv in inner.get("values", [])
                }
            if key == "intValue":
                return int(inner)
            return inner
        return None
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def _attrs(span: Any) -> dict[str, Any]:
    if isinstance(span, dict):
        return {
            a["key"]: _any_value(a.get("value", {}))
            for a in span.get("attributes") or []
            if isinstance(a, dict) and "key" in a
        }
    return {a.key: _any_value(a.value) for a in span.attributes}


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _fallback_runs(request: Any, *, source: str) -> Iterator[detection.Run]:
    """Map GenAI / OpenInference spans to steps: tool spans are calls, LLM spans messages."""
    encoding = "proto" if isinstance(request, ExportTraceServiceRequest) else "json"
    rows = []
    for _rs, _ss, span in iter_spans(request, encoding):
        if encoding == "proto":
            ids = (span.span_id.hex(), span.parent_span_id.hex() or None)
            times = (span.start_time_unix_nano, span.end_time_unix_nano)
            name, error = span.name, span.status.code == 2
            trace_id = span.trace_id.hex()
        else:
            ids = (span.get("spanId"), span.get("parentSpanId") or None)
            times = (int(span.get("startTimeUnixNano") or 0), int(span.get("endTimeUnixNano") or 0))
            name = span.get("name", "")
            status = span.get("status") or {}
            error = status.get("code") in (2, "STATUS_CODE_ERROR")
            trace_id = span.get("traceId", "")
        rows.append((times[0], ids, times, name, error, trace_id, _attrs(span)))
    rows.sort(key=lambda row: row[0])
    steps: list[detection.Step] = []
    metadata: dict[str, Any] = {}
    run_name = ""
    for _, (span_id, parent), (start, end), name, error, _trace, attrs in rows:
        op = str(attrs.get("gen_ai.operation.name") or "").lower()
        kind = str(attrs.get("openinference.span.kind") or "").upper()
        common = {
            "id": span_id,
            "parent_id": parent,
            "started_at": start / 1e9 if start else None,
            "ended_at": end / 1e9 if end else None,
        }
        if op == "execute_tool" or kind == "TOOL":
            tool = attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or name
            args = attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value"))
            result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
            steps.append(
                detection.Step(
                    seq=len(steps),
                    kind="tool_call",
                    tool=str(tool),
                    args=_maybe_json(args),
                    result=_maybe_json(result),
                    status="error" if error else "ok",
                    **common,
                )
            )
        elif op in ("chat", "text_completion", "generate_content") or kind == "LLM":
            steps.append(
                detection.Step(
                    seq=len(steps),
                    kind="assistant",
                    text=None,
                    tokens_in=attrs.get("gen_ai.usage.input_tokens"),
                    tokens_out=attrs.get("gen_ai.usage.output_tokens"),
                    **common,
                )
            )
        elif op == "invoke_agent" or kind == "AGENT" or parent is None:
            run_name = run_name or str(
                attrs.get("gen_ai.conversation.id") or attrs.get("session.id") or name
            )
            for key in ("gen_ai.agent.name", "gen_ai.request.model", "service.name"):
                if key in attrs:
                    metadata[key] = attrs[key]
            task = attrs.get("input.value")
            if isinstance(task, str) and parent is None:
                steps.append(detection.Step(seq=len(steps), kind="user", text=task, **common))
    trace_id = rows[0][5] if rows else source
    if steps:
        yield detection.Run(
            id=trace_id, format="otlp", steps=steps, name=run_name, metadata=metadata
        )
