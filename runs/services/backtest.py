"""Back-tests: what a draft policy would change over a range of stored runs, in the worker.

`start` freezes the snapshot in a BacktestJob row (the draft, validated, and the saved policy
with its version) and queues the job; editing the policy afterwards changes nothing about
it. `run_job` is the task body. It claims the row with a conditional UPDATE (a second copy
of the task exits at once), re-runs the engine over the runs of the range in id order with
both frozen policies (once for a run that no changed tool row applies to), and every
PROGRESS_SECONDS writes its progress and the results so far (`Tally`, with the last run id
done) with a conditional UPDATE that also reads `cancel_requested`. A worker that dies leaves a running job whose heartbeat goes stale:
`requeue_stale` (called by recovery) queues it again, the next claim resumes after the
cursor, and the old worker, should it come back, loses its next write (`attempt` moved on).

The range is `since <= created_at < until`, runs still pending or live left out; `sample`
takes N of them, the same N for the same range every time (ordered by md5 of the id).
Precision and recall use the labels of the runs examined (`labels.score`); the issues that
would appear or vanish compare the loop fingerprints (`fingerprints`) that reach warn.

`nightly` creates one job per project and night that runs the saved policy over the last
NIGHTLY_DAYS days, for the trend on the Tuning page.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from fnmatch import fnmatchcase

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Func, Max, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from psycopg.types.json import Jsonb

import detection
from detection import fingerprints

from ..models import BacktestJob, LoopIssue, Project, Run, Step, Verdict
from . import labels, policy, queue, storage

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 1.0  # how often a running job writes its progress (and reads cancel)
CHUNK_RUNS = 200  # runs whose steps are read with one query
CHUNK_STEPS = 50_000  # ... unless they hold more steps than this together
LISTED = 200  # changed runs kept per kind (the counts are exact)
MESSAGE_CHARS = 200
NIGHTLY_DAYS = 7
TOOLS_KEPT = 200  # Run.tools holds at most this many names (ingest)
FLAGGED = (Verdict.WARN, Verdict.STOP)
KINDS = ("flagged", "cleared", "changed")
SCORED = ("tp", "fp", "fn", "tn")


def start(
    project: Project,
    user,
    draft_policy: dict,
    since: datetime,
    until: datetime,
    sample: int | None = None,
    *,
    kind: str = BacktestJob.Kind.MANUAL,
    night: date | None = None,
) -> BacktestJob:
    """Create a back-test of `draft_policy` against the saved policy and queue it on commit.

    Raises ValueError when the draft is invalid (policy.validate says why), the range is
    empty or the sample is not a positive number.
    """
    draft = policy.validate(draft_policy)
    if since >= until:
        raise ValueError("the range must end after it starts")
    if sample is not None and sample < 1:
        raise ValueError("the sample must be at least 1 run")
    with transaction.atomic():
        job = BacktestJob.objects.create(
            project=project,
            user=user,
            kind=kind,
            draft=draft,
            baseline=_canonical(policy.current(project)),
            policy_version=policy.current_version(project),
            since=since,
            until=until,
            sample=sample,
            night=night,
        )
        queue.queue_backtest(job.pk)
    return job


def cancel(job: BacktestJob) -> BacktestJob:
    """Ask a job to stop: a queued one is cancelled at once, a running one at its next write.

    The results so far are kept. Cancelling a finished job changes nothing.
    """
    now = timezone.now()
    BacktestJob.objects.filter(pk=job.pk, status=BacktestJob.Status.QUEUED).update(
        status=BacktestJob.Status.CANCELLED, cancel_requested=True, finished_at=now
    )
    BacktestJob.objects.filter(pk=job.pk, status=BacktestJob.Status.RUNNING).update(
        cancel_requested=True
    )
    job.refresh_from_db()
    return job


# ---- the job ----------------------------------------------------------------------------------


def run_job(job_id: int) -> BacktestJob | None:
    """Claim the job and run it to its end (done, cancelled or failed); the task body.

    Returns None when the job is not there to claim: finished, cancelled, or held by
    another worker whose heartbeat is fresh. A lost database is raised (the task retries,
    and recovery requeues the job once its heartbeat is stale); any other error fails the
    job with the reason.
    """
    attempt = _claim(job_id)
    if attempt is None:
        return None
    job = BacktestJob.objects.select_related("project").get(pk=job_id)
    try:
        _walk(job, attempt)
    except OperationalError:
        raise
    except Exception as exc:
        log.exception("back-test %s failed", job_id)
        BacktestJob.objects.filter(
            pk=job_id, attempt=attempt, status=BacktestJob.Status.RUNNING
        ).update(
            status=BacktestJob.Status.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
        )
    job.refresh_from_db()
    start_next(job.project_id)  # its slot is free: the next in line goes
    return job


CLAIM = f"""
    UPDATE {BacktestJob._meta.db_table}
    SET status = 'running', attempt = attempt + 1, heartbeat_at = now(),
        started_at = COALESCE(started_at, now())
    WHERE id = %s AND NOT cancel_requested
      AND (status = 'queued' OR (status = 'running' AND heartbeat_at < %s))
    RETURNING attempt
