"""Alert rules: decide what fires, build each message's payload, and hand it to delivery.

`fire(rule, key, payload)` is the one way an alert is made: idempotent on (rule, key), capped
at the rule's `max_per_hour` (the alerts over it are held and summed into the next message),
and delivered by the worker to each enabled channel of the rule (`queue.queue_delivery`).

The events that fire: `on_runs_analyzed` (run rules, after an analysis), `on_live_findings`
(run rules, while a live run appends), `on_issue_events` (issue rules, after loop issues are
grouped), `evaluate_rate_rules` (rate rules, every minute from beat); the daily digest
(`digest`) calls `fire` too. A project's rules only ever see that project's runs and issues.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from django.urls import reverse
from django.utils import timezone
from psycopg.types.json import Jsonb

import detection

from ..models import Alert, AlertRule, Finding, LoopIssue, Project, Run, Verdict
from . import queue, storage

SEVERITY_RANK = {Verdict.WARN: 1, Verdict.STOP: 2}
MAX_FINDINGS = 10  # in one run alert's payload
HELD_TITLES = 5


# --- rules ----------------------------------------------------------------------------------

RULE_FIELDS = (
    "name", "kind", "enabled", "severity", "tools", "agents", "detectors", "max_per_hour",
    "metric", "window_minutes", "warn_threshold", "alert_threshold", "no_data", "hour",
)  # fmt: skip


class RuleInvalid(ValueError):
    """A rule that cannot be saved; the message says why, for the form or the API."""


def save_rule(
    project: Project,
    values: dict,
    *,
    rule: AlertRule | None = None,
    channel_ids: Iterable[int] | None = None,
    user=None,
) -> AlertRule:
    """Create (rule None) or change a project's alert rule from `values` (RULE_FIELDS; those
    missing keep their value) and set its channels, which must be the project's.
    Raises RuleInvalid."""
    rule = rule or AlertRule(
        project=project, created_by=user if user and user.is_authenticated else None
    )
    for field in RULE_FIELDS:
        if field in values:
            setattr(rule, field, values[field])
    check_rule(rule)
    chosen = None
    if channel_ids is not None:
        wanted = set(channel_ids)
        chosen = list(project.channels.filter(pk__in=wanted))
        if len(chosen) != len(wanted):
            raise RuleInvalid("a chosen channel is not one of this project's")
    with transaction.atomic():
        rule.save()
        if chosen is not None:
            rule.channels.set(chosen)
    return rule


def check_rule(rule: AlertRule) -> None:
    """Raise RuleInvalid unless the rule's fields make sense for its kind."""
    rule.name = storage.clean_text((rule.name or "").strip()[:100])  # NUL: PostgreSQL refuses
    if not rule.name:
        raise RuleInvalid("give the rule a name")
    if rule.kind not in AlertRule.Kind.values:
        raise RuleInvalid(f"kind must be one of {', '.join(AlertRule.Kind.values)}")
    if rule.severity not in SEVERITY_RANK:
        raise RuleInvalid("severity must be warn or stop")
    if rule.no_data not in AlertRule.NoData.values:
        raise RuleInvalid(f"no_data must be one of {', '.join(AlertRule.NoData.values)}")
    rule.tools, rule.agents, rule.detectors = (
        sorted({storage.clean_text(item.strip()[:limit]) for item in items if item.strip()})[:50]
        for items, limit in ((rule.tools, 200), (rule.agents, 200), (rule.detectors, 40))
    )
    if rule.kind == AlertRule.Kind.RATE:
        if rule.metric not in AlertRule.Metric.values:
            raise RuleInvalid(f"a rate rule needs a metric: {', '.join(AlertRule.Metric.values)}")
        if rule.warn_threshold is None and rule.alert_threshold is None:
            raise RuleInvalid("a rate rule needs a warn or an alert threshold")
        if (
            None not in (rule.warn_threshold, rule.alert_threshold)
            and rule.warn_threshold > rule.alert_threshold
        ):
            raise RuleInvalid("the warn threshold must not exceed the alert threshold")
        if not 1 <= rule.window_minutes <= 7 * 24 * 60:
            raise RuleInvalid("the window is 1 minute to 7 days")
    if rule.kind == AlertRule.Kind.DIGEST and not 0 <= rule.hour <= 23:
        raise RuleInvalid("the digest hour is 0 to 23")


