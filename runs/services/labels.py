"""People judge findings: "real loop" or "false alarm" (with a reason), and the export.

A label copies its finding's identity (run, detector, tool, signature, seq range), because
re-analysis deletes and rewrites a run's findings. It is matched to the run's current findings
with the scoring rule of `services.scoring` (same run, detector and tool, overlapping steps),
preferring a label made on that very row, then one with the same signature, then the newest.

Every judgement is stored (the history stays); the one that counts for a loop is the latest
label per identity (run, detector, tool, signature, first seq), whoever made it: `current`.

The scoring itself (`score`, `Score`, `Judged`) is pure and lives in `services.scoring`, so
that `loopboard scan --labels` uses it without Django; it is re-exported here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.db import transaction
from django.db.models import F, QuerySet

from ..models import Finding, Label, Project, Run
from . import policy
from .scoring import Judged, Score, matches, score

__all__ = [
    "Judged",
    "LabelInvalid",
    "Score",
    "current",
    "export",
    "for_findings",
    "label_finding",
    "label_issue",
    "labels_for_runs",
    "reattach",
    "score",
]

IDENTITY = ("run_id", "detector", "tool", "signature", "seq_first")
TEXT_CHARS = 500
BATCH = 1000
# The reasons a false alarm offers as one click; "other" asks for words.
REASONS = [(value, title) for value, title in Label.Reason.choices if value != Label.Reason.OTHER]


class LabelInvalid(ValueError):
    """A judgement that cannot be stored; the message says why, for a person."""


def clean(verdict: str, reason: str = "", text: str = "") -> tuple[str, str, str]:
    """Return (verdict, reason, text) as stored, or raise LabelInvalid.

    A real loop has no reason. A false alarm needs one of Label.Reason; "other" needs words.
    """
    text = " ".join((text or "").split())[:TEXT_CHARS]
    if verdict == Label.Verdict.REAL:
        return verdict, "", ""
    if verdict != Label.Verdict.FALSE:
        raise LabelInvalid("Say whether it is a real loop or a false alarm.")
    if reason not in Label.Reason.values:
        raise LabelInvalid("Say why it is a false alarm: polling, paging, batch work, …")
    if reason == Label.Reason.OTHER and not text:
        raise LabelInvalid("Say in a few words why it is a false alarm.")
    return verdict, reason, text if reason == Label.Reason.OTHER else ""


def identity(finding: Finding, alive: set[int] | None = None) -> dict:
    """The fields a label copies from the finding it judges (the row itself too, unless
    `alive` is given and leaves it out: re-analysis replaced it meanwhile)."""
    seqs = list(finding.seqs)
    first, last = (min(seqs), max(seqs)) if seqs else (None, None)
    return {
        "run_id": finding.run_id,
        "finding": finding if alive is None or finding.pk in alive else None,
        "detector": finding.detector,
        "tool": finding.tool,
        "signature": finding.signature,
        "fingerprint": finding.fingerprint,
        "severity": finding.severity,
        "fired_at": finding.fired_at,
        "started_at": finding.started_at,
        "seq_first": first,
        "seq_last": last,
    }


def label_finding(user, finding: Finding, verdict: str, reason: str = "", text: str = "") -> Label:  # type: ignore[no-untyped-def]
    """Store `user`'s judgement of one finding (the caller checked the user may see it).

    Raises LabelInvalid for a verdict or reason that is not one of the choices.
    """
    verdict, reason, text = clean(verdict, reason, text)
    with transaction.atomic():
        locked = _lock_runs([finding.run_id])
        if not locked:
            raise LabelInvalid("This run was deleted.")
        run = locked[0]
        return Label.objects.create(
            **identity(finding, alive=_alive([finding.pk])),
            project_id=run.project_id,
            verdict=verdict,
            reason=reason,
            text=text,
            user=user,
            policy_version=policy.current_version(run.project_id),
        )


def label_issue(user, issue, verdict: str, reason: str = "", text: str = "") -> int:  # type: ignore[no-untyped-def]
    """Label every finding of a loop issue alike; return how many were labeled."""
    verdict, reason, text = clean(verdict, reason, text)
    version = policy.current_version(issue.project_id)
    made = 0
    with transaction.atomic():
        runs = _lock_runs(issue.findings.values_list("run_id", flat=True).distinct())
        findings = issue.findings.filter(run_id__in=[run.pk for run in runs])
        batch: list[Label] = []
        for finding in findings.order_by("pk").iterator(chunk_size=BATCH):
            batch.append(
                Label(
                    **identity(finding),
                    project_id=issue.project_id,
                    verdict=verdict,
                    reason=reason,
                    text=text,
                    user=user,
                    policy_version=version,
                )
            )
            if len(batch) >= BATCH:
                made += len(Label.objects.bulk_create(batch))
                batch = []
        made += len(Label.objects.bulk_create(batch))
    return made


def _lock_runs(run_ids: Iterable[int]) -> list[Run]:
    """Lock the runs' rows, in id order (in a transaction).

    Re-analysis and live appends rewrite a run's findings under this lock, so while it is
    held a finding read before is either still there or gone for good, never half-replaced.
    """
    return list(
        Run.objects.select_for_update()
        .filter(pk__in=list(run_ids))
        .order_by("pk")
        .only("project_id")
    )


def _alive(finding_ids: list[int]) -> set[int]:
    return set(Finding.objects.filter(pk__in=finding_ids).values_list("pk", flat=True))


def current(labels: QuerySet[Label]) -> QuerySet[Label]:
    """Return the labels that count: of each identity, the latest."""
    latest = labels.order_by(*IDENTITY, "-created_at", "-id").distinct(*IDENTITY).values("pk")
    return Label.objects.filter(pk__in=latest)


def _rank(label: Label, finding: Finding) -> tuple | None:
    """How well a label fits a finding (higher is better), or None when it does not match."""
    if not matches(Judged.of(label), finding):
        return None
    same_row = label.finding_id == finding.pk
    return (same_row, label.signature == finding.signature, label.created_at, label.pk)


def for_findings(run: Run, findings: Iterable[Finding]) -> dict[int, Label]:
    """Return, per finding id, the label that judges it now (findings nobody judged: absent)."""
    findings = list(findings)
    if not findings:
        return {}
    labels = list(current(run.labels.all()).select_related("user"))
    found: dict[int, Label] = {}
    for finding in findings:
        ranked = [(rank, label) for label in labels if (rank := _rank(label, finding))]
        if ranked:
            found[finding.pk] = max(ranked, key=lambda pair: pair[0])[1]
    return found


def labels_for_runs(run_ids: Iterable[int]) -> dict[int, list[Judged]]:
    """Return the labels that count of these runs, per run id, as `score` reads them."""
    judged: dict[int, list[Judged]] = defaultdict(list)
    rows = current(Label.objects.filter(run_id__in=list(run_ids)))
    for label in rows.only(*IDENTITY, "seq_last", "verdict").iterator(chunk_size=BATCH):
        judged[label.run_id].append(Judged.of(label))
    return dict(judged)


def reattach(run_ids: Iterable[int]) -> int:
    """Point labels whose finding row is gone at the run's current finding they match.

    For after a re-analysis has rewritten the runs' findings (in its transaction); returns
    how many labels found their finding again.
    """
    orphans = list(Label.objects.filter(run_id__in=list(run_ids), finding__isnull=True))
    if not orphans:
        return 0
    by_run: dict[int, list[Finding]] = defaultdict(list)
    for finding in Finding.objects.filter(run_id__in={label.run_id for label in orphans}):
        by_run[finding.run_id].append(finding)
    moved = []
    for label in orphans:
        ranked = [(rank, f) for f in by_run[label.run_id] if (rank := _rank(label, f))]
        if ranked:
            label.finding = max(ranked, key=lambda pair: pair[0])[1]
            moved.append(label)
    Label.objects.bulk_update(moved, ["finding"], batch_size=BATCH)
    return len(moved)


def export(
    project: Project, since: datetime | None = None, until: datetime | None = None
) -> Iterator[dict]:
    """Yield the project's labels that count, made in [since, until), oldest first, as the
    JSONL rows of `GET /api/labels` (`scoring.Judged.from_export` reads them back).

    A row names its run by id and by external id (the agent's session id or the file's run
    id), so a scan of the trace files can be scored against it.
    """
    rows = current(Label.objects.filter(project=project))
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    columns = rows.order_by("created_at", "id").values(
        "id", "run_id", "finding_id", "detector", "tool", "signature", "fingerprint", "severity",
        "fired_at", "started_at", "seq_first", "seq_last", "verdict", "reason", "text",
        "created_at", "policy_version",
        external_id=F("run__external_id"), run_name=F("run__name"), username=F("user__username"),
    )  # fmt: skip
    for row in columns.iterator(chunk_size=BATCH):
        first, last = row.pop("seq_first"), row.pop("seq_last")
        row["seqs"] = None if first is None else [first, last]
        row["created_at"] = row["created_at"].isoformat()
        row["user"] = row.pop("username")
        yield row
