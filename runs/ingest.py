"""Services: store a received trace, then turn it into runs and steps in the worker."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import detection
from detection import keys
from runs import importers
from runs.importers import TraceError

from .models import Project, Run, Step, Trace, Verdict

log = logging.getLogger(__name__)

STEP_BATCH = 2000


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


def store_run(
    project: Project,
    parsed: detection.Run,
    *,
    trace: Trace | None,
    policy: detection.Policy | None = None,
) -> Run:
    """Insert one parsed run and its steps (the caller's transaction is the unit)."""
    policy = policy or detection.Policy()
    steps = parsed.steps
    times = [t for s in steps for t in (s.started_at, s.ended_at) if t is not None]
    run = Run.objects.create(
        project=project,
        trace=trace,
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
    for batch in _batches(steps, STEP_BATCH):
        Step.objects.bulk_create(step_row(run, step, policy) for step in batch)
    return run


def step_row(run: Run, step: detection.Step, policy: detection.Policy) -> Step:
    """Return the unsaved row for one step of the common model."""
    call_sig = ""
    if step.kind == "tool_call" and step.tool:
        volatile = policy.for_tool(step.tool).volatile  # the same signature the engine uses
        call_sig = keys.call_signature(step.tool, step.args, volatile=volatile)[:80]
    return Step(
        run=run,
        seq=step.seq,
        kind=step.kind,
        source_id=(step.id or "")[:255],
        parent_id=(step.parent_id or "")[:255],
        tool=(step.tool or "")[:200],
        args=_json_safe(step.args),
        result=_json_safe(step.result),
        status=step.status if step.status in ("ok", "error") else "ok",
        batch_id=(step.batch_id or "")[:255],
        text=_text_safe(step.text or ""),
        started_at=_when(step.started_at),
        ended_at=_when(step.ended_at),
        tokens_in=_int_or_none(step.tokens_in),
        tokens_out=_int_or_none(step.tokens_out),
        cost=step.cost,
        call_sig=call_sig,
    )


def _batches(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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


def requeue_stale(*, older_than: timedelta | None = None) -> tuple[int, int]:
    """Queue again the traces and runs that a dead worker left unfinished.

    Returns (traces, runs) queued. With older_than=None the configured age is used.
    """
    from . import tasks

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
