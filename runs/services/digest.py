"""The daily digest: one project's day in a message (runs, flagged runs, new and regressed
loop issues, the runs and issues that wasted most), sent through the digest rules' channels.

`build(project, day)` makes the payload of one local calendar day. `send_due_digests(now)`
(beat, every minute) sends, for each enabled digest rule whose hour has come in its project's
time zone, the digest of the day before, once: the alert key `digest:<day>` is unique per
rule (`alerts.fire`), so two beats or two workers at the same minute send one.

The payload has the fields every alert message has (`title`, `text`, `url`, `facts`,
`sections`), which the webhook, Slack and email renderers of `delivery` show as they are, and
the figures for machines under `runs`, `waste`, `new_issues`, `regressed_issues`, `top_runs`
and `top_issues`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.db.models import Count, Q, QuerySet, Sum
from django.urls import reverse
from django.utils import timezone

from ..models import Alert, AlertRule, Finding, LoopIssue, Project, Run, Verdict
from . import alerts

TOP = 5  # entries in each list of the message
LISTED = 50  # new and regressed issues in the payload (their counts are there too)


@dataclass(frozen=True, slots=True)
class Window:
    """A project's local calendar day as an instant range [start, end)."""

    day: date
    zone: ZoneInfo

    @property
    def start(self) -> datetime:
        return datetime.combine(self.day, time.min, tzinfo=self.zone)

    @property
    def end(self) -> datetime:
        return datetime.combine(self.day + timedelta(days=1), time.min, tzinfo=self.zone)


class TimezoneInvalid(ValueError):
    """A time zone name that is not an IANA one."""


def timezone_names() -> list[str]:
    """The IANA time zone names a project may use, sorted (UTC among them)."""
    return sorted(available_timezones() | {"UTC"})


def set_timezone(project: Project, name: str) -> Project:
    """Set the project's time zone (the digest's hour and day are in it).

    Raises TimezoneInvalid for a name that is not an IANA time zone.
    """
    name = name.strip()
    if name not in timezone_names():
        shown = name[:64] or "(empty)"
        raise TimezoneInvalid(f"{shown!r} is not an IANA time zone name (e.g. Europe/Berlin)")
    project.timezone = name
    project.save(update_fields=["timezone"])
    return project


