"""OTLP/HTTP after decoding: buffer the spans and log records of each request, assemble
them into runs.

Decoding is the OTLP importer's (`runs.importers.otlp`): the receiver reads a request with
its `read_request`, and the assembly reads stored requests back with `decode_body` and turns
the spans of one trace id, from every request that brought some, into a run with one
importer `Collector`.

Every request's bytes are kept whole as a `Trace` (source "otlp", declared format
"otlp-proto" or "otlp-json" for traces, "otlp-logs-proto" or "otlp-logs-json" for logs); an
`OtlpSpanGroup` row per (request, run buffer key) says which keys it holds and whether a root
span is among them. The key (`spans.group_key`, kept in the row's `trace_id` column) is the
session's when a span or log record names one (`session.id` and the dialects' session
attributes; every span of a trace in one request goes where any of them says), else the OTLP
trace id: so the traces of one session, and the log records that carry only its `session.id`
(Claude Code's events), are one run; what came of a trace before a span named its session,
and what comes of it after without naming it, joins the session (`_file_keys`). A log record with a trace id but no session joins that
trace id's key (it does not find a session its spans named). A worker task assembles the spans
of a trace id into one run: a short grace period after its root span arrived (so spans of the
same trace still in flight on another connection join), or after a quiet period without new
spans when the root never comes. Spans that arrive after the run was assembled rebuild it in
place (same run id) and analyze it again.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import psycopg
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

import detection

from .. import rawstore
from ..importers.errors import TraceError
from ..importers.otlp import (
    BodyLimits,
    Collector,
    ExportRequest,
    LogEvent,
    Span,
    decode_body,
    logs,
    span_keys,
    spans_from_request,
)
from ..importers.otlp.spans import SESSION_PREFIX
from ..models import OtlpSpanGroup, Project, Run, Trace, Verdict, pack_raw, unpack_raw
from . import deletion, ingest, queue, storage
from .policy import engine_policy_or_default

log = logging.getLogger(__name__)
Item = Span | LogEvent


class GroupRow(NamedTuple):
    """One OtlpSpanGroup row, as the assembly reads it."""

    pk: int
    request_id: int  # the request Trace that brought the spans
    has_root: bool
    assembled: bool
    run_id: int | None
    span_key: str  # the key its spans carry in the request ("": the row's own)


class StoredRequest(NamedTuple):
    """One stored request: its Trace id, its bytes as received, its declared format."""

    pk: int
    raw: bytes
    declared_format: str

    @property
    def encoding(self) -> str:
        return "json" if self.declared_format.endswith("-json") else "proto"

    @property
    def signal(self) -> str:
        return "logs" if self.declared_format.startswith("otlp-logs-") else "traces"


@dataclass(slots=True)
class Assembly:
    """The runs built in one chunk: each entry with the group rows it was built from."""

    entries: list[ingest.NewRun] = field(default_factory=list)
    members: list[list[int]] = field(default_factory=list)  # group pks, one list per entry
    unbuilt: list[int] = field(default_factory=list)  # group pks of traces no run came from
    merged: list[int] = field(default_factory=list)  # runs now part of another's session


def _body_limits() -> BodyLimits:
    """Return the limits a stored request body is decoded within (as when it was received)."""
    return BodyLimits(settings.LOOPBOARD_OTLP_INLINE_BYTES, settings.LOOPBOARD_MAX_JSON_DEPTH)


# -- receiving --------------------------------------------------------------------------------
def store_request(
    project: Project, body: bytes, export: ExportRequest, *, name: str = "", signal: str = "traces"
) -> Trace | None:
    """Keep the request bytes as a Trace and buffer its spans (or, signal "logs", its log
    records); queue their assembly.

    Returns the trace, or None for a request without a single span. A request whose spans
    were all rejected is kept too, failed, with the reasons. A request sent twice (an
    exporter retrying) is stored once.
    """
    if not export.groups and not export.rejected:
        return None
    now = timezone.now()
    with transaction.atomic():
        trace = _request_trace(project, body, export, name=name, now=now, signal=signal)
        if not export.groups:
            trace.status = Trace.Status.FAILED
            what = "log record" if signal == "logs" else "span"
            trace.error = storage.clean_text(f"every {what} was rejected: {export.error_message}")
        if not _insert_raw(trace):
            return Trace.objects.defer("raw").get(project=project, sha256=trace.sha256)
        filed = _file_keys(project, trace, export)
        OtlpSpanGroup.objects.bulk_create(
            OtlpSpanGroup(
                project=project,
                request=trace,
                trace_id=filed.get(key, key),
                span_key=key if key in filed else "",
                span_count=group.spans,
                has_root=group.has_root,
                received_at=now,
            )
            for key, group in export.groups.items()
        )
        ready = sorted({filed.get(t, t) for t, group in export.groups.items() if group.has_root})
        waiting = sorted({filed.get(t, t) for t, g in export.groups.items() if not g.has_root})
        grace = settings.LOOPBOARD_OTLP_ROOT_GRACE
        quiet = settings.LOOPBOARD_OTLP_QUIET_SECONDS
        queue.queue_assembly(project.pk, ready, countdown=grace)
        queue.queue_assembly(project.pk, waiting, quiet=True, countdown=quiet)
    return trace


def _file_keys(project: Project, trace: Trace, export: ExportRequest) -> dict[str, str]:
    """Join the traces of one session whatever order their spans and log records come in;
    return the keys of this request's groups that are filed under a session's key instead,
    with that key.

    A span names its session (often only the root does, and an exporter sends the root last),
    so what was sent of its trace before was filed under the trace id: those rows move to
    the session's key now, to be assembled again with it (`span_key` keeps the key their
    items carry in their request), and a row without spans remembers which session took the
    trace. Spans and log records of that trace sent later without naming the session go to
    it. The trace ids' advisory locks (the assembly's) make this and an assembly, or another
    request of the same traces, take turns.
    """
    sessions = {t: key for t, key in export.keys.items() if key != t}
    bare = [key for key in export.groups if not key.startswith(SESSION_PREFIX)]
    if not bare and not sessions:
        return {}
    _lock(project.pk, [*bare, *sessions])
    rows = OtlpSpanGroup.objects.filter(project=project)
    if sessions:  # one statement for every trace id that named its session
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {OtlpSpanGroup._meta.db_table} AS g SET trace_id = v.key, "
                "span_key = v.trace_id, assembled = false "
                "FROM unnest(%s::text[], %s::text[]) AS v(trace_id, key) "
                "WHERE g.project_id = %s AND g.trace_id = v.trace_id",
                [list(sessions), list(sessions.values()), project.pk],
            )
    known = set(rows.filter(span_key__in=list(sessions)).values_list("span_key", flat=True))
    rows.bulk_create(
        OtlpSpanGroup(project=project, request=trace, trace_id=key, span_key=trace_id)
        for trace_id, key in sessions.items()
        if trace_id not in known
    )
    taken = rows.filter(span_key__in=bare).values_list("span_key", "trace_id").distinct()
    return dict(taken) if bare else {}


def store_large_request(project: Project, body: bytes, *, name: str = "") -> Trace:
    """Keep a request too large to decode in the web process as a trace the worker imports
    with the OTLP file importer, which streams it (each OTLP trace id becomes a run; spans of
    the same trace ids sent in other requests are not joined to these runs)."""
    name = name or _request_name(timezone.now())
    trace, _ = ingest.store_trace(project, body, name=name, format="otlp", source=Trace.Source.OTLP)
    return trace


def _request_name(now: datetime) -> str:
    """Return the name an OTLP request is listed under: when it arrived."""
    return f"otlp {now:%Y-%m-%d %H:%M:%S.%f}"


def _request_trace(
    project: Project,
    body: bytes,
    export: ExportRequest,
    *,
    name: str,
    now: datetime,
    signal: str = "traces",
) -> Trace:
    """Return the (unsaved) Trace that keeps one request's bytes."""
    declared = f"otlp-logs-{export.encoding}" if signal == "logs" else f"otlp-{export.encoding}"
    stored, encoding = pack_raw(body)
    digest = hashlib.sha256(body).hexdigest()
    raw, key = rawstore.keep(project.pk, digest, stored, encoding)
    return Trace(
        project=project,
        sha256=digest,
        name=name or _request_name(now),
        size=len(body),
        raw=raw,
        raw_encoding=encoding,
        raw_key=key,
        raw_external_bytes=len(stored) if key else 0,
        declared_format=declared,
        format=declared,
        # Not "received"/"parsing": requeue_stale must not hand it to the importers.
        status=Trace.Status.ANALYZING,
        source=Trace.Source.OTLP,
        created_at=now,
        updated_at=now,
    )


