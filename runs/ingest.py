"""Services: store a received trace, then turn it into runs and steps in the worker."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

import detection
from detection import keys
from runs import importers
from runs.importers import TraceError

from .models import STEP_FIELDS, Project, Run, Step, Trace, Verdict, engine_step

log = logging.getLogger(__name__)


def store_trace(
    project: Project,
    data: bytes,
    *,
    name: str,
    format: str = "",
    source: str = Trace.Source.UPLOAD,
    user=None,
) -> tuple[Trace, bool]:
    """Keep the raw bytes as a Trace and queue its ingest; the same bytes give the same trace.

    Returns (trace, created). Nothing is parsed here: the request returns at once.
    """
    from . import tasks

    digest = hashlib.sha256(data).hexdigest()
    with transaction.atomic():
        trace, created = Trace.objects.get_or_create(
            project=project,
            sha256=digest,
            defaults={
                "name": name[:255] or "trace",
                "size": len(data),
                "raw": data,
                "declared_format": format,
                "source": source,
                "uploaded_by": user if user and user.is_authenticated else None,
            },
        )
        if created:
            transaction.on_commit(lambda: tasks.ingest_trace.delay(trace.pk))
    return trace, created


def import_limits() -> importers.Limits:
    """Return the importer limits configured for this deployment."""
    return importers.Limits(max_bytes=max(settings.MAX_UPLOAD_BYTES * 20, 1 << 20))


def ingest_trace(trace_id: int) -> None:
    """Parse a stored trace into runs and steps, all or nothing, and queue their analysis.

    Safe to run twice: a trace that is already past parsing is left alone, and a run is
    inserted in the same transaction that moves the trace on.
    """
    from . import tasks

    claimed = Trace.objects.filter(
        pk=trace_id, status__in=[Trace.Status.RECEIVED, Trace.Status.PARSING]
    ).update(status=Trace.Status.PARSING, updated_at=timezone.now())
    if not claimed:
        return
    trace = Trace.objects.select_related("project").get(pk=trace_id)
    try:
        policy = trace.project.policy()
        with transaction.atomic():
            trace.runs.all().delete()  # leftovers of an attempt that died are never kept
            run_ids, skipped, warnings, format_ = [], 0, [], trace.declared_format
            for parsed in importers.iter_runs(
                bytes(trace.raw),
                source=trace.name,
                format=trace.declared_format or None,
                limits=import_limits(),
            ):
                run = store_run(trace.project, parsed, trace=trace, policy=policy)
                run_ids.append(run.pk)
                skipped = max(skipped, parsed.skipped)
                warnings = warnings or parsed.warnings
                format_ = parsed.format
            if not run_ids:
                raise TraceError("the file holds no run (no steps found)", source=trace.name)
            Trace.objects.filter(pk=trace.pk).update(
                status=Trace.Status.ANALYZING,
                format=format_,
                skipped_lines=skipped,
                warnings=warnings[:100],
                error="",
                updated_at=timezone.now(),
            )
            for run_id in run_ids:
                transaction.on_commit(lambda run_id=run_id: tasks.analyze_run.delay(run_id))
    except TraceError as exc:
        _fail(trace, str(exc))
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        log.exception("import of trace %s failed", trace_id)
        _fail(trace, f"{trace.name}: could not be read: {exc.__class__.__name__}: {exc}")


def _fail(trace: Trace, message: str) -> None:
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.FAILED, error=message[:5000], updated_at=timezone.now()
    )


# The columns COPY writes: the step fields the engine reads back, plus keys of our own.
STEP_COLUMNS = ("run_id", *STEP_FIELDS, "call_sig")


@dataclass(slots=True)
class NewRun:
    """One parsed run to store: under a new id, or replacing the steps of `run_id`."""

    parsed: detection.Run
    trace_id: int | None  # the Trace it came from
    run_id: int | None = None  # an existing run to rebuild in place (same id)


def store_run(
    project: Project,
    parsed: detection.Run,
    *,
    trace: Trace | None,
    policy: detection.Policy | None = None,
) -> Run:
    """Insert one parsed run and its steps (the caller's transaction is the unit)."""
    [(run, _steps)] = store_runs(project, [NewRun(parsed, trace.pk if trace else None)], policy)
    return run


def store_runs(
    project: Project,
    entries: Sequence[NewRun],
    policy: detection.Policy | None = None,
    *,
    analyze: bool = False,
) -> list[tuple[Run, list[detection.Step]]]:
    """Insert (or rebuild in place) runs and their steps, the steps with one COPY.

    Returns each run with its steps exactly as the engine reads them back from the database
    (`analysis.iter_steps`). With analyze=True the steps are analyzed from memory and the
    results written too (`analysis.write`), new runs inserted with their summary at once.
    The caller's transaction is the unit; an entry whose `run_id` no longer exists is
    inserted.
    """
    from . import analysis

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
        if entry.run_id in existing:
            run.pk = entry.run_id
            rebuilt.append(run)
        else:
            fresh.append(run)
        out.append(run)
    rows = [[step_values(None, step, policy) for step in e.parsed.steps] for e in entries]
    stored = [
        (run, [read_back for _, read_back in steps]) for run, steps in zip(out, rows, strict=True)
    ]
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
                step_count=run.step_count,
                tool_call_count=run.tool_call_count,
                tools=run.tools,
                started_at=run.started_at,
                ended_at=run.ended_at,
                verdict=Verdict.PENDING,
            )
    copy_rows(
        Step._meta.db_table,
        STEP_COLUMNS,
        (
            (run.pk, *values[1:])
            for run, steps in zip(out, rows, strict=True)
            for values, _ in steps
        ),
    )
    if analyze:
        analysis.write(analyzed, inserted=[run.pk for run in fresh], finish_traces=False)
    return stored


