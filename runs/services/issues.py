"""Loop issues: each project's findings grouped by loop fingerprint across runs.

`analysis.write` calls `group_runs` in its transaction right after it writes a run's
findings, so issues grow as the worker analyzes runs; `regroup` rebuilds a project's issues
from its findings (`manage.py regroup`). An issue's counters are recomputed from its findings
(`refresh`) under the issue's row lock, so re-analysing a run never counts it twice and two
workers grouping the same loop at once leave the same issue as one after the other would.

States: open -> resolved (optionally "in version X") or ignored, by a person (`set_state`).
A resolved issue that gets a finding from a later version (or, resolved without a version,
from a run that started after it was resolved) becomes regressed; an ignored one stays
ignored and quiet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

import detection

from ..models import Finding, IssueDay, LoopIssue, Project, Run, Step
from . import access, fingerprints, storage


@dataclass(frozen=True, slots=True)
class IssueEvent:
    """Something to tell people about an issue, returned by `group_runs`.

    kind is "new" (the issue was just created by these runs' findings) or "regressed" (a
    resolved issue came back). Read it after the transaction commits: the issue row exists
    then (`LoopIssue.objects.get(pk=event.issue_id)`).
    """

    issue_id: int
    kind: str  # "new" | "regressed"


NEW, REGRESSED = "new", "regressed"


# -- grouping -----------------------------------------------------------------------------


def issue_ids_of_runs(run_ids: Iterable[int]) -> set[int]:
    """Return the issues the runs' findings are grouped into now.

    `analysis.write` asks before it deletes a run's old findings, and passes them to
    `group_runs`, so an issue that loses its findings to a re-analysis is recounted too.
    """
    ids = list(run_ids)
    if not ids:
        return set()
    found = Finding.objects.filter(run_id__in=ids, issue__isnull=False)
    return set(found.values_list("issue_id", flat=True).distinct())


def group_runs(runs: Iterable[Run], *, also: Iterable[int] = ()) -> list[IssueEvent]:
    """Fingerprint the (just written) findings of these runs and fold them into issues.

    Call it inside the transaction that wrote the findings. Each warn or stop finding is
    attached to its project's issue for its fingerprint (created if new); info findings get
    a fingerprint but no issue. The affected issues (and those in `also`, issues that just
    lost findings) are locked in id order. An issue that only gains findings new to it has
    them added to its counters (`add`: the cost does not grow with the issue); one in `also`,
    or that held some of these findings already, is recounted from all its findings
    (`refresh`). Returns one IssueEvent per issue created ("new") or resolved and now back
    ("regressed"), in issue id order; an ignored issue gives no event.
    """
    runs = {run.pk: run for run in runs if run.pk is not None}
    if not runs and not also:
        return []
    rows = list(
        Finding.objects.filter(run_id__in=list(runs)).values_list(
            "pk",
            "run_id",
            "detector",
            "severity",
            "tool",
            "signature",
            "seqs",
            "message",
            "issue_id",
        )
    )
    engine = {row[0]: _engine_finding(row) for row in rows}
    steps = _steps_for([(row[1], engine[row[0]]) for row in rows])
    marks: dict[int, tuple[str, str]] = {}  # finding id -> (fingerprint, title)
    first: dict[tuple[int, str], tuple] = {}  # (project, fingerprint) -> its first finding row
    for row in rows:
        found, run_steps = engine[row[0]], steps.get(row[1], {})
        mark = fingerprints.fingerprint(found, run_steps)
        marks[row[0]] = (mark, fingerprints.describe(found, run_steps))
        if row[3] != Finding.Severity.INFO:
            first.setdefault((runs[row[1]].project_id, mark), row)
    created = _create_issues(first, marks)
    recount = set(also) | {row[8] for row in rows if row[8] is not None}
    issue_of = _lock_issues(first, recount)
    targets = _attach(rows, marks, runs, issue_of)
    events = _transitions(rows, marks, runs, issue_of, created)
    recount |= {pk for pk, before in targets if before is not None}
    add({pk for pk, _ in targets} - recount, list(runs))
    refresh(recount)
    return events


def _engine_finding(row: tuple) -> detection.Finding:
    """Return the engine's finding for a stored row (what fingerprints read of it)."""
    _pk, _run, detector, severity, tool, signature, seqs, message, _issue = row
    return detection.Finding(
        detector, severity, tool or None, signature, tuple(seqs), 0, 0, 0, message, ""
    )