# --- firing ---------------------------------------------------------------------------------


def fire(rule: AlertRule, key: str, payload: dict) -> Alert | None:
    """Record that `rule` fired for `key` and queue its delivery once the transaction commits;
    return the new alert, or None when the rule already fired for this key (or is disabled).

    The rule's row is locked while its last hour is counted, so concurrent fires of one rule
    keep to its `max_per_hour` (run and issue rules; 0 = no cap). An alert over the cap is
    stored held, not delivered; the next one delivered carries their count and titles.
    """
    with transaction.atomic():
        locked = AlertRule.objects.select_for_update().filter(pk=rule.pk, enabled=True).first()
        if locked is None:
            return None
        held = _over_cap(locked)
        summed: list[Alert] = []
        if not held:
            summed = list(locked.alerts.filter(held=True, summed_into=None).order_by("created_at"))
            if summed:
                payload = {**payload, "held": held_summary(locked, summed)}
        alert_id = _insert(locked, key, payload, held)
        if alert_id is None:
            return None
        alert = Alert.objects.get(pk=alert_id)
        if not held:
            Alert.objects.filter(pk__in=[a.pk for a in summed]).update(summed_into=alert)
            channel_ids = locked.channels.filter(enabled=True).values_list("pk", flat=True)
            queue.queue_delivery(alert.pk, list(channel_ids))
    return alert


def _over_cap(rule: AlertRule) -> bool:
    if rule.kind not in (AlertRule.Kind.RUN, AlertRule.Kind.ISSUE) or not rule.max_per_hour:
        return False
    hour_ago = timezone.now() - timedelta(hours=1)
    sent = rule.alerts.filter(held=False, created_at__gte=hour_ago).count()
    return sent >= rule.max_per_hour


INSERT_ALERT = f"""
    INSERT INTO {Alert._meta.db_table} (rule_id, key, payload, held, created_at)
    VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (rule_id, key) DO NOTHING
    RETURNING id
"""


def _insert(rule: AlertRule, key: str, payload: dict, held: bool) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(INSERT_ALERT, [rule.pk, key[:200], Jsonb(payload), held, timezone.now()])
        row = cursor.fetchone()
    return row[0] if row else None


def held_summary(rule: AlertRule, held: Sequence[Alert]) -> dict:
    """What a message says of the alerts held back since the last one delivered."""
    titles = [a.payload.get("title", a.key) for a in held[:HELD_TITLES]]
    since = held[0].created_at
    more = f" (and {len(held) - HELD_TITLES} more)" if len(held) > HELD_TITLES else ""
    text = (
        f"Also {len(held)} alert{'s' * (len(held) != 1)} of this rule held back since "
        f"{since:%Y-%m-%d %H:%M} UTC (over its {rule.max_per_hour} an hour): "
        + "; ".join(titles)
        + more
    )
    return {"count": len(held), "since": since.isoformat(), "titles": titles, "text": text}


# --- run rules ------------------------------------------------------------------------------


