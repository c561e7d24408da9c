"""What each project stores (raw bytes, steps, findings), by day, and its budget warning.

`measure` (the retention beat, after its purge) writes today's StorageDay row of a project:
the raw bytes exactly as stored (compressed), and the steps' and findings' share of their
tables' size on disk, apportioned by the project's share of their rows (summing the size of
a hundred million rows at each pass would cost more than it tells). `figures` reads the last
rows back with the growth per day; `warn_if_near_budget` tells the project's enabled alert
channels, once a day, when the total reaches BUDGET_WARN of `Project.storage_budget_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from ..models import Alert, Finding, Project, Run, Step, StorageDay, Trace
from . import alerts, queue

BUDGET_WARN = 0.8  # of the budget: the warning's threshold
GROWTH_DAYS = 7  # the growth per day is averaged over up to this many days


def measure(project: Project, now=None) -> StorageDay:
    """Measure the project's stored bytes now and keep them as today's row."""
    now = now or timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(sum(octet_length(raw) + raw_external_bytes), 0) "
            f"FROM {Trace._meta.db_table} "
            "WHERE project_id = %s",
            [project.pk],
        )
        raw = int(cursor.fetchone()[0])
    live_steps = Run.objects.filter(project=project, steps_expired_at=None)
    steps = live_steps.aggregate(n=Sum("step_count"))["n"] or 0
    findings = Finding.objects.filter(run__project=project).count()
    values = {
        "raw_bytes": raw,
        "step_bytes": _share(Step, steps, Run.objects.filter(steps_expired_at=None), "step_count"),
        "finding_bytes": _share(Finding, findings),
        "measured_at": now,
    }
    day, _ = StorageDay.objects.update_or_create(project=project, day=now.date(), defaults=values)
    return day


def _share(model, rows: int, runs=None, field: str = "") -> int:
    """The project's `rows` as a share of the table's size on disk (with its indexes)."""
    if not rows:
        return 0
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [table])
        size = int(cursor.fetchone()[0])
    total = runs.aggregate(n=Sum(field))["n"] if runs is not None else model.objects.count()
    return int(size * rows / total) if total else 0


@dataclass(frozen=True, slots=True)
class Figures:
    """A project's last measured bytes and their growth per day (None before two days)."""

    latest: StorageDay | None
    growth: dict[str, float | None]
    budget: int | None

    @property
    def share(self) -> float | None:
        if not self.budget or self.latest is None:
            return None
        return self.latest.total_bytes / self.budget


KINDS = ("raw_bytes", "step_bytes", "finding_bytes")


def figures(project: Project) -> Figures:
    """Return the project's last StorageDay and the growth per day of each kind."""
    days = list(project.storage_days.order_by("-day")[: GROWTH_DAYS + 1])
    latest = days[0] if days else None
    growth: dict[str, float | None] = dict.fromkeys((*KINDS, "total_bytes"))
    if len(days) > 1:
        first, span = days[-1], (days[0].day - days[-1].day).days
        for kind in growth:
            growth[kind] = (getattr(latest, kind) - getattr(first, kind)) / span
    return Figures(latest, growth, project.storage_budget_bytes)


def warn_if_near_budget(project: Project, day: StorageDay) -> Alert | None:
    """Tell the project's enabled channels (once a day) that its stored bytes are near or
    over its budget; return the alert, or None when there is nothing to tell."""
    budget = project.storage_budget_bytes
    if not budget or day.total_bytes < BUDGET_WARN * budget:
        return None
    over = day.total_bytes >= budget
    key = f"storage:{project.pk}:{'over' if over else 'near'}:{day.day.isoformat()}"
    text = (
        f"{project.name} stores {day.total_bytes:,} bytes ({day.raw_bytes:,} raw, "
        f"{day.step_bytes:,} steps, {day.finding_bytes:,} findings): "
        f"{100 * day.total_bytes / budget:.0f}% of its budget of {budget:,} bytes."
    )
    payload = {
        "kind": "storage",
        "title": f"{project.name}: storage {'over' if over else 'near'} its budget",
        "text": text,
        "url": alerts.absolute(reverse("runs:project_settings", args=[project.slug])),
        "project": alerts.project_ref(project),
        "created_at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        if Alert.objects.filter(rule=None, key=key).exists():
            return None
        alert = Alert.objects.create(rule=None, key=key, payload=payload)
        channel_ids = list(project.channels.filter(enabled=True).values_list("pk", flat=True))
        queue.queue_delivery(alert.pk, channel_ids)
    return alert