"""


def _untouched(run: Run, patterns: set[str] | None) -> bool:
    """Whether the draft leaves this run as the saved policy does (no changed row applies)."""
    if patterns is None or len(run.tools) >= TOOLS_KEPT:
        return False  # the defaults changed, or the run's list of tools may be cut short
    return not any(fnmatchcase(tool, p) for tool in run.tools for p in patterns)


BACKTEST_LOCK = 0x6C62_6274  # advisory lock class id ("lbbt") of a project's back-test slots


def _claim(job_id: int) -> int | None:
    """Take the job (queued, or running with a stale heartbeat) if its project has a free
    slot and no job queued before it waits; return this claim's attempt, else None.

    At most LOOPBOARD_BACKTESTS_PER_PROJECT jobs of a project run at once. The claims of
    one project take a transaction-level advisory lock first, so two workers claiming at
    the same moment count one after the other and never pass the limit together. A job
    refused stays queued: the job that frees a slot queues the next in line (`start_next`),
    and the recovery sweep queues whatever waits too long.
    """
    stale = timezone.now() - timedelta(seconds=settings.LOOPBOARD_STALE_SECONDS)
    project_id = BacktestJob.objects.filter(pk=job_id).values_list("project_id", flat=True).first()
    if project_id is None:
        return None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [BACKTEST_LOCK, project_id])
        free = _free_slots(project_id, stale, but=job_id)
        ahead = _ahead(project_id, job_id)
        if free <= 0 or ahead >= free:
            refused = True
        else:
            cursor.execute(CLAIM, [job_id, stale])
            row = cursor.fetchone()
            refused = False
    if refused:
        if free > 0:  # free slots, and older jobs waiting for them: those first
            start_next(project_id)
        return None
    return row[0] if row else None


def _running(project_id: int, stale: datetime) -> QuerySet[BacktestJob]:
    """The project's jobs that hold a slot: running, their worker's heartbeat fresh."""
    return BacktestJob.objects.filter(
        project_id=project_id, status=BacktestJob.Status.RUNNING, heartbeat_at__gt=stale
    )


def _free_slots(project_id: int, stale: datetime, *, but: int | None = None) -> int:
    """How many more of the project's jobs may start now (`but` a job not counted)."""
    running = _running(project_id, stale).exclude(pk=but).count()
    return settings.LOOPBOARD_BACKTESTS_PER_PROJECT - running


def _waiting(project_id: int) -> QuerySet[BacktestJob]:
    """The project's queued jobs, in line: the oldest first."""
    return BacktestJob.objects.filter(
        project_id=project_id, status=BacktestJob.Status.QUEUED, cancel_requested=False
    ).order_by("created_at", "pk")


def _ahead(project_id: int, job_id: int) -> int:
    """How many of the project's queued jobs are in line before this one."""
    job = BacktestJob.objects.filter(pk=job_id).values("created_at").first()
    if job is None:
        return 0
    earlier = Q(created_at__lt=job["created_at"]) | Q(created_at=job["created_at"], pk__lt=job_id)
    return _waiting(project_id).filter(earlier).count()


def start_next(project_id: int) -> int:
    """Queue the project's next jobs in line, as many as it has free slots; return how many.

    A job queued twice runs once (its claim is a conditional UPDATE)."""
    stale = timezone.now() - timedelta(seconds=settings.LOOPBOARD_STALE_SECONDS)
    free = _free_slots(project_id, stale)
    job_ids = list(_waiting(project_id).values_list("pk", flat=True)[: max(free, 0)])
    for job_id in job_ids:
        queue.queue_backtest(job_id)
    return len(job_ids)