def _steps_for(
    findings: list[tuple[int, detection.Finding]],
) -> dict[int, dict[int, detection.Step]]:
    """Read the stored steps the fingerprints need: run id -> seq -> step."""
    wanted: dict[int, set[int]] = defaultdict(set)
    for run_id, found in findings:
        wanted[run_id].update(fingerprints.seqs_needed(found))
    out: dict[int, dict[int, detection.Step]] = defaultdict(dict)
    if not wanted:
        return out
    where = Q()
    for run_id, seqs in wanted.items():
        where |= Q(run_id=run_id, seq__in=sorted(seqs))
    for row in Step.objects.filter(where).values_list("run_id", *storage.STEP_FIELDS):
        step = storage.engine_step(*row[1:])
        out[row[0]][step.seq] = step
    return out


def _create_issues(first: dict[tuple[int, str], tuple], marks: dict) -> set[int]:
    """Insert the issues not there yet (ON CONFLICT: a racing worker's insert wins); return
    the ids of those this call created. Inserted in fingerprint order, so two workers never
    wait on each other's new rows in opposite orders."""
    created: set[int] = set()
    now = timezone.now()
    table = LoopIssue._meta.db_table
    with connection.cursor() as cursor:
        for (project_id, mark), row in sorted(first.items(), key=lambda item: item[0]):
            cursor.execute(
                f"""INSERT INTO {table} (project_id, fingerprint, detector, tool, title,
                        example_message, state, resolved_in_version, created_at, run_count,
                        finding_count, waste_steps, agents, models_seen, versions)
                    VALUES (%s, %s, %s, %s, %s, %s, 'open', '', %s, 0, 0, 0, '{{}}', '{{}}',
                        '{{}}')
                    ON CONFLICT (project_id, fingerprint) DO NOTHING RETURNING id""",
                [project_id, mark, row[2], row[4], marks[row[0]][1][:300], row[7], now],
            )
            hit = cursor.fetchone()
            if hit:
                created.add(hit[0])
    return created


def _lock_issues(first: dict[tuple[int, str], tuple], also: Iterable[int]) -> dict:
    """Lock the affected issue rows in id order; return (project, fingerprint) -> issue id."""
    if not first and not also:
        return {}
    where = Q(pk__in=list(also))
    by_project: dict[int, list[str]] = defaultdict(list)
    for project_id, mark in first:
        by_project[project_id].append(mark)
    for project_id, marks in by_project.items():
        where |= Q(project_id=project_id, fingerprint__in=marks)
    locked = LoopIssue.objects.select_for_update().filter(where).order_by("pk")
    return {
        (project_id, mark): pk
        for pk, project_id, mark in locked.values_list("pk", "project_id", "fingerprint")
        if (project_id, mark) in first
    }