TRACE_INSERT = f"""
    INSERT INTO {Trace._meta.db_table} (project_id, name, sha256, size, raw, raw_encoding,
        raw_key, raw_external_bytes, declared_format, format, status, error, skipped_lines,
        import_attempts, warnings, source, uploaded_by_id, agent_version, created_at, updated_at)
    VALUES (%s, %s, %s, %s, %b, %s, %s, %s, %s, %s, %s, %s, 0, 0, '[]', %s, NULL, '', %s, %s)
    ON CONFLICT (project_id, sha256) DO NOTHING
    RETURNING id
"""
_lz4: bool | None = None


def _insert_raw(trace: Trace) -> bool:
    """Insert a request trace, its bytes (zstd-compressed already: `pack_raw`) as a binary
    parameter (no escaping to text); the server's own TOAST compression is lz4 where it has
    it, which gives up on compressed bytes sooner than pglz. Set trace.pk and return True, or
    return False if these bytes are already stored.
    """
    global _lz4
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # server-side binding
        if _lz4 is None:
            row = cursor.execute(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            ).fetchone()
            _lz4 = row is not None and bool(row[0])
        if _lz4:
            cursor.execute("SET LOCAL default_toast_compression = 'lz4'")
        inserted = cursor.execute(
            TRACE_INSERT,
            [trace.project_id, trace.name, trace.sha256, trace.size, trace.raw,
             trace.raw_encoding, trace.raw_key, trace.raw_external_bytes, trace.declared_format, trace.format, trace.status, trace.error,
             trace.source, trace.created_at, trace.updated_at],
        ).fetchone()  # fmt: skip
    if inserted is None:
        return False
    (trace.pk,) = inserted
    return True