def place_in_line(job: BacktestJob) -> int | None:
    """Return a queued job's place among its project's queued jobs (1: the next to start),
    or None when it is not waiting."""
    if job.status != BacktestJob.Status.QUEUED or job.cancel_requested:
        return None
    return _ahead(job.project_id, job.pk) + 1


def _walk(job: BacktestJob, attempt: int) -> None:
    baseline, warning = _engine_policy(job.baseline)
    draft = detection.Policy.from_dict(job.draft)
    # The tool rows the draft changes: a run with none of their tools is analyzed once.
    patterns = None if warning else policy.changed_patterns(job.baseline, job.draft)
    tally = Tally.load(job.results)
    if not tally.upto:  # the first claim fixes the runs: later uploads are not counted
        tally.upto = Run.objects.aggregate(last=Max("id"))["last"] or 0
        tally.warning = warning
    sizes = dict(selected_runs(job, tally.upto).values_list("pk", "step_count"))
    run_ids = sorted(sizes)
    total = len(run_ids)
    done = sum(1 for run_id in run_ids if run_id <= job.cursor)
    judged = labels.labels_for_runs(run_ids)
    cursor, last_write = job.cursor, time.monotonic()
    if not _progress(job.pk, attempt, done, total, cursor, tally):
        _stop(job.pk, attempt, tally, done, total, cursor)
        return
    for run, steps in _load([i for i in run_ids if i > job.cursor], sizes):
        current = detection.analyze(steps, baseline)
        proposed = current if _untouched(run, patterns) else detection.analyze(steps, draft)
        tally.add(run, steps, current, proposed, judged.get(run.pk, ()))
        done, cursor = done + 1, run.pk
        if time.monotonic() - last_write >= PROGRESS_SECONDS:
            last_write = time.monotonic()
            if not _progress(job.pk, attempt, done, total, cursor, tally):
                _stop(job.pk, attempt, tally, done, total, cursor)
                return
    BacktestJob.objects.filter(
        pk=job.pk, attempt=attempt, status=BacktestJob.Status.RUNNING
    ).update(
        status=BacktestJob.Status.DONE, done=done, total=total, cursor=cursor,
        results=tally.dump(), finished_at=timezone.now(), heartbeat_at=timezone.now(),
    )  # fmt: skip


PROGRESS = f"""
    UPDATE {BacktestJob._meta.db_table}
    SET done = %s, total = %s, cursor = %s, results = %s, heartbeat_at = now()
    WHERE id = %s AND attempt = %s AND status = 'running'
    RETURNING cancel_requested
"""


def _progress(job_id: int, attempt: int, done: int, total: int, cursor: int, tally) -> bool:
    """Write the progress; return False when the job must stop (cancelled, or taken over)."""
    with connection.cursor() as c:
        c.execute(PROGRESS, [done, total, cursor, Jsonb(tally.dump()), job_id, attempt])
        row = c.fetchone()
    return row is not None and not row[0]


def _stop(job_id: int, attempt: int, tally, done: int, total: int, cursor: int) -> None:
    """End a job asked to cancel (its results so far kept); a job taken over is left alone."""
    BacktestJob.objects.filter(
        pk=job_id, attempt=attempt, status=BacktestJob.Status.RUNNING, cancel_requested=True
    ).update(
        status=BacktestJob.Status.CANCELLED, done=done, total=total, cursor=cursor,
        results=tally.dump(), finished_at=timezone.now(),
    )  # fmt: skip


def _canonical(saved: dict) -> dict:
    """The saved policy as validate shapes it; as stored when it is invalid (see _walk)."""
    try:
        return policy.validate(saved)
    except ValueError:
        return saved


def _engine_policy(data: dict) -> tuple[detection.Policy, str]:
    try:
        return detection.Policy.from_dict(data), ""
    except ValueError as exc:
        return detection.Policy(), f"the saved policy is invalid ({exc}); the defaults were used"


def selected_runs(job: BacktestJob, upto: int) -> QuerySet[Run]:
    """Return the runs a job examines: its range (and sample) among runs up to id `upto`."""
    runs = (
        Run.objects.filter(
            project_id=job.project_id,
            created_at__gte=job.since,
            created_at__lt=job.until,
            live=False,
            pk__lte=upto,
            steps_expired_at=None,  # nothing to run the engine over
        )
        .exclude(verdict=Verdict.PENDING)
        .order_by("pk")
    )
    if job.sample:
        digest = Func(Cast("pk", TextField()), function="md5", output_field=TextField())
        sampled = runs.annotate(digest=digest).order_by("digest").values("pk")[: job.sample]
        runs = Run.objects.filter(pk__in=sampled).order_by("pk")
    return runs


