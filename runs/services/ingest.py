"""Store a received trace, then turn it into runs and steps in the worker."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

import detection

from .. import importers, rawstore
from ..importers import TraceError
from ..importers.kit.spool import StepSpool
from ..models import Project, Run, Step, Trace, Verdict
from . import analysis, deletion, queue, raw, storage
from .policy import engine_policy_or_default

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2  # imports started that never finished: then the trace is failed
IMPORT_LOCK = 0x6C62_696D  # advisory lock class id ("lbim") of the per-trace import lock


def store_trace(
    project: Project,
    data: bytes | raw.Received,
    *,
    name: str,
    format: str = "",
    source: str = Trace.Source.UPLOAD,
    user=None,
    version: str = "",
) -> tuple[Trace, bool]:
    """Keep the raw bytes as a Trace and queue its ingest; the same bytes give the same trace.

    `data` is the bytes, or an upload `raw.receive` read (hashed, in a temporary file): it
    is compressed and stored a chunk at a time. Returns (trace, created). Nothing is parsed
    here: the request returns at once. The same bytes sent again with another forced format
    re-import the existing trace with it, once its last import has finished. `version` is
    the agent version its runs take (over what their metadata says).
    """
    received = raw.receive(io.BytesIO(data), len(data)) if isinstance(data, bytes) else data
    assert received is not None  # bytes are never over their own length
    packed = raw.pack(received)
    try:
        with transaction.atomic():
            kept, key = rawstore.keep(project.pk, received.sha256, packed.file, packed.encoding)
            trace, created = Trace.objects.defer("raw").get_or_create(
                project=project,
                sha256=received.sha256,
                defaults={
                    "name": storage.clean_text(name[:255]) or "trace",
                    "size": received.size,
                    "raw": b"",
                    "raw_encoding": packed.encoding,
                    "raw_key": key,
                    "raw_external_bytes": packed.size if key else 0,
                    "declared_format": format,
                    "source": source,
                    "agent_version": storage.clean_text(version.strip()[:100]),
                    "uploaded_by": user if user and user.is_authenticated else None,
                },
            )
            if created and not key:
                raw.write(trace.pk, packed)
            if created:
                queue.queue_ingest([trace.pk])
            elif format and format != trace.declared_format and trace.is_finished:
                reimport(trace, format)
    finally:
        if packed.file is not received.file:
            packed.file.close()
    return trace, created


def reimport(trace: Trace, format: str) -> None:
    """Import a stored trace again with a forced format (its runs are replaced); not once
    retention has removed its bytes (its runs stay as they are)."""
    with transaction.atomic():
        changed = Trace.objects.filter(pk=trace.pk, raw_expired_at=None).update(
            declared_format=format,
            status=Trace.Status.RECEIVED,
            import_attempts=0,
            error="",
            updated_at=timezone.now(),
        )
        if changed:
            queue.queue_ingest([trace.pk])
    trace.refresh_from_db(fields=["declared_format", "status", "import_attempts", "error"])


def formats() -> dict[str, str]:
    """Return the trace formats an upload may force, name -> label, in detection order."""
    return {name: importer.label for name, importer in importers.IMPORTERS.items()}


def import_limits() -> importers.Limits:
    """Return the importer limits configured for this deployment."""
    return importers.Limits(
        max_bytes=max(settings.MAX_UPLOAD_BYTES * 20, 1 << 20),
        max_held_steps=settings.LOOPBOARD_MAX_HELD_STEPS,
    )


def ingest_trace(trace_id: int, *, after_outage: bool = False) -> None:
    """Parse a stored trace into runs and steps, all or nothing, and queue their analysis.

    Exactly once, however often it is called and by how many workers: an attempt first
    takes the trace's import lock (`attempt_lock`, held by its database session until the
    attempt ends or its worker dies), and a caller that cannot take it skips the trace
    without counting an attempt; the transaction that stores the runs also holds the trace
    row locked, a finished trace is skipped, and leftovers of an attempt that died are
    deleted under the same lock. Any error but a lost database marks the trace failed with
    a message that says where; a lost database is raised, for the task to retry, and that
    retry (after_outage) does not count as another attempt.
    """
    with attempt_lock(trace_id) as mine:
        if mine:
            _attempt(trace_id, count=not after_outage)


@contextmanager
def attempt_lock(trace_id: int) -> Iterator[bool]:
    """Take the trace's import lock if no one holds it; yield whether it was taken.

    A session-level PostgreSQL advisory lock: it outlives the transactions of one attempt
    (counting it, then storing its runs) and is let go when the attempt ends, or by the
    server when the worker holding it dies. Two trace ids share a lock only when they
    differ by a multiple of 2**32; the one that skips is queued again by the recovery sweep.
    """
    key = (IMPORT_LOCK, (trace_id & 0xFFFFFFFF) - (1 << 31))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)
            except (OperationalError, InterfaceError):  # the session is gone, and its lock
                pass


def _attempt(trace_id: int, *, count: bool) -> None:
    """One attempt at importing a trace, under its import lock."""
    if not _start_attempt(trace_id, count=count):
        return
    trace = Trace.objects.select_related("project").defer("raw").get(pk=trace_id)
    try:
        with transaction.atomic():
            locked = (
                Trace.objects.select_for_update(skip_locked=True)
                .filter(pk=trace_id, status=Trace.Status.PARSING)
                .defer("raw")  # read a chunk at a time (raw.open_raw)
                .first()
            )
            if locked is None:
                return  # another worker holds it, or it has moved on
            _store_parsed(locked, trace.project)
    except OperationalError:
        raise
    except TraceError as exc:
        _fail(trace, str(exc))
    except Exception as exc:  # noqa: BLE001 - every input must end, failed with a reason
        log.exception("import of trace %s failed", trace_id)
        _fail(trace, f"{trace.name}: could not be read: {exc.__class__.__name__}: {exc}")


def _start_attempt(trace_id: int, *, count: bool = True) -> bool:
    """Count one more attempt at a trace waiting for import (the caller holds its import
    lock, so a duplicate delivery never counts); return whether to go on.

    A trace whose import was started MAX_ATTEMPTS times and never finished killed its
    worker each time (out of memory, most likely): it is failed instead of tried again. A
    retry after a database outage goes on without counting (count=False).
    """
    with transaction.atomic():
        trace = (
            Trace.objects.select_for_update(skip_locked=True)
            .filter(pk=trace_id, status__in=[Trace.Status.RECEIVED, Trace.Status.PARSING])
            .only("pk", "name", "import_attempts")
            .first()
        )
        if trace is None:
            return False
        if count and trace.import_attempts >= MAX_ATTEMPTS:
            _fail(trace, f"{trace.name}: the import ran out of memory or was killed "
                         f"{trace.import_attempts} times; it is not tried again")  # fmt: skip
            return False
        Trace.objects.filter(pk=trace_id).update(
            status=Trace.Status.PARSING,
            import_attempts=F("import_attempts") + (1 if count else 0),
            updated_at=timezone.now(),
        )
    return True


def _store_parsed(trace: Trace, project: Project) -> None:
    """Replace the trace's runs with the ones parsed from its bytes (in the caller's
    transaction) and move it on to analysis."""
    engine_policy, policy_warning = engine_policy_or_default(project)
    deletion.delete_runs(trace.runs.all())  # leftovers of an attempt that died go
    run_ids, skipped, warnings, format_ = [], 0, [], trace.declared_format
    with raw.open_raw(trace) as received:
        for parsed in importers.iter_runs(
            received,
            source=trace.name,
            format=trace.declared_format or None,
            limits=import_limits(),
        ):
            run = store_run(project, parsed, trace=trace, policy=engine_policy)
            run_ids.append(run.pk)
            skipped = max(skipped, parsed.skipped)
            warnings = warnings or parsed.warnings
            format_ = parsed.format
            if isinstance(parsed.steps, StepSpool):
                parsed.steps.close()
    if not run_ids:
        raise TraceError("the file holds no run (no steps found)", source=trace.name)
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.ANALYZING,
        format=format_,
        skipped_lines=skipped,
        warnings=storage.as_stored(([policy_warning] if policy_warning else []) + warnings[:100]),
        error="",
        updated_at=timezone.now(),
    )
    queue.queue_analysis(run_ids)


def _fail(trace: Trace, message: str) -> None:
    # The message may quote the trace (a tool name with a NUL): it must still be storable.
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.FAILED,
        error=storage.clean_text(message[:5000]),
        updated_at=timezone.now(),
    )


@dataclass(slots=True)
class NewRun:
    """One parsed run to store: under a new id, or replacing the steps of `run_id`."""

    parsed: detection.Run
    trace_id: int | None  # the Trace it came from
    run_id: int | None = None  # an existing run to rebuild in place (same id)
    version: str = ""  # the agent version the uploader gave (over the trace's own)


def store_run(
    project: Project,
    parsed: detection.Run,
    *,
    trace: Trace | None,
    policy: detection.Policy | None = None,
) -> Run:
    """Insert one parsed run and its steps (the caller's transaction is the unit)."""
    entry = NewRun(
        parsed, trace.pk if trace else None, version=trace.agent_version if trace else ""
    )
    [(run, _steps)] = store_runs(project, [entry], policy)
    return run


def store_runs(
    project: Project,
    entries: Sequence[NewRun],
    policy: detection.Policy | None = None,
    *,
    analyze: bool = False,
) -> list[tuple[Run, Iterable[detection.Step]]]:
    """Insert (or rebuild in place) runs and their steps, the steps with one COPY.

    Returns each run with its steps exactly as the engine reads them back from the database
    (`storage.iter_steps`): a list, or for a spooled run (kit.spool) an iterable that reads
    the spool again, so that a run of any length is COPYed as it is read. With analyze=True the steps are analyzed from memory and the
    results written too (`analysis.write`), new runs inserted with their summary at once.
    The caller's transaction is the unit; an entry whose `run_id` no longer exists is
    inserted.
    """
    policy = policy or detection.Policy()
    wanted = [e.run_id for e in entries if e.run_id is not None]
    existing = (
        set(Run.objects.filter(pk__in=wanted).values_list("pk", flat=True)) if wanted else set()
    )
    fresh: list[Run] = []
    rebuilt: list[Run] = []
    out: list[Run] = []
    for entry in entries:
        run = _run_row(project, entry.parsed, entry.trace_id)
        run.agent_version = storage.clean_text(entry.version[:100]) or run.agent_version
        if entry.run_id in existing:
            run.pk = entry.run_id
            rebuilt.append(run)
        else:
            fresh.append(run)
        out.append(run)
    rows = [_rows(e.parsed.steps, policy) for e in entries]
    stored = [(run, _read_back(steps)) for run, steps in zip(out, rows, strict=True)]
    analyzed = analysis.prepare(stored, policy) if analyze else []
    for item in analyzed:
        if item.run.pk is None:  # inserted with its search column
            item.run.search = analysis.search_vector(item)
    if fresh:
        Run.objects.bulk_create(fresh)
    if rebuilt:
        Step.objects.filter(run_id__in=[r.pk for r in rebuilt]).delete()
        for run in rebuilt:
            Run.objects.filter(pk=run.pk).update(
                trace_id=run.trace_id,
                external_id=run.external_id,
                name=run.name,
                format=run.format,
                metadata=run.metadata,
                agent=run.agent,
                agent_version=run.agent_version,
                step_count=run.step_count,
                tool_call_count=run.tool_call_count,
                tools=run.tools,
                started_at=run.started_at,
                ended_at=run.ended_at,
                verdict=Verdict.PENDING,
            )
    storage.copy_rows(
        Step._meta.db_table,
        storage.STEP_COLUMNS,
        (
            (run.pk, *values[1:])
            for run, steps in zip(out, rows, strict=True)
            for values, _ in steps
        ),
    )
    if analyze:
        analysis.write(analyzed, inserted=[run.pk for run in fresh], finish_traces=False)
    return stored


class _Rows:
    """A spooled run's `storage.step_values`, made again at each read (one read analyzes,
    the next COPYs): the run is never held whole as rows."""

    def __init__(self, steps: StepSpool, policy: detection.Policy) -> None:
        self.steps, self.policy = steps, policy

    def __iter__(self) -> Iterator[tuple[tuple, detection.Step]]:
        for step in self.steps:
            yield storage.step_values(None, step, self.policy)


class _ReadBack:
    """The engine's steps of `_Rows`, read again at each read."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows

    def __iter__(self) -> Iterator[detection.Step]:
        for _, read_back in self.rows:
            yield read_back


def _rows(steps: Iterable[detection.Step], policy: detection.Policy):  # type: ignore[no-untyped-def]
    """A run's step rows: a list, or for a spooled run rows made as they are read."""
    if isinstance(steps, StepSpool):
        return _Rows(steps, policy)
    return [storage.step_values(None, step, policy) for step in steps]


def _read_back(rows):  # type: ignore[no-untyped-def]
    if isinstance(rows, _Rows):
        return _ReadBack(rows)
    return [read_back for _, read_back in rows]


def _run_row(project: Project, parsed: detection.Run, trace_id: int | None) -> Run:
    first = last = None  # the earliest and the latest time of a step (one pass: spools too)
    count = calls = 0
    tools: set[str] = set()
    for step in parsed.steps:
        count += 1
        if step.kind == "tool_call":
            calls += 1
        if step.tool:
            tools.add(storage.clean_text(step.tool[:200]))
        for t in (step.started_at, step.ended_at):
            if t is not None:
                if first is None or t < first:
                    first = t
                if last is None or t > last:
                    last = t
    agent, version = agent_of(parsed.metadata)
    return Run(
        project=project,
        trace_id=trace_id,
        external_id=storage.clean_text(parsed.id[:255]),
        name=storage.clean_text((parsed.name or parsed.id)[:255]),
        format=parsed.format,
        metadata=storage.as_stored(parsed.metadata),
        agent=agent,
        agent_version=version,
        step_count=count,
        tool_call_count=calls,
        tools=sorted(tools)[:200],
        started_at=storage.timestamp(first) if first is not None else None,
        ended_at=storage.timestamp(last) if last is not None else None,
        verdict=Verdict.PENDING,
    )


#: Metadata keys that name the agent, and its version, most specific first.
AGENT_KEYS = ("gen_ai.agent.name", "agent.name", "agent_name", "service.name", "agent")
VERSION_KEYS = (
    "agent_version", "agent.version", "service.version", "version", "cli_version",
    "aider_version", "harness_version", "session_version",
)  # fmt: skip


def agent_of(metadata: dict) -> tuple[str, str]:
    """Return (agent, agent version) named by a run's metadata ("" when absent)."""

    def first(keys: tuple[str, ...], limit: int) -> str:
        for key in keys:
            value = metadata.get(key)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):  # noqa: UP038
                text = storage.clean_text(str(value).strip())
                if text:
                    return text[:limit]
        return ""

    return first(AGENT_KEYS, 200), first(VERSION_KEYS, 100)