# -- assembling -------------------------------------------------------------------------------
ASSEMBLE_CHUNK = 100  # trace ids assembled (and analyzed) per transaction


def assemble(project_id: int, trace_ids: list[str], quiet: bool = False) -> list[int]:
    """Assemble the buffered spans of these OTLP trace ids into runs, and analyze them.

    With quiet=True (the quiet-period timer) a trace id that received spans within the quiet
    period is put off again instead. Each chunk of trace ids is stored and analyzed in one
    transaction, so a run never shows up unanalyzed. A chunk that fails is done again one
    trace id at a time, so one trace id that cannot be stored fails alone, visibly, and the
    others are assembled. Returns the ids of the runs written.
    """
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return []
    pending = OtlpSpanGroup.objects.filter(
        project_id=project_id, trace_id__in=trace_ids, assembled=False
    )
    if quiet:
        trace_ids = _quiet_ones(project_id, pending)
    else:
        trace_ids = sorted(set(pending.values_list("trace_id", flat=True)))
    if not trace_ids:
        return []
    policy, _warning = engine_policy_or_default(project)
    run_ids: list[int] = []
    for start in range(0, len(trace_ids), ASSEMBLE_CHUNK):
        chunk = trace_ids[start : start + ASSEMBLE_CHUNK]
        try:
            run_ids += _assemble_chunk(project, chunk, policy)
        except OperationalError:
            raise  # the database went away: the task retries
        except Exception:  # noqa: BLE001 - find the trace id that fails, keep the others
            log.exception("OTLP assembly of %d trace id(s) failed; retrying one by one", len(chunk))
            run_ids += _assemble_one_by_one(project, chunk, policy)
    _finish_requests(project_id, trace_ids)
    return run_ids