def on_runs_analyzed(run_ids: Iterable[int]) -> list[Alert]:
    """Fire the run rules of the runs' projects for those runs that reached warn or stop.

    One alert per run per rule (key "run:<id>"), so a live run that alerted while running,
    or a run analyzed again, does not alert twice. Runs older than
    LOOPBOARD_ALERT_MAX_RUN_AGE_HOURS are left alone (a policy change re-analyzing history).
    """
    cutoff = timezone.now() - timedelta(hours=settings.LOOPBOARD_ALERT_MAX_RUN_AGE_HOURS)
    runs = list(
        Run.objects.filter(pk__in=list(run_ids), created_at__gte=cutoff)
        .filter(verdict__in=[Verdict.WARN, Verdict.STOP])
        .select_related("project")
    )
    if not runs:
        return []
    rules = defaultdict(list)
    for rule in AlertRule.objects.filter(
        project_id__in={r.project_id for r in runs}, kind=AlertRule.Kind.RUN, enabled=True
    ):
        rules[rule.project_id].append(rule)
    # One query for the (rule, run) pairs that alerted already: re-analysis costs no lock.
    done = set(
        Alert.objects.filter(
            rule__in=[rule for group in rules.values() for rule in group],
            key__in=[f"run:{run.pk}" for run in runs],
        ).values_list("rule_id", "key")
    )
    todo = {
        run: [r for r in rules[run.project_id] if (r.pk, f"run:{run.pk}") not in done]
        for run in runs
    }
    # The warn and stop findings of every run still to alert on, in one query.
    findings = defaultdict(list)
    for finding in Finding.objects.filter(
        run__in=[run for run, waiting in todo.items() if waiting]
    ).exclude(severity=Finding.Severity.INFO):
        findings[finding.run_id].append(finding)
    fired = []
    for run, waiting in todo.items():
        for rule in waiting:
            matching = matching_findings(rule, run, findings[run.pk])
            if matching and (
                alert := fire(rule, f"run:{run.pk}", run_payload(rule, run, matching))
            ):
                fired.append(alert)
    return fired


def on_live_findings(run: Run, findings: Sequence[detection.Finding]) -> None:
    """A live run's append fired these findings: queue its run rules once the append commits
    (never sent inline, so the append does not wait for a receiver). One query, and nothing
    queued once each of the project's run rules has alerted for this run. (The issue rules
    hear of a live run's loops from `live.group_live_issues`, in the worker.)"""
    if not any(f.severity in SEVERITY_RANK for f in findings):
        return
    waiting = AlertRule.objects.filter(
        project_id=run.project_id, kind=AlertRule.Kind.RUN, enabled=True
    ).exclude(alerts__key=f"run:{run.pk}")
    if waiting.exists():
        queue.queue_alerts([run.pk])


def matching_findings(rule: AlertRule, run: Run, findings: Sequence[Finding]) -> list[Finding]:
    """The run's findings that fire the rule: at its severity or above, of its tools (names
    or globs) and detectors when it names some, in a run of one of its agents if it names
    some."""
    if rule.agents and run.agent not in rule.agents:
        return []
    least = SEVERITY_RANK[rule.severity]
    return [
        f
        for f in findings
        if SEVERITY_RANK.get(f.severity, 0) >= least
        and (not rule.detectors or f.detector in rule.detectors)
        and (not rule.tools or any(fnmatch.fnmatchcase(f.tool, t) for t in rule.tools))
    ]


def run_payload(rule: AlertRule, run: Run, findings: Sequence[Finding]) -> dict:
    """A run alert: the run, its firing findings in their own words, the waste, the policy
    rows, and the run's link."""
    findings = sorted(findings, key=lambda f: (-SEVERITY_RANK.get(f.severity, 0), f.fired_at))
    first = findings[0]
    url = absolute(run.get_absolute_url())
    verdict = "stop" if any(f.severity == Verdict.STOP for f in findings) else "warn"
    live = " while live" if run.live else ""
    title = f"Run “{run.name[:120]}” reached {verdict}{live}: {first.detector} on {first.tool or 'the run'}"
    facts = [
        {"label": "Waste", "value": waste_text(waste_of(run))},
        {"label": "Policy", "value": first.rule or "defaults"},
    ]
    if run.agent:
        facts.append(
            {"label": "Agent", "value": " ".join(filter(None, [run.agent, run.agent_version]))}
        )
    return {
        "kind": "run",
        "title": title,
        "text": first.message,
        "url": url,
        "project": project_ref(run.project),
        "rule": rule_ref(rule),
        "run": {
            "id": run.pk,
            "name": run.name,
            "verdict": run.verdict,
            "live": run.live,
            "format": run.format,
            "agent": run.agent,
            "agent_version": run.agent_version,
            "steps": run.step_count,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "waste": waste_of(run),
        },
        "findings": [finding_ref(f) for f in findings[:MAX_FINDINGS]],
        "facts": facts,
        "sections": [
            {"heading": "Findings", "lines": [finding_line(f) for f in findings[:MAX_FINDINGS]]}
        ],
        "created_at": timezone.now().isoformat(),
    }