def _run_row(project: Project, parsed: detection.Run, trace_id: int | None) -> Run:
    steps = parsed.steps
    times = [t for s in steps for t in (s.started_at, s.ended_at) if t is not None]
    return Run(
        project=project,
        trace_id=trace_id,
        external_id=parsed.id[:255],
        name=(parsed.name or parsed.id)[:255],
        format=parsed.format,
        metadata=parsed.metadata,
        step_count=len(steps),
        tool_call_count=sum(1 for s in steps if s.kind == "tool_call"),
        tools=sorted({s.tool for s in steps if s.tool})[:200],
        started_at=_when(min(times)) if times else None,
        ended_at=_when(max(times)) if times else None,
        verdict=Verdict.PENDING,
    )


def step_values(
    run_id: int | None, step: detection.Step, policy: detection.Policy
) -> tuple[tuple, detection.Step]:
    """Return the column values (STEP_COLUMNS, JSON columns as JSON text) of one step, and the
    engine's step as it reads those values back from the database (`analysis.iter_steps`)."""
    call_sig = ""
    if step.kind == "tool_call" and step.tool:
        volatile = policy.for_tool(step.tool).volatile  # the same signature the engine uses
        call_sig = keys.call_signature(step.tool, step.args, volatile=volatile)[:80]
    source_id = _text_safe((step.id or "")[:255])
    parent_id = _text_safe((step.parent_id or "")[:255])
    tool = _text_safe((step.tool or "")[:200])
    args = _as_stored(step.args)
    result = _as_stored(step.result)
    status = step.status if step.status in ("ok", "error") else "ok"
    batch_id = _text_safe((step.batch_id or "")[:255])
    text = _text_safe(step.text or "")
    started_at, ended_at = _when(step.started_at), _when(step.ended_at)
    tokens_in, tokens_out = _int_or_none(step.tokens_in), _int_or_none(step.tokens_out)
    cost = _float_or_none(step.cost)
    values = (run_id, step.seq, step.kind, source_id, parent_id, tool, _json_text(args),
              _json_text(result), status, batch_id, text, started_at, ended_at, tokens_in,
              tokens_out, cost, call_sig)  # fmt: skip
    read_back = engine_step(step.seq, step.kind, source_id, parent_id, tool, args, result, status,
                            batch_id, text, started_at, ended_at, tokens_in, tokens_out, cost)  # fmt: skip
    return values, read_back


def _json_text(value) -> str | None:
    """Return JSON text for a jsonb column; None (SQL NULL, as Django stores it) for None."""
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # ints over 64 bits, odd types: the standard library's way
        return json.dumps(value, default=str)


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[tuple]) -> None:
    """Insert rows with one COPY on the default connection (inside the caller's transaction)."""
    rows = iter(rows)
    first = next(rows, None)
    if first is None:
        return
    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        copy.write_row(first)
        for row in rows:
            copy.write_row(row)


def _when(epoch: float | None) -> datetime | None:
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _int_or_none(value) -> int | None:
    if value is None:
        return None
    try:
        return max(-(2**31), min(int(value), 2**31 - 1))
    except (TypeError, ValueError):
        return None


def _float_or_none(value) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _text_safe(text: str) -> str:
    # PostgreSQL text cannot hold NUL characters.
    return text.replace("\x00", "\ufffd")


def _json_safe(value):
    """Return value with NUL characters replaced (jsonb refuses \\u0000)."""
    if isinstance(value, str):
        return _text_safe(value)
    if isinstance(value, dict):
        return {_text_safe(str(k)): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw), raw


def _as_stored(value):
    """Return value as a jsonb column gives it back: NUL characters replaced (jsonb refuses
    \\u0000), non-finite floats as text, object keys in jsonb's order (shorter first)."""
    if isinstance(value, str):
        return _text_safe(value)
    if isinstance(value, dict):
        items = [(_text_safe(str(k)), _as_stored(v)) for k, v in value.items()]
        if len(items) > 1:
            items.sort(key=lambda item: _jsonb_key(item[0]))
        return dict(items)
    if isinstance(value, list | tuple):
        return [_as_stored(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


def requeue_stale(*, older_than: timedelta | None = None) -> tuple[int, int]:
    """Queue again the traces and runs that a dead worker left unfinished, and the OTLP span
    groups left unassembled past the quiet period (a lost countdown task must not strand
    spans; the assembly still waits for trace ids that are not quiet yet).

    Returns (traces, runs) queued. With older_than=None the configured ages are used
    (LOOPBOARD_STALE_SECONDS; the OTLP quiet period for span groups).
    """
    from . import otlp_ingest, tasks

    stranded = otlp_ingest.assemble_stranded(older_than=older_than)
    if stranded:
        log.info("queued the assembly of %d stranded OTLP trace id(s)", stranded)
    if older_than is None:
        older_than = timedelta(seconds=settings.LOOPBOARD_STALE_SECONDS)
    cutoff = timezone.now() - older_than
    trace_ids = list(
        Trace.objects.filter(
            status__in=[Trace.Status.RECEIVED, Trace.Status.PARSING], updated_at__lte=cutoff
        ).values_list("pk", flat=True)
    )
    run_ids = list(
        Run.objects.filter(verdict=Verdict.PENDING, created_at__lte=cutoff).values_list(
            "pk", flat=True
        )
    )
    for trace_id in trace_ids:
        tasks.ingest_trace.delay(trace_id)
    for run_id in run_ids:
        tasks.analyze_run.delay(run_id)
    return len(trace_ids), len(run_ids)