def _assemble_one_by_one(
    project: Project, trace_ids: list[str], policy: detection.Policy
) -> list[int]:
    """Assemble each trace id in its own transaction; fail the ones that raise."""
    run_ids: list[int] = []
    for trace_id in trace_ids:
        try:
            run_ids += _assemble_chunk(project, [trace_id], policy)
        except OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001 - this trace id fails, visibly
            log.exception("OTLP trace %s cannot be assembled", trace_id)
            _fail_trace_id(project, trace_id, f"{exc.__class__.__name__}: {exc}")
    return run_ids


def _fail_trace_id(project: Project, trace_id: str, reason: str) -> None:
    """Mark one trace id's span groups done without a run, and say why on their requests."""
    with transaction.atomic():
        _lock(project.pk, [trace_id])
        rows = _group_rows(project, [trace_id]).get(trace_id, [])
        _mark_assembled([(row.pk, None) for row in rows])
        _note_error(trace_id, rows, f"could not be assembled: {reason}")


def _quiet_ones(project_id: int, pending: QuerySet[OtlpSpanGroup]) -> list[str]:
    """Return the pending trace ids that are quiet (or have their root); put the others off
    until their quiet period is over."""
    window = timedelta(seconds=settings.LOOPBOARD_OTLP_QUIET_SECONDS)
    latest = defaultdict(lambda: datetime.min.replace(tzinfo=UTC))
    has_root = set()
    for trace_id, received_at, root in pending.values_list("trace_id", "received_at", "has_root"):
        latest[trace_id] = max(latest[trace_id], received_at)
        if root:
            has_root.add(trace_id)
    now = timezone.now()
    later = sorted(t for t, at in latest.items() if now - at < window and t not in has_root)
    if later:
        wait = max(1.0, (window - (now - min(latest[t] for t in later))).total_seconds())
        queue.queue_assembly(project_id, later, quiet=True, countdown=wait)
    return sorted(t for t in latest if t not in later)


def _lock_key(project_id: int, trace_id: str) -> int:
    """Return a signed 64-bit advisory lock key for one (project, OTLP trace id)."""
    value = zlib.crc32(trace_id.encode()) | (project_id & 0x7FFFFFFF) << 32
    return value - (1 << 63) if value >= 1 << 63 else value


def _lock(project_id: int, trace_ids: list[str]) -> None:
    """Take the transaction's advisory locks on these trace ids, in one order (no deadlock)."""
    keys = sorted({_lock_key(project_id, t) for t in trace_ids})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(k)) FROM "
            "(SELECT k FROM unnest(%s::bigint[]) AS k ORDER BY k) AS keys",
            [keys],
        )


def _assemble_chunk(project: Project, trace_ids: list[str], policy: detection.Policy) -> list[int]:
    """Build (or rebuild) the runs of some OTLP trace ids from all their buffered spans, and
    analyze them, in one transaction.

    Each chunk reads the stored requests of its own rows, after taking its trace ids' locks,
    and keeps nothing of them for the next chunk. So a row filed under a session since the
    assembly began (`_file_keys`) is read with the key its spans carry now, and the chunk
    holds its trace ids' steps plus one request at a time (`_collect`), not every request's
    spans. The price: a request with spans of trace ids in two chunks is decoded in each,
    though its spans are turned into `Span`s only in their own chunk.
    """
    with transaction.atomic():
        _lock(project.pk, trace_ids)
        groups = _group_rows(project, trace_ids)
        todo = [t for t in trace_ids if t in groups and not all(g.assembled for g in groups[t])]
        if not todo:
            return []  # another task did them
        assembly = _build_runs(todo, groups)
        stored = ingest.store_runs(project, assembly.entries, policy, analyze=True)
        marks = [
            (pk, run.pk)
            for (run, _), pks in zip(stored, assembly.members, strict=True)
            for pk in pks
        ]
        _mark_assembled(marks + [(pk, None) for pk in assembly.unbuilt])
        if assembly.merged:
            deletion.delete_runs(Run.objects.filter(pk__in=assembly.merged))
    return [run.pk for run, _ in stored]