def _load(run_ids: list[int], sizes: dict[int, int]) -> Iterator[tuple[Run, list[detection.Step]]]:
    """Yield each run with its steps, in id order, reading the steps of many runs at once
    (`sizes`: the runs' step counts, which cut the chunks)."""
    for chunk in _chunks(run_ids, sizes):
        runs = Run.objects.filter(pk__in=chunk).only("id", "name", "verdict", "tools")
        by_id = {run.pk: run for run in runs}
        rows = (
            Step.objects.filter(run_id__in=chunk)
            .order_by("run_id", "seq")
            .values_list("run_id", *storage.STEP_FIELDS)
            .iterator(chunk_size=5000)
        )
        steps = {
            run_id: [storage.engine_step(*row[1:]) for row in group]
            for run_id, group in itertools.groupby(rows, key=lambda row: row[0])
        }
        for run_id in chunk:
            if run_id in by_id:  # deleted meanwhile
                yield by_id[run_id], steps.get(run_id, [])


def _chunks(run_ids: list[int], sizes: dict[int, int]) -> Iterator[list[int]]:
    chunk: list[int] = []
    steps = 0
    for run_id in run_ids:
        size = sizes.get(run_id, 0)
        if chunk and (len(chunk) >= CHUNK_RUNS or steps + size > CHUNK_STEPS):
            yield chunk
            chunk, steps = [], 0
        chunk.append(run_id)
        steps += size
    if chunk:
        yield chunk


# ---- the results ------------------------------------------------------------------------------


@dataclass
class Tally:
    """A job's results so far, as stored in `BacktestJob.results` (a JSON object).

    `changes` keeps up to LISTED runs per kind (flagged, cleared, changed severity), each
    {"run", "name", "before", "after", "why"}; `counts` counts them all. `score` holds
    tp/fp/fn of the current and the draft policy against the `labels` of the runs examined.
    `issues` maps a loop fingerprint to its title and the runs it flags under each policy.
    """

    examined: int = 0
    flagged_current: int = 0
    flagged_draft: int = 0
    counts: dict = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    changes: dict = field(default_factory=lambda: {kind: [] for kind in KINDS})
    labels: int = 0
    score: dict = field(
        default_factory=lambda: {side: dict.fromkeys(SCORED, 0) for side in ("current", "draft")}
    )
    issues: dict = field(default_factory=dict)
    upto: int = 0  # the last run id when the job began
    warning: str = ""

    @classmethod
    def load(cls, data: dict) -> Tally:
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def dump(self) -> dict:
        return asdict(self)

    def add(
        self,
        run: Run,
        steps: list[detection.Step],
        current: detection.Analysis,
        draft: detection.Analysis,
        judged: Iterable,
    ) -> None:
        """Count one run examined under both policies."""
        self.examined += 1
        self.flagged_current += current.verdict in FLAGGED
        self.flagged_draft += draft.verdict in FLAGGED
        if current.verdict != draft.verdict:
            kind = change_kind(current.verdict, draft.verdict)
            self.counts[kind] += 1
            if len(self.changes[kind]) < LISTED:
                shown = current if kind == "cleared" else draft
                why = next((f.message for f in shown.findings if f.severity != "info"), "")
                self.changes[kind].append(
                    {"run": run.pk, "name": run.name[:120], "before": current.verdict,
                     "after": draft.verdict, "why": why[:MESSAGE_CHARS]}
                )  # fmt: skip
        # A run the draft leaves alone (`draft is current`) is scored and fingerprinted once.
        if draft is current:
            analyses = [(("current", "draft"), current)]
        else:
            analyses = [(("current",), current), (("draft",), draft)]
        judged = list(judged)
        self.labels += len(judged)
        if judged:
            for names, analysis in analyses:
                got = labels.score(((run.pk, f) for f in analysis.findings), judged)
                for side, key in itertools.product(names, SCORED):
                    self.score[side][key] += getattr(got, key)
        by_seq: dict[int, detection.Step] | None = None  # seq -> step, at the first finding
        for names, analysis in analyses:
            seen = set()
            for finding in analysis.findings:
                if finding.severity == "info":
                    continue
                if by_seq is None:
                    by_seq = {step.seq: step for step in steps}
                key = fingerprints.fingerprint(finding, by_seq)
                if key in seen:
                    continue
                seen.add(key)
                entry = self.issues.setdefault(
                    key, {"title": fingerprints.describe(finding, by_seq), "current": 0, "draft": 0}
                )
                for side in names:
                    entry[side] += 1

    def precision_recall(self, side: str) -> labels.Score:
        s = self.score[side]
        return labels.Score.of(s["tp"], s["fp"], s["fn"], s["tn"])

    def issue_changes(self) -> tuple[list[dict], list[dict]]:
        """Return the issues that would appear (draft only) and vanish (current only)."""
        appear = [
            {"fingerprint": k, **v}
            for k, v in self.issues.items()
            if v["draft"] and not v["current"]
        ]
        vanish = [
            {"fingerprint": k, **v}
            for k, v in self.issues.items()
            if v["current"] and not v["draft"]
        ]
        return (
            sorted(appear, key=lambda i: -i["draft"]),
            sorted(vanish, key=lambda i: -i["current"]),
        )