def finding_ref(finding: Finding) -> dict:
    return {
        "detector": finding.detector,
        "severity": finding.severity,
        "tool": finding.tool,
        "message": finding.message,
        "policy_rule": finding.rule,
        "count": finding.count,
        "threshold": finding.threshold,
        "fired_at_step": finding.fired_at,
        "stop_at_step": finding.stop_at,
        "url": absolute(reverse("runs:step", args=[finding.run_id, finding.fired_at])),
        "waste": waste_of(finding),
    }


def finding_line(finding: Finding) -> str:
    rule = f" [policy: {finding.rule}]" if finding.rule else ""
    return f"{finding.detector} ({finding.severity}) at step {finding.fired_at}: {finding.message}{rule}"


# --- issue rules ----------------------------------------------------------------------------


def on_issue_events(events: Iterable[tuple[int, str]]) -> list[Alert]:
    """Fire the issue rules of each (issue id, "new" | "regressed") event's project.

    A regression is keyed by when the issue's state changed, so an issue that regresses again
    after being resolved alerts again; a new issue alerts once.
    """
    events = list(events)
    issues = LoopIssue.objects.select_related("project", "last_run").in_bulk([i for i, _ in events])
    rules = defaultdict(list)
    projects = {issue.project_id for issue in issues.values()}
    for rule in AlertRule.objects.filter(
        project_id__in=projects, kind=AlertRule.Kind.ISSUE, enabled=True
    ):
        rules[rule.project_id].append(rule)
    fired = []
    for issue_id, what in events:
        issue = issues.get(issue_id)
        if issue is None or issue.state == LoopIssue.State.IGNORED:
            continue
        key = f"issue:{issue.pk}:{what}"
        if what == "regressed" and issue.state_changed_at:
            key += f":{issue.state_changed_at:%Y%m%dT%H%M%S}"
        for rule in rules[issue.project_id]:
            if alert := fire(rule, key, issue_payload(rule, issue, what)):
                fired.append(alert)
    return fired


def issue_payload(rule: AlertRule, issue: LoopIssue, what: str) -> dict:
    """An issue alert: the issue's title, its example finding's words, its counts and waste."""
    url = absolute(issue.get_absolute_url())
    facts = [
        {"label": "Runs", "value": str(issue.run_count)},
        {"label": "Waste", "value": waste_text(waste_of(issue))},
        {"label": "State", "value": issue.state},
    ]
    if what == "regressed" and issue.resolved_in_version:
        facts.append({"label": "Resolved in", "value": issue.resolved_in_version})
    if issue.versions:
        facts.append({"label": "Versions", "value": ", ".join(issue.versions[-5:])})
    last_run = issue.last_run
    sections = []
    if last_run is not None:
        sections.append(
            {
                "heading": "Latest run",
                "lines": [
                    f"{last_run.name} ({last_run.verdict}): {absolute(last_run.get_absolute_url())}"
                ],
            }
        )
    return {
        "kind": "issue",
        "event": what,
        "title": f"{'New' if what == 'new' else 'Regressed'} loop issue: {issue.title[:200]}",
        "text": issue.example_message,
        "url": url,
        "project": project_ref(issue.project),
        "rule": rule_ref(rule),
        "issue": {
            "id": issue.pk,
            "title": issue.title,
            "detector": issue.detector,
            "tool": issue.tool,
            "state": issue.state,
            "resolved_in_version": issue.resolved_in_version,
            "first_seen": issue.first_seen.isoformat() if issue.first_seen else None,
            "last_seen": issue.last_seen.isoformat() if issue.last_seen else None,
            "run_count": issue.run_count,
            "finding_count": issue.finding_count,
            "last_run_id": issue.last_run_id,
            "waste": waste_of(issue),
        },
        "facts": facts,
        "sections": sections,
        "created_at": timezone.now().isoformat(),
    }


# --- rate rules -----------------------------------------------------------------------------


