"""A stored run -> the detection engine -> stored findings and verdict."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.postgres.search import SearchVector
from django.db import connection, transaction
from django.db.models import QuerySet, Value
from django.utils import timezone
from psycopg.types.json import Jsonb

import detection

from ..models import Finding, LedgerRow, Run, Step, Trace, Verdict
from . import issues, labels, queue, storage, summary
from .policy import engine_policy_or_default

MAX_TURNS = 2000
SEARCH_ARGS_CHARS = 200  # of each distinct argument object
SEARCH_TEXT_CHARS = 8000  # per run: bounds the tsvector at 100k steps
NON_WORD = re.compile(r"[\W_]+")  # file names are one token to the parser: split them
FINDINGS_INSERTED = 500  # finding rows per INSERT (each carries up to 5,000 seqs)


def analyze_run(
    run_id: int,
    policy: detection.Policy | None = None,
    steps: Iterable[detection.Step] | None = None,
) -> Run | None:
    """Run the engine over one stored run and replace its findings and summary.

    `steps`, when given, are the run's steps as stored (see `ingest.store_runs`): they are
    analyzed without reading them back.
    """
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        return None  # deleted meanwhile
    if policy is None:
        policy, _warning = engine_policy_or_default(run.project)
    analyze_runs([(run, storage.iter_steps(run.pk) if steps is None else steps)], policy)
    return run


def analyze_runs(
    items: Iterable[tuple[Run, Iterable[detection.Step]]],
    policy: detection.Policy,
    *,
    finish_traces: bool = True,
) -> list[Run]:
    """Analyze stored runs (each with its steps) and write their findings, ledgers and
    summaries; see `write`."""
    return write(prepare(items, policy), finish_traces=finish_traces)


@dataclass(slots=True)
class Analyzed:
    """One run's analysis, its summary columns already set on `run` (not yet written)."""

    run: Run
    result: detection.Analysis
    seen: StepSample
    search_text: str


def prepare(
    items: Iterable[tuple[Run, Iterable[detection.Step]]], policy: detection.Policy
) -> list[Analyzed]:
    """Run the engine over each run's steps and set the run's summary columns in memory (the
    run need not be saved yet: `ingest.store_runs` inserts new runs already summarized)."""
    now = timezone.now()
    out = []
    for run, steps in items:
        seen = StepSample()
        result = detection.analyze(seen.watch(steps), policy)
        _summarize(run, result, seen, now)
        out.append(
            Analyzed(
                run,
                result,
                seen,
                storage.clean_text(f"{NON_WORD.sub(' ', run.name)} {seen.search_text()}"),
            )
        )
    return out


def search_vector(item: Analyzed) -> SearchVector:
    """The expression that writes a run's search column (for an INSERT)."""
    return SearchVector(Value(item.search_text), config="simple")