def _attach(
    rows: list[tuple], marks: dict, runs: dict[int, Run], issue_of: dict
) -> set[tuple[int, int | None]]:
    """Write each finding's fingerprint and issue, with one statement; return the issues
    it attached findings to, each with the issue a finding had before (or None)."""
    if not rows:
        return set()
    ids, prints, issues = [], [], []
    targets = set()
    for row in rows:
        mark = marks[row[0]][0]
        ids.append(row[0])
        prints.append(mark)
        grouped = row[3] != Finding.Severity.INFO
        issue = issue_of.get((runs[row[1]].project_id, mark)) if grouped else None
        issues.append(issue)
        if issue is not None:
            targets.add((issue, row[8]))
    table = Finding._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {table} AS f SET fingerprint = v.fingerprint, issue_id = v.issue_id
                FROM unnest(%s::bigint[], %s::varchar[], %s::bigint[])
                    AS v(id, fingerprint, issue_id)
                WHERE f.id = v.id""",
            [ids, prints, issues],
        )
    return targets


def _transitions(
    rows: list[tuple], marks: dict, runs: dict[int, Run], issue_of: dict, created: set[int]
) -> list[IssueEvent]:
    """Apply the state rules to the (locked) issues that got findings; return the events."""
    runs_of: dict[int, list[Run]] = defaultdict(list)
    for row in rows:
        pk = issue_of.get((runs[row[1]].project_id, marks[row[0]][0]))
        if pk is not None and row[3] != Finding.Severity.INFO:
            runs_of[pk].append(runs[row[1]])
    events = [IssueEvent(pk, NEW) for pk in sorted(created) if pk in runs_of]
    resolved = LoopIssue.objects.filter(pk__in=list(runs_of), state=LoopIssue.State.RESOLVED)
    now = timezone.now()
    for issue in resolved.order_by("pk"):
        if any(came_back(issue, run) for run in runs_of[issue.pk]):
            LoopIssue.objects.filter(pk=issue.pk).update(
                state=LoopIssue.State.REGRESSED, state_changed_at=now, state_changed_by=None
            )
            events.append(IssueEvent(issue.pk, REGRESSED))
    events.sort(key=lambda event: event.issue_id)
    return events


def came_back(issue: LoopIssue, run: Run) -> bool:
    """Return whether a finding from this run reopens the resolved issue.

    Resolved in a version: the run is of a later version. Resolved without one (or when
    either version cannot be compared): the run started after the issue was resolved.
    """
    if issue.resolved_in_version and run.agent_version:
        later = is_later(run.agent_version, issue.resolved_in_version)
        if later is not None:
            return later
    seen = run.started_at or run.created_at
    return issue.state_changed_at is None or (seen is not None and seen > issue.state_changed_at)


_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(.*)$", re.IGNORECASE)


def version_key(version: str) -> tuple[tuple[int, ...], int, str] | None:
    """Return a sort key for a dotted version (PEP 440-ish), or None when it has none.

    "1.2" == "1.2.0"; a pre-release or dev suffix ("2.0rc1", "2.0-beta") sorts before its
    release, a post or local suffix ("2.0.post1", "2.0+abc") after it.
    """
    match = _VERSION.match(version)
    if match is None:
        return None
    numbers = tuple(int(part) for part in match.group(1).split("."))
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers = numbers[:-1]
    suffix = match.group(2).strip().lower().lstrip(".-_")
    if not suffix:
        rank = 1
    elif suffix.startswith(("post", "+", "p")):
        rank = 2
    else:
        rank = 0  # a, b, rc, dev, alpha, beta, pre, snapshot, ...
    return numbers, rank, suffix


def is_later(version: str, than: str) -> bool | None:
    """Return whether `version` is later than `than`; None when they cannot be compared."""
    mine, theirs = version_key(version), version_key(than)
    if mine is None or theirs is None:
        return None if version != than else False
    return mine > theirs


# -- counters ------------------------------------------------------------------------------

_SEEN = "COALESCE(r.started_at, r.created_at)"
_REFRESH = f"""
WITH agg AS (
    SELECT f.issue_id,
        count(*) AS findings,
        count(DISTINCT f.run_id) AS runs,
        COALESCE(sum(f.waste_steps), 0) AS steps,
        sum(f.waste_tokens) AS tokens,
        sum(f.waste_cost) AS cost,
        sum(f.waste_seconds) AS seconds,
        min({_SEEN}) AS first_seen,
        max({_SEEN}) AS last_seen,
        (array_agg(r.id ORDER BY {_SEEN}, r.id))[1] AS first_run,
        (array_agg(r.id ORDER BY {_SEEN} DESC, r.id DESC))[1] AS last_run,
        COALESCE(array_agg(DISTINCT r.agent) FILTER (WHERE r.agent <> ''), '{{}}') AS agents,
        COALESCE(array_agg(DISTINCT left(r.metadata->>'model', 200))
            FILTER (WHERE COALESCE(r.metadata->>'model', '') <> ''), '{{}}') AS models,
        COALESCE(array_agg(DISTINCT r.agent_version)
            FILTER (WHERE r.agent_version <> ''), '{{}}') AS versions
    FROM {Finding._meta.db_table} f JOIN {Run._meta.db_table} r ON r.id = f.run_id
    WHERE f.issue_id = ANY(%(ids)s)
    GROUP BY f.issue_id
)
UPDATE {LoopIssue._meta.db_table} AS i SET
    finding_count = COALESCE(agg.findings, 0), run_count = COALESCE(agg.runs, 0),
    waste_steps = COALESCE(agg.steps, 0), waste_tokens = agg.tokens, waste_cost = agg.cost,
    waste_seconds = agg.seconds, first_seen = agg.first_seen, last_seen = agg.last_seen,
    first_run_id = agg.first_run, last_run_id = agg.last_run,
    agents = COALESCE(agg.agents, '{{}}'), models_seen = COALESCE(agg.models, '{{}}'),
    versions = COALESCE(agg.versions, '{{}}')