def evaluate_rate_rules(now: datetime | None = None) -> list[Alert]:
    """Measure every enabled rate rule over its window ending `now`, one after the other, and
    fire those whose level changed (`evaluate_rate_rule`). Beat instead queues a task per
    rule (`queue_rate_rules`), so many projects' rules are measured by all the workers."""
    now = now or timezone.now()
    fired = (evaluate_rate_rule(rule_id, now) for rule_id in rate_rule_ids())
    return [alert for alert in fired if alert is not None]


def rate_rule_ids() -> list[int]:
    """The enabled rate rules, in id order."""
    rules = AlertRule.objects.filter(kind=AlertRule.Kind.RATE, enabled=True).order_by("pk")
    return list(rules.values_list("pk", flat=True))


def queue_rate_rules(now: datetime | None = None) -> int:
    """Queue the measure of every enabled rate rule at `now` (beat, every minute); return
    how many were queued."""
    ids = rate_rule_ids()
    queue.queue_rate_rules(ids, now or timezone.now())
    return len(ids)


def evaluate_rate_rule(rule_id: int, now: datetime) -> Alert | None:
    """Measure one rate rule over its window ending `now`, and fire it when its level (ok,
    warn, alert) changed, recovering to ok included; None when it did not fire (or is gone
    or disabled).

    The level is compared and written under the rule's row lock, and the key names the
    minute and the level, so two beats evaluating at once fire once.
    """
    rule = AlertRule.objects.filter(pk=rule_id, kind=AlertRule.Kind.RATE, enabled=True).first()
    if rule is None:
        return None
    value, runs = measure(rule, now)
    with transaction.atomic():
        locked = AlertRule.objects.select_for_update().get(pk=rule.pk)
        level = level_for(locked, value)
        if level == locked.state:
            return None
        previous = locked.state
        locked.state, locked.state_changed_at = level, now
        locked.save(update_fields=["state", "state_changed_at"])
        payload = rate_payload(locked, value, runs, previous, now)
        return fire(locked, f"rate:{rule.pk}:{now:%Y-%m-%dT%H:%M}:{level}", payload)


def window_runs(rule: AlertRule, now: datetime):  # type: ignore[no-untyped-def]
    """The rule's project's analyzed runs created in its window."""
    start = now - timedelta(minutes=rule.window_minutes)
    runs = Run.objects.filter(project_id=rule.project_id, created_at__gte=start, created_at__lt=now)
    return runs.exclude(verdict=Verdict.PENDING)


def measure(rule: AlertRule, now: datetime) -> tuple[float | None, int]:
    """Return the rule's metric over its window (None: no runs in it) and the run count."""
    runs = window_runs(rule, now)
    totals = runs.aggregate(
        n=Count("pk"),
        flagged=Count("pk", filter=Q(verdict__in=[Verdict.WARN, Verdict.STOP])),
        cost=Sum("waste_cost"),
        tokens=Sum("waste_tokens"),
    )
    if not totals["n"]:
        return None, 0
    hours = rule.window_minutes / 60
    metric = rule.metric
    if metric == AlertRule.Metric.FLAGGED_SHARE:
        value = totals["flagged"] / totals["n"]
    elif metric == AlertRule.Metric.WASTE_COST_PER_HOUR:
        value = (totals["cost"] or 0) / hours
    elif metric == AlertRule.Metric.WASTE_TOKENS_PER_HOUR:
        value = (totals["tokens"] or 0) / hours
    else:
        stops = Finding.objects.filter(run__in=runs, severity=Finding.Severity.STOP).count()
        value = stops / hours
    return value, totals["n"]


def level_for(rule: AlertRule, value: float | None) -> str:
    """The level a value reaches; no data counts as the rule's `no_data` says."""
    Level = AlertRule.Level
    if value is None:
        if rule.no_data == AlertRule.NoData.KEEP:
            return rule.state
        return Level.ALERT if rule.no_data == AlertRule.NoData.ALERT else Level.OK
    if rule.alert_threshold is not None and value >= rule.alert_threshold:
        return Level.ALERT
    if rule.warn_threshold is not None and value >= rule.warn_threshold:
        return Level.WARN
    return Level.OK


