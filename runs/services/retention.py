"""Retention: deleting what a project keeps no longer, in bounded batches.

Each project says how many days it keeps raw trace bytes, steps, and runs with their findings
(`Project.*_retention_days`; None keeps them for ever). `apply` (the beat, hourly) works
through every project in batches, each batch its own short transaction, never one long one:
- raw bytes: a finished trace older than that has `raw` emptied and `raw_expired_at` set (its
  runs stay; its download answers 410 and it is not imported again);
- steps: a run older than that is first marked (`steps_expired_at`, under its row lock, as
  `analysis.write` takes it), then its steps and ledger rows go, BATCH rows per statement.
  A run with a label keeps its steps until the run itself expires: back-tests need them;
- runs: a run older than that loses its steps the same way, then goes with its findings and
  labels through `deletion.delete_runs`, so its loop issues forget it (their counters count
  the runs kept); a trace left without runs goes too.

`sweep_raw_store` (the beat, daily) deletes the objects of an external raw store
(`rawstore.py`) that no trace names, once they are older than SWEEP_AFTER: a rolled-back
upload's, or one whose deletion after a commit was cut short.

The mark comes first and commits before any step is deleted, so an analysis reading the
steps sees either all of them or the mark; `issues.group_runs` refuses a marked run, so a
re-analysis racing the purge rolls back and changes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .. import rawstore
from ..models import Label, LedgerRow, OtlpSpanGroup, Project, Run, Step, Trace
from . import deletion, usage

BATCH = 5000  # rows per DELETE
RUN_BATCH = 200  # runs marked or deleted per transaction
RAW_BATCH = 100  # traces emptied per transaction (their bytes can be large)
LOCK = 0x6C62_7274  # pg advisory lock id ("lbrt"): one purge at a time
# An object no trace names is swept only when older than this (a margin: the lock below is
# what keeps an object that a commit is about to name).
SWEEP_AFTER = timedelta(hours=1)
SWEEP_CHUNK = 50  # objects checked and deleted per lock hold (uploads wait no longer)


def apply(now=None) -> dict[str, int]:
    """Delete what has expired in every project, then measure what each stores (and warn
    near its budget: `usage`); return the counts deleted (raw, steps, runs)."""
    now = now or timezone.now()
    done = {"raw": 0, "steps": 0, "runs": 0}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK])
        if not cursor.fetchone()[0]:
            return done
    try:
        for project in Project.objects.order_by("pk"):
            for kind, count in apply_project(project, now).items():
                done[kind] += count
            usage.warn_if_near_budget(project, usage.measure(project, now))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
    return done


def apply_project(project: Project, now) -> dict[str, int]:
    """Delete what has expired in one project."""
    done = {"raw": 0, "steps": 0, "runs": 0}
    if project.raw_retention_days is not None:
        done["raw"] = expire_raw(project, now - timedelta(days=project.raw_retention_days))
    if project.step_retention_days is not None:
        cutoff = now - timedelta(days=project.step_retention_days)
        labeled = Exists(Label.objects.filter(run=OuterRef("pk")))
        runs = project.runs.filter(created_at__lt=cutoff, live=False).exclude(labeled)
        done["steps"] = expire_steps(runs, now)
    if project.run_retention_days is not None:
        cutoff = now - timedelta(days=project.run_retention_days)
        done["runs"] = expire_runs(project, cutoff, now)
    return done


def expire_raw(project: Project, cutoff) -> int:
    """Empty the raw bytes of the project's finished traces older than cutoff."""
    waiting = OtlpSpanGroup.objects.filter(request=OuterRef("pk"), assembled=False)
    total = 0
    while True:
        with transaction.atomic():
            ids = list(
                project.traces.filter(
                    raw_expired_at=None,
                    created_at__lt=cutoff,
                    status__in=[Trace.Status.ANALYZED, Trace.Status.FAILED],
                )
                .exclude(Exists(waiting))
                .order_by("created_at")
                .values_list("pk", flat=True)[:RAW_BATCH]
            )
            if not ids:
                return total
            # Conditional: a trace re-imported meanwhile (status received) keeps its bytes.
            # The rows are locked first, so the objects forgotten are those of the rows emptied.
            expiring = Trace.objects.select_for_update().filter(
                pk__in=ids, status__in=[Trace.Status.ANALYZED, Trace.Status.FAILED]
            )
            rawstore.forget(expiring.exclude(raw_key="").values_list("raw_key", flat=True))
            total += expiring.update(
                raw=b"", raw_encoding="", raw_key="", raw_external_bytes=0,
                raw_expired_at=timezone.now(),
            )  # fmt: skip