def write(
    analyzed: list[Analyzed], *, inserted: Iterable[int] = (), finish_traces: bool = True
) -> list[Run]:
    """Write analyses: replace the findings and ledgers, and the summary columns of the runs
    not just `inserted` with them (see `ingest.store_runs`). The one place analysis results
    are written, a few statements for all the runs together, in one transaction. With
    finish_traces, the traces of the runs are marked analyzed once none of their runs waits.

    The runs' rows are locked first, so two analyses of one run (a task run twice) write
    one after the other and never double a finding; a run deleted meanwhile is skipped.
    """
    if not analyzed:
        return []
    inserted = set(inserted)
    with transaction.atomic():
        wanted = sorted(a.run.pk for a in analyzed if a.run.pk not in inserted)
        alive = set(
            Run.objects.select_for_update()
            .filter(pk__in=wanted)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        analyzed = [a for a in analyzed if a.run.pk in inserted or a.run.pk in alive]
        existing = sorted(alive)
        if existing:
            Finding.objects.filter(run_id__in=existing).delete()
            LedgerRow.objects.filter(run_id__in=existing).delete()
        found = (
            finding_row(a.run, finding, index)
            for a in analyzed
            for index, finding in enumerate(a.result.findings)
        )
        for rows in itertools.batched(found, FINDINGS_INSERTED):  # a long run has many loops
            Finding.objects.bulk_create(rows)
        labels.reattach(existing)  # labels of the rewritten findings find their new rows
        # Loop issues: the findings grouped by fingerprint (a re-analyzed run's old share is
        # taken away from its IssueRun rows). It returns the issues just new or back
        # (IssueEvent), for alerts to take up.
        events = issues.group_runs([a.run for a in analyzed])
        queue.queue_alerts([a.run.pk for a in analyzed if a.run.is_flagged], events)
        storage.copy_rows(
            LedgerRow._meta.db_table,
            LEDGER_COLUMNS,
            (row for a in analyzed for row in ledger_values(a.run.pk, a.result.ledger)),
        )
        updates = [
            (a.run.verdict, a.run.stall_score, a.run.waste_steps, a.run.waste_tokens,
             a.run.waste_cost, a.run.waste_seconds, a.run.detectors, Jsonb(a.run.summary),
             a.run.analyzed_at, a.search_text, a.run.pk)
            for a in analyzed
            if a.run.pk not in inserted
        ]  # fmt: skip
        if updates:
            with connection.cursor() as cursor:
                cursor.executemany(RUN_UPDATE, updates)
        if finish_traces:
            for trace_id in sorted({a.run.trace_id for a in analyzed if a.run.trace_id}):
                finish_trace(trace_id)
    return [a.run for a in analyzed]


# The search column is what SearchVector(Value(text), config="simple") would write.
RUN_UPDATE = f"""
    UPDATE {Run._meta.db_table} SET verdict = %s, stall_score = %s, waste_steps = %s,
        waste_tokens = %s, waste_cost = %s, waste_seconds = %s, detectors = %s::varchar(40)[],
        summary = %s, analyzed_at = %s,
        search = to_tsvector('simple'::regconfig, COALESCE(%s, ''))
    WHERE id = %s
"""
LEDGER_COLUMNS = ("run_id", "seq", "tool", "repeat_of", "count")


def _summarize(run: Run, result: detection.Analysis, seen: StepSample, now: datetime) -> None:
    """Set the run's summary columns from one analysis (not saved)."""
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
    run.summary = storage.as_stored(summary.build(result, seen.turns, run.step_count).to_json())
    run.analyzed_at = now


def finish_trace(trace_id: int) -> None:
    """Mark a trace analyzed once none of its runs waits for analysis (in a transaction).

    The runs of one trace are analyzed in parallel. Each finishing transaction first locks
    the trace row, so the last one to finish waits for the others to commit and then sees
    all their verdicts: under READ COMMITTED a check without the lock could see another
    run still pending, in every transaction, and leave the trace analyzing for ever.
    """
    locked = Trace.objects.select_for_update().filter(pk=trace_id, status=Trace.Status.ANALYZING)
    if not locked.exists():
        return
    if not Run.objects.filter(trace_id=trace_id, verdict=Verdict.PENDING).exists():
        Trace.objects.filter(pk=trace_id).update(
            status=Trace.Status.ANALYZED, updated_at=timezone.now()
        )


def finding_row(run: Run, finding: detection.Finding, index: int | None = None) -> Finding:
    """Return the unsaved row for one engine finding (the run's index-th, when known)."""
    waste = finding.waste
    return Finding(
        run=run,
        detector=finding.detector,
        severity=finding.severity,
        tool=storage.clean_text((finding.tool or "")[:200]),
        signature=storage.clean_text((finding.signature or "")[:200]),
        seqs=list(finding.seqs)[:5000],
        count=finding.count,
        threshold=finding.threshold or 0,
        fired_at=finding.fired_at or 0,
        stop_at=finding.stop_at,
        started_at=finding.started_at,
        rule=storage.clean_text((finding.rule or "")[:255]),
        message=storage.clean_text(finding.message),
        waste_steps=waste.steps if waste else 0,
        waste_tokens=waste.tokens if waste else None,
        waste_cost=waste.cost if waste else None,
        waste_seconds=waste.seconds if waste else None,
        loop=finding.loop,
        lead=finding.loop < 0 or index is None or finding.loop == index,
    )


# One analysis task takes at most this many runs, or this many steps (and at least one run):
# a file of 20,000 runs is a chain of batches, and another upload waits for one batch at most.
BATCH_RUNS = 500
BATCH_STEPS = 50_000
#: A run of more steps than this is read one chunk at a time as the engine goes (a cursor), not
#: with the rest of its batch: a long run is analyzed in the memory of its distinct calls.
STREAM_STEPS = 5_000


def analyze_batch(run_ids: list[int], *, again: bool = False) -> list[int]:
    """Analyze the first runs of `run_ids` (a batch: BATCH_RUNS runs or BATCH_STEPS steps) in
    one transaction that also queues the rest as the next batch; return the ids analyzed.

    The batch's run rows are locked first and analyzed under the lock, so a killed worker
    leaves its whole batch as it was (the redelivered message or the recovery sweep analyzes
    it again) and never half of it. New runs (again=False) are analyzed only while pending,
    skipping those another worker holds: a message delivered twice analyzes each run once.
    A re-analysis (again=True, a policy change) waits for the locks and rewrites whatever it
    finds. Runs deleted meanwhile, or whose steps retention took, are left out.
    """
    head, rest = _split_batch(run_ids)
    with transaction.atomic():
        locked = Run.objects.select_for_update(skip_locked=not again, of=("self",))
        locked = locked.select_related("project").filter(pk__in=head, steps_expired_at=None)
        if not again:
            locked = locked.filter(verdict=Verdict.PENDING)
        runs = list(locked.order_by("pk"))
        policies: dict[int, detection.Policy] = {}
        for run in runs:
            if run.project_id not in policies:
                policies[run.project_id] = engine_policy_or_default(run.project)[0]
        # a run longer than a batch is read as the engine goes (a server-side cursor): a run
        # of any length is analyzed in the memory of its distinct calls, not of its steps
        steps = _steps_of([run.pk for run in runs if run.step_count <= STREAM_STEPS])
        for project_id, policy in policies.items():
            mine = [r for r in runs if r.project_id == project_id]
            write(prepare([(r, _steps_for(r, steps)) for r in mine], policy))
        if rest:
            # the chain's heartbeat: the recovery sweep leaves a trace in progress alone
            traces = {run.trace_id for run in runs if run.trace_id}
            Trace.objects.filter(pk__in=traces, status=Trace.Status.ANALYZING).update(
                updated_at=timezone.now()
            )
            queue.queue_batch(rest, again=again)
    return [run.pk for run in runs]


def _split_batch(run_ids: list[int]) -> tuple[list[int], list[int]]:
    """Split run ids into the next batch and the rest, by BATCH_RUNS and BATCH_STEPS."""
    head = run_ids[:BATCH_RUNS]
    counts = dict(Run.objects.filter(pk__in=head).values_list("pk", "step_count"))
    total = 0
    for index, run_id in enumerate(head):
        total += counts.get(run_id, 0)
        if total > BATCH_STEPS and index > 0:
            return run_ids[:index], run_ids[index:]
    return head, run_ids[len(head) :]


def _steps_for(run: Run, read: dict[int, list[detection.Step]]) -> Iterable[detection.Step]:
    """A run's steps: read with its batch, or, for a long run, one chunk at a time."""
    if run.step_count > STREAM_STEPS:
        return storage.iter_steps(run.pk)
    return read.get(run.pk, ())


def _steps_of(run_ids: list[int]) -> dict[int, list[detection.Step]]:
    """Return the stored steps of these runs, each run's in order, read in one query."""
    out: dict[int, list[detection.Step]] = {}
    if not run_ids:
        return out
    rows = (
        Step.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "seq")
        .values_list("run_id", *storage.STEP_FIELDS)
        .iterator(chunk_size=5000)
    )
    for run_id, *values in rows:
        out.setdefault(run_id, []).append(storage.engine_step(*values))
    return out