def _group_rows(project: Project, trace_ids: list[str]) -> dict[str, list[GroupRow]]:
    """Return the span group rows of these trace ids, by trace id, oldest first."""
    groups: dict[str, list[GroupRow]] = defaultdict(list)
    rows = (
        OtlpSpanGroup.objects.filter(project=project, trace_id__in=trace_ids)
        .order_by("id")
        .values_list("trace_id", "pk", "request_id", "has_root", "assembled", "run_id", "span_key")
    )
    for trace_id, *fields in rows:
        groups[trace_id].append(GroupRow(*fields))
    return groups


def _build_runs(todo: list[str], groups: dict[str, list[GroupRow]]) -> Assembly:
    """Return the run of each trace id from its buffered spans, with the rows it came from."""
    collected = _collect(todo, groups)
    assembly = Assembly()
    for trace_id in todo:
        rows = groups[trace_id]
        parsed = _run_of(trace_id, collected.pop(trace_id), rows)
        if parsed is None:
            assembly.unbuilt += [row.pk for row in rows]
            continue
        root_request = next((row.request_id for row in rows if row.has_root), rows[0].request_id)
        # the run this key had (the oldest, where traces built apart are now one session's)
        built = sorted({row.run_id for row in rows if row.run_id})
        existing = built[0] if built else None
        assembly.merged += built[1:]
        assembly.members.append([row.pk for row in rows])
        assembly.entries.append(ingest.NewRun(parsed, root_request, existing))
    return assembly


def _mark_assembled(marks: list[tuple[int, int | None]]) -> None:
    """Mark span groups assembled, each with its run (None: keep the run it had)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {OtlpSpanGroup._meta.db_table} AS g SET assembled = true, "
            "run_id = COALESCE(v.run_id, g.run_id) "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, run_id) WHERE g.id = v.id",
            [[pk for pk, _ in marks], [run_id for _, run_id in marks]],
        )


def _collect(
    todo: list[str], groups: dict[str, list[GroupRow]]
) -> dict[str, Collector | TraceError]:
    """Feed each trace id's Collector the spans and log records of its rows, oldest row
    first, fetching and decoding one stored request at a time; return the collectors.

    The rows of all these trace ids are taken in id order: a request is decoded at the first
    of its rows, and what it holds for its later rows is kept until they come and dropped
    once fed. A request's rows are next to each other (but where two requests were stored at
    the same moment), so this holds about one request's spans besides the steps. A trace id
    whose spans cross an import limit gets the TraceError instead, and is fed no more.
    """
    # The deployment's import limits (LOOPBOARD_MAX_HELD_STEPS among them), as a file has.
    limits = ingest.import_limits()
    collected: dict[str, Collector | TraceError] = {
        trace_id: Collector(source=f"otlp:{trace_id}", limits=limits) for trace_id in todo
    }
    rows = sorted(((row, t) for t in todo for row in groups[t]), key=lambda pair: pair[0].pk)
    wanted: dict[int, set[str]] = defaultdict(set)  # request id -> the keys its rows' spans carry
    for row, trace_id in rows:
        wanted[row.request_id].add(row.span_key or trace_id)
    rows_left = Counter(row.request_id for row, _ in rows)
    held: dict[int, dict[str, list[Item]]] = {}  # request id -> items of its rows still to come
    for row, trace_id in rows:
        if row.request_id not in held:
            held[row.request_id] = _decode_request(row.request_id, wanted[row.request_id])
        items = held[row.request_id].pop(row.span_key or trace_id, [])
        rows_left[row.request_id] -= 1
        if not rows_left[row.request_id]:
            del held[row.request_id]  # all its rows are fed
        collector = collected[trace_id]
        if isinstance(collector, Collector):
            collected[trace_id] = _feed(collector, items)
        del items  # let these spans go before the next request is decoded
    return collected


def _feed(collector: Collector, items: list[Item]) -> Collector | TraceError:
    """Add spans and log records to a Collector; return it, or the error that stopped it (its
    steps are then let go)."""
    try:
        for item in items:
            if isinstance(item, LogEvent):
                collector.add_log(item)
            else:
                collector.add(item)
    except TraceError as exc:
        return exc
    return collector


def _decode_request(request_id: int, keys: set[str]) -> dict[str, list[Item]]:
    """Fetch and decode one stored request; return its items of these keys (`_items_by_key`),
    or none if the request is gone. Its bytes and decoded body are let go on return."""
    request = _raw_request(request_id)
    return {} if request is None else _items_by_key(request, keys)


def _raw_request(request_id: int) -> StoredRequest | None:
    """Return the stored request with this Trace id, its bytes fetched in binary (not as hex
    text twice their size) and unpacked."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        row = cursor.execute(
            f"SELECT raw, raw_encoding, raw_key, declared_format FROM {Trace._meta.db_table} "
            "WHERE id = %s",
            [request_id],
            binary=True,
        ).fetchone()
    if row is None:
        return None
    raw, encoding, key, declared_format = row
    return StoredRequest(request_id, unpack_raw(rawstore.read(raw, key), encoding), declared_format)