FROM (SELECT unnest(%(ids)s::bigint[]) AS id) AS wanted
LEFT JOIN agg ON agg.issue_id = wanted.id
WHERE i.id = wanted.id
"""
_DAYS = f"""
INSERT INTO {IssueDay._meta.db_table} (issue_id, day, runs, findings, waste_steps)
SELECT f.issue_id, ({_SEEN} AT TIME ZONE 'UTC')::date, count(DISTINCT f.run_id), count(*),
    COALESCE(sum(f.waste_steps), 0)
FROM {Finding._meta.db_table} f JOIN {Run._meta.db_table} r ON r.id = f.run_id
WHERE f.issue_id = ANY(%(ids)s)
GROUP BY 1, 2
"""


_ADD = f"""
WITH new AS (
    SELECT f.issue_id,
        count(*) AS findings,
        count(DISTINCT f.run_id) AS runs,
        COALESCE(sum(f.waste_steps), 0) AS steps,
        sum(f.waste_tokens) AS tokens,
        sum(f.waste_cost) AS cost,
        sum(f.waste_seconds) AS seconds,
        min({_SEEN}) AS first_seen,
        max({_SEEN}) AS last_seen,
        (array_agg(r.id ORDER BY {_SEEN}, r.id))[1] AS first_run,
        (array_agg(r.id ORDER BY {_SEEN} DESC, r.id DESC))[1] AS last_run,
        COALESCE(array_agg(DISTINCT r.agent) FILTER (WHERE r.agent <> ''), '{{}}') AS agents,
        COALESCE(array_agg(DISTINCT left(r.metadata->>'model', 200))
            FILTER (WHERE COALESCE(r.metadata->>'model', '') <> ''), '{{}}') AS models,
        COALESCE(array_agg(DISTINCT r.agent_version)
            FILTER (WHERE r.agent_version <> ''), '{{}}') AS versions
    FROM {Finding._meta.db_table} f JOIN {Run._meta.db_table} r ON r.id = f.run_id
    WHERE f.issue_id = ANY(%(ids)s) AND f.run_id = ANY(%(runs)s)
    GROUP BY f.issue_id
)
UPDATE {LoopIssue._meta.db_table} AS i SET
    finding_count = i.finding_count + new.findings, run_count = i.run_count + new.runs,
    waste_steps = i.waste_steps + new.steps,
    waste_tokens = CASE WHEN i.waste_tokens IS NULL AND new.tokens IS NULL THEN NULL
        ELSE COALESCE(i.waste_tokens, 0) + COALESCE(new.tokens, 0) END,
    waste_cost = CASE WHEN i.waste_cost IS NULL AND new.cost IS NULL THEN NULL
        ELSE COALESCE(i.waste_cost, 0) + COALESCE(new.cost, 0) END,
    waste_seconds = CASE WHEN i.waste_seconds IS NULL AND new.seconds IS NULL THEN NULL
        ELSE COALESCE(i.waste_seconds, 0) + COALESCE(new.seconds, 0) END,
    first_run_id = CASE WHEN i.first_seen IS NULL OR new.first_seen < i.first_seen
        THEN new.first_run ELSE i.first_run_id END,
    last_run_id = CASE WHEN i.last_seen IS NULL OR new.last_seen >= i.last_seen
        THEN new.last_run ELSE i.last_run_id END,
    first_seen = LEAST(i.first_seen, new.first_seen),
    last_seen = GREATEST(i.last_seen, new.last_seen),
    agents = ARRAY(SELECT DISTINCT a FROM unnest(i.agents || new.agents) AS a ORDER BY a),
    models_seen = ARRAY(
        SELECT DISTINCT m FROM unnest(i.models_seen || new.models) AS m ORDER BY m),
    versions = ARRAY(SELECT DISTINCT v FROM unnest(i.versions || new.versions) AS v ORDER BY v)
