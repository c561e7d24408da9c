"""Services for OTLP/HTTP: decode an export request, buffer its spans, assemble runs.

Every request's bytes are kept whole as a `Trace` (source "otlp", declared format
"otlp-proto" or "otlp-json"); an `OtlpSpanGroup` row per (request, OTLP trace id) says which
trace ids it holds and whether the root span is among them. A worker task assembles the spans
of a trace id, from every request that brought some, into one run: a short grace period after
its root span arrived (so spans of the same trace still in flight on another connection
join), or after a quiet period without new spans when the root never comes. Spans that arrive
after the run was assembled rebuild it in place (same run id) and analyze it again.

The conversion of spans into steps is the OTLP importer's (`runs.importers.otlp`): each
stored request is decoded once per task into the importer's spans, and the spans of one trace
id, from every request that brought some, go through one importer `Collector`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import detection

from ..importers.base import Limits, TraceError, json_depth_ok
from ..importers.otlp import Collector, Span, spans_from_request
from ..models import OtlpSpanGroup, Project, Run, Trace, Verdict
from . import ingest, queue
from . import policy as policy_service

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
    if not json_depth_ok(data, settings.LOOPBOARD_MAX_JSON_DEPTH):
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
    if not batch.groups:
        return None
    digest = hashlib.sha256(body).hexdigest()
    now = timezone.now()
    with transaction.atomic():
        trace = Trace(
            project=project,
            sha256=digest,
            name=name or f"otlp {now:%Y-%m-%d %H:%M:%S.%f}",
            size=len(body),
            raw=body,
            declared_format=f"otlp-{batch.encoding}",
            format=f"otlp-{batch.encoding}",
            # Not "received"/"parsing": requeue_stale must not hand it to the importers.
            status=Trace.Status.ANALYZING,
            source=Trace.Source.OTLP,
            created_at=now,
            updated_at=now,
        )
        if not _insert_raw(trace):
            return Trace.objects.get(project=project, sha256=digest)
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
        queue.queue_assembly(project.pk, ready, countdown=grace)
        queue.queue_assembly(project.pk, waiting, quiet=True, countdown=quiet)
    return trace


TRACE_INSERT = f"""
    INSERT INTO {Trace._meta.db_table} (project_id, name, sha256, size, raw, declared_format,
        format, status, error, skipped_lines, warnings, source, uploaded_by_id, created_at,
        updated_at)
    VALUES (%s, %s, %s, %s, %b, %s, %s, %s, '', 0, '[]', %s, NULL, %s, %s)
    ON CONFLICT (project_id, sha256) DO NOTHING
    RETURNING id