def _items_by_key(request: StoredRequest, wanted: set[str]) -> dict[str, list[Item]]:
    """Decode one stored request once; return its valid spans (or log records) of the wanted
    run buffer keys, by key, in order (the spans of other keys are not converted). The keys
    are found as the receiver found them (`span_keys`, `LogEvent.key`)."""
    out: dict[str, list[Item]] = {}
    if request.signal == "logs":
        data = logs.decode_body(request.raw, request.encoding, limits=_body_limits())
        for event in logs.events_from_request(data, keys=wanted):
            out.setdefault(event.key, []).append(event)
        return out
    decoded = decode_body(request.raw, request.encoding, limits=_body_limits())
    keys = span_keys(decoded)
    traces = {trace_id for trace_id, key in keys.items() if key in wanted}
    for span in spans_from_request(decoded, traces=traces):
        out.setdefault(keys[span.trace_id], []).append(span)
    return out


def _run_of(
    trace_id: str, collected: Collector | TraceError, rows: list[GroupRow]
) -> detection.Run | None:
    """Return the run of one run buffer key (an OTLP trace id or a session's key) from the
    Collector its spans and log records were fed to, or the error that stopped them (None if
    it cannot be built)."""
    try:
        if isinstance(collected, TraceError):
            raise collected  # feeding it stopped at a limit
        runs = collected.runs()
    except TraceError as exc:
        log.warning("OTLP trace %s cannot be assembled: %s", trace_id, exc)
        _note_error(trace_id, rows, str(exc))
        return None
    if not runs:
        _note_error(trace_id, rows, "its spans and log records hold no agent step")
        return None
    parsed = max(runs, key=lambda run: len(run.steps))  # one, unless a trace changed session
    if not (trace_id.startswith(SESSION_PREFIX) and parsed.metadata.get("session_id")):
        parsed.id = trace_id
    return parsed


def _note_error(trace_id: str, rows: list[GroupRow], reason: str) -> None:
    """Say on the request traces that brought a trace id's spans why it has no run."""
    Trace.objects.filter(pk__in={row.request_id for row in rows}).update(
        error=storage.clean_text(f"trace {trace_id}: {reason}")[:5000], updated_at=timezone.now()
    )


def _finish_requests(project_id: int, trace_ids: list[str]) -> None:
    """Finish the request traces whose span groups are all assembled and whose runs are all
    analyzed (one statement): analyzed, or failed when none of their trace ids made a run."""
    groups, runs = OtlpSpanGroup._meta.db_table, Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {Trace._meta.db_table} AS t SET updated_at = %s, status = CASE
                WHEN EXISTS (SELECT 1 FROM {groups} AS g
                             WHERE g.request_id = t.id AND g.run_id IS NOT NULL) THEN %s
                ELSE %s END
            WHERE t.status = %s
              AND t.id IN (SELECT request_id FROM {groups}
                           WHERE project_id = %s AND trace_id = ANY(%s))
              AND NOT EXISTS (SELECT 1 FROM {groups} AS g LEFT JOIN {runs} AS r ON r.id = g.run_id
                              WHERE g.request_id = t.id AND (NOT g.assembled OR r.verdict = %s))
            """,
            [timezone.now(), Trace.Status.ANALYZED, Trace.Status.FAILED, Trace.Status.ANALYZING,
             project_id, list(trace_ids), Verdict.PENDING],
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