def expire_steps(runs, now) -> int:
    """Mark these runs' steps expired, then delete the steps of every marked run; return
    how many runs were marked."""
    marked = 0
    while True:
        with transaction.atomic():
            ids = list(
                runs.filter(steps_expired_at=None)
                .order_by("pk")
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)[:RUN_BATCH]
            )
            if not ids:
                break
            marked += Run.objects.filter(pk__in=ids).update(steps_expired_at=now)
    delete_expired_steps(runs.model.objects.filter(pk__in=runs.values("pk")))
    return marked


def delete_expired_steps(runs) -> int:
    """Delete the steps and ledger rows of the marked runs among these, BATCH rows per
    statement and transaction; return the steps deleted."""
    marked = runs.exclude(steps_expired_at=None).values("pk")
    total = 0
    for model in (Step, LedgerRow):
        table = model._meta.db_table
        while True:
            sql, params = marked.query.sql_with_params()
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
                    f"WHERE run_id IN ({sql}) LIMIT {BATCH}))",
                    params,
                )
                deleted = cursor.rowcount
            if model is Step:
                total += deleted
            if deleted < BATCH:
                break
    return total


def expire_runs(project: Project, cutoff, now) -> int:
    """Delete the project's runs older than cutoff (steps first, in batches), and the
    traces they leave empty; return the runs deleted."""
    old = project.runs.filter(created_at__lt=cutoff, live=False)
    expire_steps(old, now)
    total = 0
    while True:
        ids = list(old.order_by("pk").values_list("pk", flat=True)[:RUN_BATCH])
        if not ids:
            break
        total += deletion.delete_runs(Run.objects.filter(pk__in=ids))
    empty = project.traces.filter(created_at__lt=cutoff).filter(
        ~Q(Exists(Run.objects.filter(trace=OuterRef("pk"))))
    )
    while ids := list(empty.order_by("pk").values_list("pk", flat=True)[:RAW_BATCH]):
        deletion.delete_traces(Trace.objects.filter(pk__in=ids))
    return total


SETTINGS = ("raw_retention_days", "step_retention_days", "run_retention_days")
MAX_DAYS = 36500


class SettingsInvalid(ValueError):
    """Retention settings that cannot be saved; the message says why."""


def save_settings(project: Project, values: dict) -> Project:
    """Set the project's retention days (None: for ever) and storage budget (None: none) from
    `values` (those missing keep theirs). Raises SettingsInvalid."""
    for field in (*SETTINGS, "storage_budget_bytes"):
        if field in values:
            setattr(project, field, values[field])
    for field in SETTINGS:
        days = getattr(project, field)
        if days is not None and not 1 <= days <= MAX_DAYS:
            raise SettingsInvalid(f"{field} is 1 to {MAX_DAYS} days, or null (for ever)")
    if project.storage_budget_bytes is not None and project.storage_budget_bytes < 1:
        raise SettingsInvalid("storage_budget_bytes is a positive number of bytes, or null")
    runs, steps, raw = (
        getattr(project, f)
        for f in ("run_retention_days", "step_retention_days", "raw_retention_days")
    )
    for shorter, name in ((steps, "steps"), (raw, "raw bytes")):
        if runs is not None and (shorter is None or shorter > runs):
            raise SettingsInvalid(f"{name} cannot be kept longer than the runs they belong to")
    project.save(update_fields=[*SETTINGS, "storage_budget_bytes"])
    return project


def sweep_raw_store(now=None) -> int:
    """Delete the objects of the external raw store that no trace names and that are older
    than SWEEP_AFTER; return how many. Does nothing when raw bytes stay in the database.

    A chunk at a time, each under the exclusive SWEEP_LOCK (`rawstore`): an upload that has
    written its object but not yet committed its row holds the lock shared, so the sweep
    waits for its commit and then sees the object named.
    """
    if not rawstore.external():
        return 0
    cutoff = (now or timezone.now()) - SWEEP_AFTER
    swept = 0
    for keys in rawstore.stored_keys():
        for start in range(0, len(keys), SWEEP_CHUNK):
            chunk = keys[start : start + SWEEP_CHUNK]
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [rawstore.SWEEP_LOCK])
                named = set(
                    Trace.objects.filter(raw_key__in=chunk).values_list("raw_key", flat=True)
                )
                orphans = [k for k in chunk if k not in named and rawstore.modified(k) < cutoff]
                rawstore.delete_now(orphans)
            swept += len(orphans)
    return swept