def rate_payload(
    rule: AlertRule, value: float | None, runs: int, previous: str, now: datetime
) -> dict:
    """A rate alert: the metric's value against the thresholds, and the window's worst runs
    with their first finding's words."""
    label = AlertRule.Metric(rule.metric).label if rule.metric else rule.metric
    shown = "no data" if value is None else f"{value:.4g}"
    level = rule.state
    if value is None:
        why = f"No analyzed runs in the last {rule.window_minutes} minutes (no data counts as {rule.no_data})."
    else:
        why = (
            f"{label[:1].upper()}{label[1:]} over the last {rule.window_minutes} minutes is {shown} "
            f"({runs} runs; warn at {_num(rule.warn_threshold)}, alert at {_num(rule.alert_threshold)})."
        )
    worst = (
        window_runs(rule, now)
        .filter(verdict__in=[Verdict.WARN, Verdict.STOP])
        .order_by("-waste_steps", "-id")[:5]
    )
    worst = list(worst)
    messages = first_messages(worst)
    lines = []
    for run in worst:
        words = f": {messages[run.pk]}" if run.pk in messages else ""
        lines.append(
            f"{run.name} ({run.verdict}, {waste_text(waste_of(run))}){words} "
            f"{absolute(run.get_absolute_url())}"
        )
    runs_url = absolute(reverse("runs:list")) + f"?project={rule.project.slug}"
    return {
        "kind": "rate",
        "title": f"{rule.name}: {level.upper()} ({rule.metric} {shown}, was {previous})",
        "text": why,
        "url": runs_url,
        "project": project_ref(rule.project),
        "rule": rule_ref(rule),
        "rate": {
            "metric": rule.metric,
            "value": value,
            "level": level,
            "previous": previous,
            "window_minutes": rule.window_minutes,
            "window_end": now.isoformat(),
            "warn_threshold": rule.warn_threshold,
            "alert_threshold": rule.alert_threshold,
            "no_data": rule.no_data,
            "runs": runs,
        },
        "facts": [
            {"label": "Value", "value": shown},
            {"label": "Level", "value": f"{previous} → {level}"},
            {"label": "Window", "value": f"{rule.window_minutes} min, {runs} runs"},
        ],
        "sections": [{"heading": "Worst runs in the window", "lines": lines}] if lines else [],
        "created_at": now.isoformat(),
    }


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


# --- shared pieces --------------------------------------------------------------------------


def absolute(path: str) -> str:
    """An absolute link for a message (LOOPBOARD_BASE_URL + path)."""
    return settings.LOOPBOARD_BASE_URL + path


def project_ref(project: Project) -> dict:
    return {"slug": project.slug, "name": project.name}


def rule_ref(rule: AlertRule) -> dict:
    return {"id": rule.pk, "name": rule.name, "kind": rule.kind}


def waste_of(row) -> dict:  # type: ignore[no-untyped-def]
    """The waste columns of a run, finding or issue."""
    return {
        "steps": row.waste_steps,
        "tokens": row.waste_tokens,
        "cost": row.waste_cost,
        "seconds": row.waste_seconds,
    }


def waste_text(waste: dict) -> str:
    """Waste (`waste_of`) in words: "12 steps · 3,400 tokens · $0.12 · 40 s" (what is known)."""
    parts = [f"{waste['steps']} steps"]
    if waste["tokens"] is not None:
        parts.append(f"{waste['tokens']:,} tokens")
    if waste["cost"] is not None:
        parts.append(f"${waste['cost']:,.2f}")
    if waste["seconds"] is not None:
        parts.append(f"{waste['seconds']:,.0f} s")
    return " · ".join(parts)


def first_messages(runs: Iterable[Run]) -> dict[int, str]:
    """The message of each run's first warn or stop finding, by run id, in one query."""
    rows = (
        Finding.objects.filter(run__in=list(runs))
        .exclude(severity=Finding.Severity.INFO)
        .order_by("run_id", "fired_at", "id")
        .distinct("run_id")
        .values_list("run_id", "message")
    )
    return dict(rows)


def delete_rule(rule: AlertRule) -> None:
    """Delete a rule and its alerts (their delivery log goes with them)."""
    rule.delete()