FROM new WHERE i.id = new.issue_id
"""
_ADD_DAYS = f"""
INSERT INTO {IssueDay._meta.db_table} AS d (issue_id, day, runs, findings, waste_steps)
SELECT f.issue_id, ({_SEEN} AT TIME ZONE 'UTC')::date, count(DISTINCT f.run_id), count(*),
    COALESCE(sum(f.waste_steps), 0)
FROM {Finding._meta.db_table} f JOIN {Run._meta.db_table} r ON r.id = f.run_id
WHERE f.issue_id = ANY(%(ids)s) AND f.run_id = ANY(%(runs)s)
GROUP BY 1, 2
ON CONFLICT (issue_id, day) DO UPDATE SET runs = d.runs + EXCLUDED.runs,
    findings = d.findings + EXCLUDED.findings, waste_steps = d.waste_steps + EXCLUDED.waste_steps
"""


def add(issue_ids: Iterable[int], run_ids: list[int]) -> None:
    """Add the findings of these runs to the counters and days of these issues.

    Only for findings the issues have not counted yet (`group_runs` recounts the others),
    with the issue rows locked: the cost is that of the new findings, not of the issue.
    """
    ids = sorted(set(issue_ids))
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(_ADD, {"ids": ids, "runs": run_ids})
        cursor.execute(_ADD_DAYS, {"ids": ids, "runs": run_ids})


def refresh(issue_ids: Iterable[int]) -> None:
    """Recompute the counters and days of these issues from their findings.

    Call it with the issue rows locked (`group_runs` does): the counts are then those of
    the findings committed so far plus this transaction's own.
    """
    ids = sorted(set(issue_ids))
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(_REFRESH, {"ids": ids})
        cursor.execute(
            f"DELETE FROM {IssueDay._meta.db_table} WHERE issue_id = ANY(%(ids)s)", {"ids": ids}
        )
        cursor.execute(_DAYS, {"ids": ids})


def regroup(projects: QuerySet[Project] | None = None, *, batch: int = 500) -> int:
    """Rebuild the issues of these projects (all by default) from their findings.

    Every finding is fingerprinted again; issues keep their state (an issue is its
    project and fingerprint); issues left with no finding keep their row, at zero. Runs
    are grouped `batch` at a time, each batch in its own transaction. Returns the runs read.
    """
    projects = projects if projects is not None else Project.objects.all()
    total = 0
    for project in projects.order_by("pk"):
        with transaction.atomic():
            stale = list(
                LoopIssue.objects.select_for_update()
                .filter(project=project)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            Finding.objects.filter(run__project=project).update(issue=None, fingerprint="")
            refresh(stale)
        run_ids = list(
            Run.objects.filter(project=project, findings__isnull=False)
            .distinct()
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        for start in range(0, len(run_ids), batch):
            chunk = run_ids[start : start + batch]
            with transaction.atomic():
                runs = Run.objects.select_for_update().filter(pk__in=chunk).order_by("pk")
                group_runs(list(runs))
            total += len(chunk)
    return total


# -- people's judgement --------------------------------------------------------------------

STATES = {"resolve": LoopIssue.State.RESOLVED, "ignore": LoopIssue.State.IGNORED,
          "reopen": LoopIssue.State.OPEN}  # fmt: skip


class StateError(ValueError):
    """A state change that is not allowed (the message says why)."""


def set_state(issue: LoopIssue, state: str, *, user=None, version: str = "") -> LoopIssue:
    """Set an issue's state as a person decides: open, resolved (optionally in `version`)
    or ignored. Raises StateError for an unknown state or a version on another state.

    Resolving in a version that runs of a later version still loop in gives a regressed
    issue at once: it is back already.
    """
    valid = {value for value in LoopIssue.State.values if value != LoopIssue.State.REGRESSED}
    state = STATES.get(state, state)
    if state not in valid:
        raise StateError(f"state must be one of {', '.join(sorted(valid))}")
    version = version.strip()
    if version and state != LoopIssue.State.RESOLVED:
        raise StateError("only a resolved issue takes a version")
    if len(version) > 100:
        raise StateError("the version is longer than 100 characters")
    with transaction.atomic():
        locked = LoopIssue.objects.select_for_update().get(pk=issue.pk)
        if version and any(is_later(seen, version) for seen in locked.versions):
            state = LoopIssue.State.REGRESSED
        locked.state = state
        locked.resolved_in_version = version
        locked.state_changed_at = timezone.now()
        locked.state_changed_by = user if user is not None and user.is_authenticated else None
        locked.save(
            update_fields=["state", "resolved_in_version", "state_changed_at", "state_changed_by"]
        )
    return locked


# -- reading -------------------------------------------------------------------------------

SORTS = {
    "last_seen": ("-last_seen", "-id"),
    "runs": ("-run_count", "-id"),
    "waste": ("-waste_steps", "-id"),
}


@dataclass(slots=True)
class IssueFilter:
    """What the Issues list shows: a state, detector, tool, agent version, and an order."""

    state: str = ""
    detector: str = ""
    tool: str = ""
    version: str = ""
    sort: str = "last_seen"


def issues_for(user) -> QuerySet[LoopIssue]:
    """Return the issues of the user's projects."""
    return LoopIssue.objects.filter(project__in=access.projects_for(user))