def zone_of(project: Project) -> ZoneInfo:
    """The project's time zone; UTC when its name is not one the system knows."""
    try:
        return ZoneInfo(project.timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def build(project: Project, day: date, rule: AlertRule | None = None) -> dict:
    """Return the digest payload of `project` for the local calendar `day`."""
    window = Window(day, zone_of(project))
    runs = Run.objects.filter(
        project=project, created_at__gte=window.start, created_at__lt=window.end
    )
    counts = runs.aggregate(
        total=Count("pk"),
        warn=Count("pk", filter=Q(verdict=Verdict.WARN)),
        stop=Count("pk", filter=Q(verdict=Verdict.STOP)),
        steps=Sum("waste_steps"),
        tokens=Sum("waste_tokens"),
        cost=Sum("waste_cost"),
        seconds=Sum("waste_seconds"),
    )
    flagged = counts["warn"] + counts["stop"]
    waste = {
        "steps": counts["steps"] or 0,
        "tokens": counts["tokens"],
        "cost": None if counts["cost"] is None else round(counts["cost"], 6),
        "seconds": counts["seconds"],
    }
    issues = LoopIssue.objects.filter(project=project).order_by("-waste_steps", "-id")
    new_issues = issues.filter(created_at__gte=window.start, created_at__lt=window.end)
    regressed_issues = issues.filter(
        state=LoopIssue.State.REGRESSED,
        state_changed_at__gte=window.start,
        state_changed_at__lt=window.end,
    )
    new, regressed = list(new_issues[:LISTED]), list(regressed_issues[:LISTED])
    new_count, regressed_count = new_issues.count(), regressed_issues.count()
    top_runs = list(runs.filter(waste_steps__gt=0).order_by("-waste_steps", "-id")[:TOP])
    top_run_refs = _run_refs(top_runs)
    new_refs, regressed_refs = [_issue_ref(i) for i in new], [_issue_ref(i) for i in regressed]
    top_issues = _top_issues(runs)
    words = f"{day:%A %-d %B %Y}"
    payload = {
        "kind": "digest",
        "title": f"Daily digest for {project.name}, {words}",
        "text": _summary(counts["total"], flagged, counts["stop"], new_count, regressed_count),
        "url": alerts.absolute(
            reverse("runs:list")
            + "?"
            + urlencode({"project": project.slug, "since": day, "until": day})
        ),
        "project": alerts.project_ref(project),
        "day": day.isoformat(),
        "timezone": window.zone.key,
        "window": {"start": window.start.isoformat(), "end": window.end.isoformat()},
        "runs": {
            "total": counts["total"],
            "flagged": flagged,
            "warn": counts["warn"],
            "stop": counts["stop"],
        },
        "waste": waste,
        "new_issue_count": new_count,
        "new_issues": new_refs,
        "regressed_issue_count": regressed_count,
        "regressed_issues": regressed_refs,
        "top_runs": top_run_refs,
        "top_issues": top_issues,
        "facts": [
            {"label": "Runs", "value": str(counts["total"])},
            {"label": "Flagged", "value": f"{flagged} ({counts['stop']} stop)"},
            {"label": "Waste", "value": alerts.waste_text(waste)},
            {"label": "Issues", "value": alerts.absolute(reverse("runs:issues"))},
        ],
        "sections": _sections(
            new_refs, new_count, regressed_refs, regressed_count, top_run_refs, top_issues
        ),
        "created_at": timezone.now().isoformat(),
    }
    if rule is not None:
        payload["rule"] = alerts.rule_ref(rule)
    return payload


def _summary(total: int, flagged: int, stop: int, new: int, regressed: int) -> str:
    return (
        f"{_count(total, 'run')}, {flagged} flagged ({stop} stop). "
        f"{_count(new, 'new loop issue')}, {regressed} regressed."
    )


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def _top_issues(runs: QuerySet[Run]) -> list[dict]:
    """The issues whose findings in the day's runs wasted most steps."""
    rows = (
        Finding.objects.filter(run__in=runs, issue__isnull=False)
        .values("issue_id")
        .annotate(steps=Sum("waste_steps"), runs=Count("run_id", distinct=True))
        .order_by("-steps", "issue_id")[:TOP]
    )
    rows = list(rows)
    issues = LoopIssue.objects.in_bulk([row["issue_id"] for row in rows])
    return [
        {
            **_issue_ref(issues[row["issue_id"]]),
            "day_runs": row["runs"],
            "day_waste_steps": row["steps"],
        }
        for row in rows
        if row["issue_id"] in issues
    ]


def _issue_ref(issue: LoopIssue) -> dict:
    return {
        "id": issue.pk,
        "title": issue.title,
        "detector": issue.detector,
        "tool": issue.tool,
        "state": issue.state,
        "run_count": issue.run_count,
        "url": alerts.absolute(issue.get_absolute_url()),
    }


def _run_refs(runs: list[Run]) -> list[dict]:
    messages = alerts.first_messages(runs)
    return [
        {
            "id": run.pk,
            "name": run.name,
            "verdict": run.verdict,
            "url": alerts.absolute(run.get_absolute_url()),
            "waste": alerts.waste_of(run),
            "finding": messages.get(run.pk, ""),
        }
        for run in runs
    ]


def _sections(
    new: list[dict],
    new_count: int,
    regressed: list[dict],
    regressed_count: int,
    top_runs: list[dict],
    top_issues: list[dict],
) -> list[dict]:
    """The message's lists (the payload's refs), each line plain text ending in its link
    (empty lists left out)."""
    sections = [
        ("New loop issues", [f"{i['title']}: {i['url']}" for i in new[:TOP]], new_count),
        (
            "Regressed loop issues",
            [f"{i['title']}: {i['url']}" for i in regressed[:TOP]],
            regressed_count,
        ),
        (
            "Runs that wasted most",
            [
                f"{r['name']} ({r['verdict']}, {alerts.waste_text(r['waste'])}): {r['url']}"
                for r in top_runs
            ],
            len(top_runs),
        ),
        (
            "Issues that wasted most",
            [
                f"{i['title']} ({_count(i['day_waste_steps'], 'step')} in "
                f"{_count(i['day_runs'], 'run')}): {i['url']}"
                for i in top_issues
            ],
            len(top_issues),
        ),
    ]
    out = []
    for heading, lines, total in sections:
        if lines:
            if total > len(lines):
                lines.append(f"and {total - len(lines)} more")
            out.append({"heading": heading, "lines": lines})
    return out


def send_due_digests(now: datetime | None = None) -> list[Alert]:
    """Send the digest of the day before for every enabled digest rule whose hour has come
    in its project's time zone; return the alerts made (none for a day already sent)."""
    now = now or timezone.now()
    sent = []
    rules = AlertRule.objects.filter(kind=AlertRule.Kind.DIGEST, enabled=True)
    for rule in rules.select_related("project"):
        local = now.astimezone(zone_of(rule.project))
        if local.hour < rule.hour:
            continue
        day = local.date() - timedelta(days=1)
        key = f"digest:{day.isoformat()}"
        if rule.alerts.filter(key=key).exists():  # the usual case: skip building it again
            continue
        if alert := alerts.fire(rule, key, build(rule.project, day, rule)):
            sent.append(alert)
    return sent