def reanalyze(runs: QuerySet[Run], *, bulk: bool = False) -> int:
    """Queue analysis of the given runs once the transaction commits; return how many."""
    ids = list(runs.values_list("pk", flat=True))
    queue.queue_analysis(ids, bulk=bulk)
    return len(ids)


@dataclass
class StepSample:
    """What the pages need from a pass over the steps, gathered while the engine reads them."""

    turns: list[int] = field(default_factory=list)  # seqs of user messages
    tools: set[str] = field(default_factory=set)
    args: list[str] = field(default_factory=list)
    args_chars: int = 0

    def watch(self, steps: Iterable[detection.Step]) -> Iterator[detection.Step]:
        """Yield the steps unchanged, noting turns, tool names and a bounded args sample."""
        for step in steps:
            if step.kind == "user":
                if len(self.turns) < MAX_TURNS:
                    self.turns.append(step.seq)
            elif step.kind == "tool_call" and step.tool:
                self.tools.add(step.tool[:200])
                if self.args_chars < SEARCH_TEXT_CHARS and step.args not in (None, {}, []):
                    text = _args_text(step.args)
                    if text not in self.args:
                        self.args.append(text)
                        self.args_chars += len(text)
            yield step

    def search_text(self) -> str:
        """Return the text the runs list searches: tool names, then the args sample."""
        return " ".join([*sorted(self.tools), *self.args])[: SEARCH_TEXT_CHARS * 2]


def _args_text(args) -> str:
    try:
        text = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(args)
    return text[:SEARCH_ARGS_CHARS]


def ledger_values(run_id: int, ledger: Iterable[detection.LedgerEntry]) -> Iterator[tuple]:
    """Yield the column values (LEDGER_COLUMNS) of the ledger's repeated calls."""
    for entry in ledger:
        row = ledger_row(run_id, entry.seq, entry.tool, entry.repeat_of, entry.count)
        if row is not None:
            yield row


def ledger_row(
    run_id: int, seq: int, tool: str | None, repeat_of: int | None, count: int
) -> tuple | None:
    """Return the LEDGER_COLUMNS values of one call, or None when it repeated nothing."""
    if repeat_of is None or count <= 1:
        return None
    return (run_id, seq, storage.clean_text((tool or "")[:200]), repeat_of, count)