def get_issue(user, issue_id: int) -> LoopIssue:
    """Return the issue if the user may see it; 404 (never 403, so ids do not leak)."""
    return get_object_or_404(
        issues_for(user).select_related("project", "first_run", "last_run"), pk=issue_id
    )


def filter_issues(issues: QuerySet[LoopIssue], wanted: IssueFilter) -> QuerySet[LoopIssue]:
    """Return the issues that have findings and match the filter, in its order."""
    issues = issues.filter(finding_count__gt=0)
    if wanted.state:
        issues = issues.filter(state=wanted.state)
    if wanted.detector:
        issues = issues.filter(detector=wanted.detector)
    if wanted.tool:
        issues = issues.filter(tool=wanted.tool)
    if wanted.version:
        issues = issues.filter(versions__contains=[wanted.version])
    return issues.order_by(*SORTS.get(wanted.sort, SORTS["last_seen"]))


def days_of(issue_ids: Iterable[int], since: datetime) -> dict[int, dict]:
    """Return issue id -> {day: runs} for the days since `since` (for sparklines)."""
    out: dict[int, dict] = defaultdict(dict)
    rows = IssueDay.objects.filter(issue_id__in=list(issue_ids), day__gte=since.date())
    for issue_id, day, runs in rows.values_list("issue_id", "day", "runs"):
        out[issue_id][day] = runs
    return out


def versions_seen(project_ids: list[int]) -> list[str]:
    """Return the agent versions the issues of these projects were seen in (unordered)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT DISTINCT unnest(versions) FROM {LoopIssue._meta.db_table}
                WHERE project_id = ANY(%s) AND finding_count > 0""",
            [project_ids],
        )
        return [row[0] for row in cursor.fetchall()]


def runs_of(issue: LoopIssue) -> QuerySet[Run]:
    """Return the issue's runs, newest first (`issue.run_count` says how many)."""
    grouped = Finding.objects.filter(issue=issue).values("run_id")
    return Run.objects.filter(pk__in=grouped).order_by("-started_at", "-created_at", "-id")


def by_version(issue: LoopIssue) -> list[tuple[str, int, int]]:
    """Return (agent version, runs, findings) of the issue, in version order ("" last)."""
    with connection.cursor() as cursor:
        cursor.execute(_BY_VERSION, [issue.pk])
        found = [(version or "", runs, int(count)) for version, runs, count in cursor.fetchall()]
    found.sort(key=lambda row: (version_key(row[0]) is None, version_key(row[0]) or (), row[0]))
    return found


# Findings counted per run first: the join then reads each run once.
_BY_VERSION = f"""
SELECT r.agent_version, count(*), sum(f.n)
FROM (SELECT run_id, count(*) AS n FROM {Finding._meta.db_table} WHERE issue_id = %s
      GROUP BY run_id) AS f
JOIN {Run._meta.db_table} r ON r.id = f.run_id
GROUP BY 1
"""
