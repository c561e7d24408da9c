"""Services: a stored run -> the detection engine -> stored findings and verdict."""

from __future__ import annotations

from collections.abc import Iterator

from django.db import transaction
from django.utils import timezone

import detection

from .models import Finding, Run, Step, Trace, Verdict

STEP_FIELDS = (
    "seq",
    "kind",
    "source_id",
    "parent_id",
    "tool",
    "args",
    "result",
    "status",
    "batch_id",
    "text",
    "started_at",
    "ended_at",
    "tokens_in",
    "tokens_out",
    "cost",
)


def iter_steps(run_id: int) -> Iterator[detection.Step]:
    """Yield a stored run's steps as the engine's steps, in order, without model instances."""
    rows = (
        Step.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list(*STEP_FIELDS)
        .iterator(chunk_size=5000)
    )
    for (
        seq,
        kind,
        source_id,
        parent_id,
        tool,
        args,
        result,
        status,
        batch_id,
        text,
        started_at,
        ended_at,
        tokens_in,
        tokens_out,
        cost,
    ) in rows:
        yield detection.Step(
            seq=seq,
            kind=kind,
            id=source_id or None,
            parent_id=parent_id or None,
            tool=tool or None,
            args=args,
            result=result,
            status=status,
            batch_id=batch_id or None,
            text=text or None,
            started_at=started_at.timestamp() if started_at else None,
            ended_at=ended_at.timestamp() if ended_at else None,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost=cost,
        )


def analyze_run(run_id: int, policy: detection.Policy | None = None) -> Run | None:
    """Run the engine over one stored run and replace its findings and summary."""
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        return None  # deleted meanwhile
    if policy is None:
        policy = run.project.policy()
    result = detection.analyze(iter_steps(run.pk), policy)
    with transaction.atomic():
        run.findings.all().delete()
        Finding.objects.bulk_create(finding_row(run, finding) for finding in result.findings)
        waste = result.waste
        run.verdict = result.verdict
        run.stall_score = round(result.stall_score, 4)
        run.waste_steps = waste.steps if waste else 0
        run.waste_tokens = waste.tokens if waste else None
        run.waste_cost = waste.cost if waste else None
        run.waste_seconds = waste.seconds if waste else None
        run.detectors = sorted(
            {f.detector for f in result.findings if f.severity != Finding.Severity.INFO}
        )
        run.summary = {
            "stall_series": [list(point) for point in result.stall_series],
            "repeat_seqs": sorted(
                {seq for f in result.findings if f.severity != "info" for seq in f.seqs}
            )[:2000],
        }
        run.analyzed_at = timezone.now()
        run.save(
            update_fields=[
                "verdict",
                "stall_score",
                "waste_steps",
                "waste_tokens",
                "waste_cost",
                "waste_seconds",
                "detectors",
                "summary",
                "analyzed_at",
            ]
        )
        if run.trace_id:
            finish_trace(run.trace_id)
    return run


def finish_trace(trace_id: int) -> None:
    """Mark a trace analyzed once none of its runs waits for analysis."""
    (
        Trace.objects.filter(pk=trace_id, status=Trace.Status.ANALYZING)
        .exclude(runs__verdict=Verdict.PENDING)
        .update(status=Trace.Status.ANALYZED, updated_at=timezone.now())
    )


def finding_row(run: Run, finding: detection.Finding) -> Finding:
    """Return the unsaved row for one engine finding."""
    waste = finding.waste
    return Finding(
        run=run,
        detector=finding.detector,
        severity=finding.severity,
        tool=(finding.tool or "")[:200],
        signature=(finding.signature or "")[:200],
        seqs=list(finding.seqs)[:5000],
        count=finding.count,
        threshold=finding.threshold or 0,
        fired_at=finding.fired_at or 0,
        rule=(finding.rule or "")[:255],
        message=finding.message,
        waste_steps=waste.steps if waste else 0,
        waste_tokens=waste.tokens if waste else None,
        waste_cost=waste.cost if waste else None,
        waste_seconds=waste.seconds if waste else None,
    )


def reanalyze(runs) -> int:
    """Queue analysis of the given runs (a queryset); return how many were queued."""
    from . import tasks

    ids = list(runs.values_list("pk", flat=True))
    for run_id in ids:
        transaction.on_commit(lambda run_id=run_id: tasks.analyze_run.delay(run_id))
    return len(ids)