def with_issues(project_id: int, entries: list[dict]) -> list[dict]:
    """Add the project's loop issue (its page and state) to the entries it already tracks."""
    known = LoopIssue.objects.filter(
        project_id=project_id, fingerprint__in=[e["fingerprint"] for e in entries]
    ).only("id", "fingerprint", "state", "title")
    by_fingerprint = {issue.fingerprint: issue for issue in known}
    for entry in entries:
        entry["issue"] = by_fingerprint.get(entry["fingerprint"])
    return entries


def change_kind(before: str, after: str) -> str:
    """Return how a verdict changed: newly flagged, cleared, or changed severity."""
    if before not in FLAGGED and after in FLAGGED:
        return "flagged"
    if before in FLAGGED and after not in FLAGGED:
        return "cleared"
    return "changed"


# ---- recovery and the nightly job -------------------------------------------------------------


def requeue_stale(older_than: timedelta) -> int:
    """Queue again the jobs left queued (a lost message) or running with a stale heartbeat.

    A job whose worker died after Cancel was pressed is cancelled here (its results so far,
    as last written, kept): no worker would claim it again.
    """
    cutoff = timezone.now() - older_than
    stale = BacktestJob.objects.filter(status=BacktestJob.Status.RUNNING, heartbeat_at__lte=cutoff)
    stale.filter(cancel_requested=True).update(
        status=BacktestJob.Status.CANCELLED, finished_at=timezone.now()
    )
    job_ids = list(
        BacktestJob.objects.filter(
            Q(status=BacktestJob.Status.QUEUED, created_at__lte=cutoff)
            | Q(status=BacktestJob.Status.RUNNING, heartbeat_at__lte=cutoff)
        ).values_list("pk", flat=True)
    )
    for job_id in job_ids:
        queue.queue_backtest(job_id)
    return len(job_ids)


def nightly(now: datetime | None = None) -> list[BacktestJob]:
    """Create and queue tonight's back-test of the saved policy for every project.

    One job per project and night (a unique constraint): running this twice creates none
    the second time. A project whose saved policy is invalid is skipped, with a log line.
    """
    now = now or timezone.now()
    night = timezone.localdate(now)
    jobs = []
    for project in Project.objects.all():
        saved = policy.current(project)
        try:
            with transaction.atomic():
                jobs.append(
                    start(project, None, saved, now - timedelta(days=NIGHTLY_DAYS), now,
                          kind=BacktestJob.Kind.NIGHTLY, night=night)
                )  # fmt: skip
        except IntegrityError:
            continue  # tonight's job exists
        except ValueError as exc:
            log.warning("no nightly back-test for %s: %s", project.slug, exc)
    return jobs


def trend(project: Project, nights: int = 14) -> list[BacktestJob]:
    """Return the project's last finished nightly back-tests, oldest first."""
    jobs = project.backtests.filter(
        kind=BacktestJob.Kind.NIGHTLY, status=BacktestJob.Status.DONE
    ).order_by("-night")[:nights]
    return list(reversed(jobs))


def latest(project: Project) -> BacktestJob | None:
    """Return the project's most recent manual back-test."""
    return project.backtests.filter(kind=BacktestJob.Kind.MANUAL).first()