"""
_lz4: bool | None = None


def _insert_raw(trace: Trace) -> bool:
    """Insert a request trace, its bytes as a binary parameter (no escaping to text) and
    compressed with lz4 where the server has it (pglz takes ~4 times as long for the same
    bytes); set trace.pk and return True, or return False if these bytes are already stored.
    """
    global _lz4
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # server-side binding
        if _lz4 is None:
            row = cursor.execute(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            ).fetchone()
            _lz4 = bool(row and row[0])
        if _lz4:
            cursor.execute("SET LOCAL default_toast_compression = 'lz4'")
        row = cursor.execute(
            TRACE_INSERT,
            [trace.project_id, trace.name, trace.sha256, trace.size, trace.raw,
             trace.declared_format, trace.format, trace.status, trace.source, trace.created_at,
             trace.updated_at],
        ).fetchone()  # fmt: skip
    if row is None:
        return False
    trace.pk = row[0]
    return True


# -- assembling -------------------------------------------------------------------------------
ASSEMBLE_CHUNK = 100  # trace ids assembled (and analyzed) per transaction


def assemble(project_id: int, trace_ids: list[str], quiet: bool = False) -> list[int]:
    """Assemble the buffered spans of these OTLP trace ids into runs, and analyze them.

    With quiet=True (the quiet-period timer) a trace id that received spans within the quiet
    period is put off again instead. Each chunk of trace ids is stored and analyzed in one
    transaction, so a run never shows up unanalyzed. Returns the ids of the runs written.
    """
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
            queue.queue_assembly(project_id, later, quiet=True, countdown=wait)
        trace_ids = sorted(t for t in latest if t not in later)
    else:
        trace_ids = sorted(set(pending.values_list("trace_id", flat=True)))
    if not trace_ids:
        return []
    policy, _warning = policy_service.engine_policy_or_default(project)
    decoded: dict[int, dict[str, list[Span]]] = {}
    run_ids: list[int] = []
    for start in range(0, len(trace_ids), ASSEMBLE_CHUNK):
        chunk = trace_ids[start : start + ASSEMBLE_CHUNK]
        run_ids += _assemble_chunk(project, chunk, decoded, policy, set(trace_ids))
    _finish_batches(project_id, trace_ids)
    return run_ids


def _lock_key(project_id: int, trace_id: str) -> int:
    """Return a signed 64-bit advisory lock key for one (project, OTLP trace id)."""
    value = zlib.crc32(trace_id.encode()) | (project_id & 0x7FFFFFFF) << 32
    return value - (1 << 63) if value >= 1 << 63 else value


def _assemble_chunk(
    project: Project,
    trace_ids: list[str],
    decoded: dict[int, dict[str, list[Span]]],
    policy: detection.Policy,
    wanted: set[str],
) -> list[int]:
    """Build (or rebuild) the runs of some OTLP trace ids from all their buffered spans, and
    analyze them, in one transaction."""
    with transaction.atomic():
        keys = sorted({_lock_key(project.pk, t) for t in trace_ids})  # one order: no deadlock
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(k)) FROM "
                "(SELECT k FROM unnest(%s::bigint[]) AS k ORDER BY k) AS keys",
                [keys],
            )
        groups: dict[str, list[tuple[int, int, bool, bool, int | None]]] = defaultdict(list)
        for pk, trace_id, batch_id, has_root, assembled, run_id in (
            OtlpSpanGroup.objects.filter(project=project, trace_id__in=trace_ids)
            .order_by("id")
            .values_list("pk", "trace_id", "batch_id", "has_root", "assembled", "run_id")
        ):
            groups[trace_id].append((pk, batch_id, has_root, assembled, run_id))
        todo = [t for t in trace_ids if t in groups and not all(g[3] for g in groups[t])]
        if not todo:
            return []  # another task did them
        missing = sorted({g[1] for t in todo for g in groups[t]} - decoded.keys())
        for pk, raw, fmt in _raw_requests(missing):
            encoding = "json" if fmt == "otlp-json" else "proto"
            decoded[pk] = _spans_by_trace(raw, encoding, wanted)
        entries: list[ingest.NewRun] = []
        group_runs: list[tuple[list[int], int]] = []  # (group pks, index into entries)
        unbuilt: list[int] = []
        for trace_id in todo:
            rows = groups[trace_id]
            spans = [span for row in rows for span in decoded.get(row[1], {}).pop(trace_id, ())]
            parsed = _run_of(trace_id, spans, rows)
            if parsed is None:
                unbuilt += [row[0] for row in rows]
                continue
            root_batch = next((row[1] for row in rows if row[2]), rows[0][1])
            existing = next((row[4] for row in rows if row[4]), None)
            group_runs.append(([row[0] for row in rows], len(entries)))
            entries.append(ingest.NewRun(parsed, root_batch, existing))
        stored = ingest.store_runs(project, entries, policy, analyze=True)
        marks = [(pk, stored[index][0].pk) for pks, index in group_runs for pk in pks]
        marks += [(pk, None) for pk in unbuilt]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {OtlpSpanGroup._meta.db_table} AS g SET assembled = true, "
                "run_id = COALESCE(v.run_id, g.run_id) "
                "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, run_id) WHERE g.id = v.id",
                [[m[0] for m in marks], [m[1] for m in marks]],
            )
    return [run.pk for run, _ in stored]


def _raw_requests(trace_ids: list[int]) -> list[tuple[int, bytes, str]]:
    """Return (id, raw bytes, declared format) of stored requests, the bytes fetched in
    binary (not as hex text twice their size)."""
    if not trace_ids:
        return []
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"SELECT id, raw, declared_format FROM {Trace._meta.db_table} WHERE id = ANY(%s)",
            [trace_ids],
            binary=True,
        )
        return [(pk, bytes(raw), fmt) for pk, raw, fmt in cursor.fetchall()]


def _spans_by_trace(body: bytes, encoding: str, wanted: set[str]) -> dict[str, list[Span]]:
    """Decode one stored request once; return its valid spans of the wanted OTLP trace ids,
    by trace id, in order (the importer converts only those)."""
    request = decode(decompress(body), encoding)
    if encoding == "proto":
        request = _only_traces(request, {bytes.fromhex(t) for t in wanted})
    else:  # the importer reads only the spans the receiver accepted
        request = {
            "resourceSpans": [
                {**rs, "scopeSpans": [{**ss, "spans": spans} for ss, spans in scopes]}
                for rs, scopes in _valid_json_scopes(request)
            ]
        }
    out: dict[str, list[Span]] = {}
    try:
        for span in spans_from_request(request):
            if len(span.trace_id) == 32 and len(span.span_id) == 16 and span.span_id != NO_SPAN:
                out.setdefault(span.trace_id, []).append(span)
    except TraceError as exc:
        log.warning("OTLP request could not be read again: %s", exc)
    return {t: spans for t, spans in out.items() if t in wanted}


def _only_traces(
    request: ExportTraceServiceRequest, wanted: set[bytes]
) -> ExportTraceServiceRequest:
    """Return the request, or a copy with only the spans of the wanted trace ids if it holds
    others (spans of other traces are left to the tasks that assemble those)."""
    if all(s.trace_id in wanted for rs in request.resource_spans for ss in rs.scope_spans
           for s in ss.spans):  # fmt: skip
        return request
    out = ExportTraceServiceRequest()
    for rs in request.resource_spans:
        new_rs = None
        for ss in rs.scope_spans:
            spans = [s for s in ss.spans if s.trace_id in wanted]
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


NO_SPAN = "0" * 16


def _valid_json_scopes(request: dict) -> Iterator[tuple[dict, list[tuple[dict, list[dict]]]]]:
    for rs in request.get("resourceSpans") or []:
        if not isinstance(rs, dict):
            continue
        scopes = []
        for ss in rs.get("scopeSpans") or []:
            if isinstance(ss, dict):
                spans = [s for s in ss.get("spans") or [] if isinstance(span_ids(s, "json"), tuple)]
                if spans:
                    scopes.append((ss, spans))
        if scopes:
            yield rs, scopes


def _run_of(trace_id: str, spans: list[Span], rows: list) -> detection.Run | None:  # type: ignore[type-arg]
    """Return the run of one OTLP trace id from its spans (None if it cannot be built)."""
    collector = Collector(source=f"otlp:{trace_id}", limits=Limits())
    try:
        for span in spans:
            collector.add(span)
        runs = collector.runs()
    except TraceError as exc:
        log.warning("OTLP trace %s cannot be assembled: %s", trace_id, exc)
        Trace.objects.filter(pk__in={row[1] for row in rows}).update(
            error=f"trace {trace_id}: {exc}"[:5000], updated_at=timezone.now()
        )
        return None
    if not runs:
        return None
    parsed = runs[0]
    parsed.id = trace_id
    return parsed


def _finish_batches(project_id: int, trace_ids: list[str]) -> None:
    """Mark analyzed the request traces whose spans are all in analyzed runs (one statement)."""
    groups, runs = OtlpSpanGroup._meta.db_table, Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {Trace._meta.db_table} AS t SET status = %s, updated_at = %s
            WHERE t.status = %s
              AND t.id IN (SELECT batch_id FROM {groups}
                           WHERE project_id = %s AND trace_id = ANY(%s))
              AND NOT EXISTS (SELECT 1 FROM {groups} AS g LEFT JOIN {runs} AS r ON r.id = g.run_id
                              WHERE g.batch_id = t.id AND (NOT g.assembled OR r.verdict = %s))
            """,
            [Trace.Status.ANALYZED, timezone.now(), Trace.Status.ANALYZING, project_id,
             list(trace_ids), Verdict.PENDING],
        )  # fmt: skip


def stranded(*, older_than: timedelta | None = None) -> dict[int, list[str]]:
    """Return the OTLP trace ids, by project, whose span groups are left unassembled past the
    quiet period (default: the configured quiet period)."""
    if older_than is None:
        older_than = timedelta(seconds=settings.LOOPBOARD_OTLP_QUIET_SECONDS)
    cutoff = timezone.now() - older_than
    by_project: dict[int, set[str]] = defaultdict(set)
    for project_id, trace_id in OtlpSpanGroup.objects.filter(
        assembled=False, received_at__lte=cutoff
    ).values_list("project_id", "trace_id"):
        by_project[project_id].add(trace_id)
    return {project_id: sorted(ids) for project_id, ids in by_project.items()}
