"""Loop issues: each project's findings grouped by loop fingerprint across runs.

`analysis.write` calls `group_runs` in its transaction right after it writes a run's
findings, so issues grow as the worker analyzes runs; `regroup` rebuilds a project's issues
from its findings (`manage.py regroup`). An issue's counters are kept run by run under the
issue's row lock: each run's share of an issue is an IssueRun row, taken away when the run is
re-analysed and added again from its new findings (`recount_runs`), so re-analysing a run
never counts it twice, costs the same in a small issue as in a huge one, and two workers
grouping the same loop at once leave the same issue as one after the other would.

States: open -> resolved (optionally "in version X") or ignored, by a person (`set_state`).
A resolved issue that gets a finding from a later version (or, resolved without a version,
from a run that started after it was resolved) becomes regressed; an ignored one stays
ignored and quiet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import date

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import Q, QuerySet
from django.utils import timezone

import detection
from detection import fingerprints
from detection.findings import group_loops

from ..models import Finding, IssueDay, IssueFacet, IssueRun, LoopIssue, Project, Run, Step
from . import storage


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


class StepsExpired(Exception):
    """A run whose steps retention deleted was to be analyzed again; nothing was written."""


# -- grouping -----------------------------------------------------------------------------


def issue_ids_of_runs(run_ids: Iterable[int]) -> set[int]:
    """Return the issues the runs count for now (their IssueRun rows, which outlive the
    findings a re-analysis deletes): `group_runs` locks them with the others, since an
    issue may lose the run."""
    ids = list(run_ids)
    if not ids:
        return set()
    found = IssueRun.objects.filter(run_id__in=ids)
    return set(found.values_list("issue_id", flat=True).distinct())


def group_runs(runs: Iterable[Run]) -> list[IssueEvent]:
    """Fingerprint the (just written) findings of these runs and fold them into issues.

    Call it inside the transaction that wrote the findings. Each warn or stop finding is
    attached to its project's issue for its fingerprint (created if new); info findings get
    a fingerprint but no issue. A finding is fingerprinted once: one that has its
    fingerprint (and its issue, unless info) keeps them, so a live run that fires again
    costs the findings that fired, not all of its own. The affected issues (those the
    findings go to, those the runs counted for before) are locked in id order, then the
    runs' old share of their issues is taken away and the new one added (`recount_runs`:
    the cost does not grow with the issue). Returns one IssueEvent per issue created
    ("new") or resolved and now back ("regressed"), in issue id order; an ignored issue
    gives no event.
    """
    runs = {run.pk: run for run in runs if run.pk is not None}
    if not runs:
        return []
    # The fingerprints read the steps: a run whose steps retention deleted cannot be grouped
    # again, so the analysis writing it rolls back and the run keeps what it had.
    expired = Run.objects.filter(pk__in=list(runs)).exclude(steps_expired_at=None)
    if expired.exists():
        raise StepsExpired(f"the steps of run {expired.values_list('pk', flat=True)[0]} expired")
    # Grouped findings are in the runs' IssueRun rows already (recount_runs made them).
    ungrouped = Q(fingerprint="") | (~Q(severity=Finding.Severity.INFO) & Q(issue=None))
    found = Finding.objects.filter(ungrouped, run_id__in=list(runs))
    fresh = list(found.values_list(*_FINDING_FIELDS))
    before = issue_ids_of_runs(runs) | {row[8] for row in fresh if row[8]}
    engine = {row[0]: _engine_finding(row) for row in fresh}
    marks: dict[int, str] = {}  # finding id -> fingerprint
    first: dict[tuple[int, str], tuple] = {}  # (project, fingerprint) -> its first finding row
    titles: dict[tuple[int, str], str] = {}  # a title per issue (its first finding's)
    leads = [row for row in fresh if row[_LEAD]]  # a loop is fingerprinted by its lead
    for row, steps in _with_steps(leads, engine):
        mark = marks[row[0]] = fingerprints.fingerprint(engine[row[0]], steps)
        key = (runs[row[1]].project_id, mark)
        if row[3] != Finding.Severity.INFO and key not in first:
            first[key] = row
            titles[key] = fingerprints.describe(engine[row[0]], steps)
    alone = []  # the others join their lead's issue, unless it is not among these rows
    for row, lead in _loop_leads(fresh):
        mark = marks.get(lead[0]) if lead is not None else None
        if mark is None:
            alone.append(row)
        else:
            marks[row[0]] = mark
    for row, steps in _with_steps(alone, engine):  # a loop of its own
        marks[row[0]] = fingerprints.fingerprint(engine[row[0]], steps)
    created = _create_issues(first, titles)
    issue_of = _lock_issues(first, before)
    grouped = [  # each fresh finding's issue; info findings get none
        issue_of.get((runs[row[1]].project_id, marks[row[0]]))
        if row[3] != Finding.Severity.INFO
        else None
        for row in fresh
    ]
    _attach(fresh, marks, grouped)
    events = _transitions(fresh, grouped, runs, created)
    recount_runs(sorted(runs))
    return events


# What group_runs reads of a finding (the engine's finding, the issue it may keep, its loop).
_FINDING_FIELDS = (
    "pk", "run_id", "detector", "severity", "tool", "signature", "seqs", "message", "issue_id",
    "fired_at", "loop", "lead",
)  # fmt: skip
_LEAD = 11


def _loop_leads(rows: list[tuple]) -> Iterator[tuple[tuple, tuple | None]]:
    """Yield each finding row that does not lead its loop, with the row that does (None
    when that one is not among the rows). A loop is named by its lead's position in its
    run's findings, in their stored order (fired_at, id)."""
    followers = [row for row in rows if not row[_LEAD]]
    if not followers:
        return
    ordered: dict[int, list[tuple]] = {}
    for row in sorted(rows, key=lambda r: (r[9], r[0])):
        ordered.setdefault(row[1], []).append(row)
    for row in followers:
        run_rows, index = ordered[row[1]], row[10]
        lead = run_rows[index] if 0 <= index < len(run_rows) else None
        yield row, lead if lead is not None and lead[_LEAD] else None


def _engine_finding(row: tuple) -> detection.Finding:
    """Return the engine's finding for a stored row (what fingerprints read of it)."""
    _pk, _run, detector, severity, tool, signature, seqs, message, _issue = row[:9]
    return detection.Finding(
        detector, severity, tool or None, signature, tuple(seqs), 0, 0, 0, message, ""
    )


#: Findings whose steps are read at once: a long run has a loop in every turn, and each
#: loop's steps (fingerprints.SEQS_READ of them) are read only while it is fingerprinted.
STEPS_READ_FINDINGS = 100


def _with_steps(
    rows: list[tuple], engine: dict[int, detection.Finding]
) -> Iterator[tuple[tuple, dict[int, detection.Step]]]:
    """Yield each finding row with the stored steps its fingerprint reads (seq -> step),
    reading them for STEPS_READ_FINDINGS findings at a time."""
    for start in range(0, len(rows), STEPS_READ_FINDINGS):
        chunk = rows[start : start + STEPS_READ_FINDINGS]
        steps = _steps_for([(row[1], engine[row[0]]) for row in chunk])
        for row in chunk:
            yield row, steps.get(row[1], {})


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


def _create_issues(first: dict[tuple[int, str], tuple], titles: dict) -> set[int]:
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
                [project_id, mark, row[2], row[4], titles[project_id, mark][:300], row[7], now],
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


def _attach(rows: list[tuple], marks: dict[int, str], grouped: list[int | None]) -> None:
    """Write each finding's fingerprint and issue, with one statement."""
    if not rows:
        return
    ids = [row[0] for row in rows]
    prints = [marks[pk] for pk in ids]
    table = Finding._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {table} AS f SET fingerprint = v.fingerprint, issue_id = v.issue_id
                FROM unnest(%s::bigint[], %s::varchar[], %s::bigint[])
                    AS v(id, fingerprint, issue_id)
                WHERE f.id = v.id""",
            [ids, prints, grouped],
        )


def _transitions(
    rows: list[tuple], grouped: list[int | None], runs: dict[int, Run], created: set[int]
) -> list[IssueEvent]:
    """Apply the state rules to the (locked) issues that got findings; return the events."""
    runs_of: dict[int, list[Run]] = defaultdict(list)
    for row, pk in zip(rows, grouped, strict=True):
        if pk is not None:
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


def version_order(version: str) -> tuple:
    """Return a sort key that puts versions in version order, those without one last."""
    key = version_key(version)
    return key is None, key or (), version


def is_later(version: str, than: str) -> bool | None:
    """Return whether `version` is later than `than`; None when they cannot be compared."""
    mine, theirs = version_key(version), version_key(than)
    if mine is None or theirs is None:
        return None if version != than else False
    return mine > theirs


# -- counters ------------------------------------------------------------------------------
#
# Each (issue, run) pair has an IssueRun row holding what that run added to the issue: its
# findings, waste, day, agent, model and version. Adding a run adds its rows to the issue's
# counters, IssueDay and IssueFacet rows; re-analysing it first subtracts its old rows, so the
# cost is that of the run, not of the issue. first/last run are read back from the IssueRun
# index (ORDER BY seen LIMIT 1) and the agents/models/versions arrays from the facets.

_F, _R, _I = Finding._meta.db_table, Run._meta.db_table, LoopIssue._meta.db_table
_D, _IR, _FA = IssueDay._meta.db_table, IssueRun._meta.db_table, IssueFacet._meta.db_table
_SEEN = "COALESCE(r.started_at, r.created_at)"

# One row per (issue, run) from the findings `where` picks (a run's columns are read through
# its primary key, grouped by).
_RUN_ROWS = f"""
INSERT INTO {_IR} (issue_id, run_id, seen, findings, waste_steps, waste_tokens, waste_cost,
    waste_seconds, agent, model, version)
SELECT f.issue_id, r.id, {_SEEN}, count(*) FILTER (WHERE f.lead),
    COALESCE(sum(f.waste_steps) FILTER (WHERE f.lead), 0), sum(f.waste_tokens) FILTER (WHERE f.lead),
    sum(f.waste_cost) FILTER (WHERE f.lead), sum(f.waste_seconds) FILTER (WHERE f.lead), r.agent,
    COALESCE(left(r.metadata->>'model', 200), ''), r.agent_version
FROM {_F} f JOIN {_R} r ON r.id = f.run_id
WHERE f.issue_id IS NOT NULL AND {{where}}
GROUP BY f.issue_id, r.id
"""


def _waste(name: str, total: str, sign: str) -> str:
    """SQL for a nullable waste sum: NULL when no run of the issue has a value (as SUM is)."""
    if sign == "+":
        return f"""{name} = CASE WHEN t.{total} IS NULL THEN i.{name}
            ELSE COALESCE(i.{name}, 0) + t.{total} END"""
    return f"""{name} = CASE WHEN t.{total} IS NULL THEN i.{name}
        WHEN EXISTS (SELECT 1 FROM {_IR} o WHERE o.issue_id = i.id
            AND o.{name} IS NOT NULL AND o.run_id <> ALL(%(runs)s)) THEN i.{name} - t.{total}
        ELSE NULL END"""


def _apply(sign: str, rows: str) -> list[str]:
    """The statements that add (+) or take away (-) the IssueRun rows `ir` that `rows` picks
    (taking away: those of the runs %(runs)s, then deleted)."""
    totals = f"""
SELECT ir.issue_id, count(*) AS runs, sum(ir.findings) AS findings, sum(ir.waste_steps) AS steps,
    sum(ir.waste_tokens) AS tokens, sum(ir.waste_cost) AS cost, sum(ir.waste_seconds) AS seconds
FROM {_IR} ir WHERE {rows} GROUP BY ir.issue_id
"""
    counters = f"""
UPDATE {_I} AS i SET run_count = i.run_count {sign} t.runs,
    finding_count = i.finding_count {sign} t.findings, waste_steps = i.waste_steps {sign} t.steps,
    {_waste("waste_tokens", "tokens", sign)}, {_waste("waste_cost", "cost", sign)},
    {_waste("waste_seconds", "seconds", sign)}
FROM ({totals}) AS t WHERE i.id = t.issue_id
"""
    days = f"""
SELECT ir.issue_id, (ir.seen AT TIME ZONE 'UTC')::date AS day, count(*) AS runs,
    sum(ir.findings) AS findings, sum(ir.waste_steps) AS steps
FROM {_IR} ir WHERE {rows} GROUP BY 1, 2
"""
    facets = f"""
SELECT ir.issue_id, k.kind, k.value, count(*) AS runs, sum(ir.findings) AS findings
FROM {_IR} ir CROSS JOIN LATERAL (VALUES ('agent', ir.agent), ('model', ir.model),
    ('version', ir.version)) AS k(kind, value)
WHERE {rows} GROUP BY 1, 2, 3
"""
    if sign == "+":
        return [
            counters,
            f"""INSERT INTO {_D} AS d (issue_id, day, runs, findings, waste_steps)
                {days} ON CONFLICT (issue_id, day) DO UPDATE SET runs = d.runs + EXCLUDED.runs,
                findings = d.findings + EXCLUDED.findings,
                waste_steps = d.waste_steps + EXCLUDED.waste_steps""",
            f"""INSERT INTO {_FA} AS a (issue_id, kind, value, runs, findings)
                {facets} ON CONFLICT (issue_id, kind, value) DO UPDATE SET
                runs = a.runs + EXCLUDED.runs, findings = a.findings + EXCLUDED.findings""",
        ]
    return [
        counters,
        f"""UPDATE {_D} AS d SET runs = d.runs - t.runs, findings = d.findings - t.findings,
                waste_steps = d.waste_steps - t.steps
            FROM ({days}) AS t WHERE d.issue_id = t.issue_id AND d.day = t.day""",
        f"""UPDATE {_FA} AS a SET runs = a.runs - t.runs, findings = a.findings - t.findings
            FROM ({facets}) AS t
            WHERE a.issue_id = t.issue_id AND a.kind = t.kind AND a.value = t.value""",
        f"DELETE FROM {_D} WHERE issue_id = ANY(%(ids)s) AND runs = 0",
        f"DELETE FROM {_FA} WHERE issue_id = ANY(%(ids)s) AND runs = 0",
        f"DELETE FROM {_IR} WHERE run_id = ANY(%(runs)s)",
    ]


_BY_RUN, _BY_ISSUE = "ir.run_id = ANY(%(runs)s)", "ir.issue_id = ANY(%(ids)s)"
_ADD_RUNS, _ADD_ISSUES, _SUBTRACT = (
    _apply("+", _BY_RUN),
    _apply("+", _BY_ISSUE),
    _apply("-", _BY_RUN),
)

# The ends (two probes of the issue_run_seen index each) and the arrays (from the facets).
_ENDS = f"""
UPDATE {_I} AS i SET first_seen = f.seen, first_run_id = f.run_id,
    last_seen = l.seen, last_run_id = l.run_id,
    agents = ARRAY(SELECT value FROM {_FA} WHERE issue_id = i.id AND kind = 'agent'
        AND value <> '' ORDER BY value),
    models_seen = ARRAY(SELECT value FROM {_FA} WHERE issue_id = i.id AND kind = 'model'
        AND value <> '' ORDER BY value),
    versions = ARRAY(SELECT value FROM {_FA} WHERE issue_id = i.id AND kind = 'version'
        AND value <> '' ORDER BY value)
FROM unnest(%(ids)s::bigint[]) AS w(id)
LEFT JOIN LATERAL (SELECT seen, run_id FROM {_IR} WHERE issue_id = w.id
    ORDER BY seen, run_id LIMIT 1) AS f ON true
LEFT JOIN LATERAL (SELECT seen, run_id FROM {_IR} WHERE issue_id = w.id
    ORDER BY seen DESC, run_id DESC LIMIT 1) AS l ON true
WHERE i.id = w.id
"""


def recount_runs(run_ids: list[int]) -> set[int]:
    """Replace what these runs count for in their issues by what their findings give now.

    Call it with the issues of both (the IssueRun rows of the runs, and the issues their
    findings are attached to) locked, as `group_runs` does: the runs' old IssueRun rows are
    taken away from the counters, days and facets of their issues, new ones are made from
    the findings and added, and the ends and arrays of every issue touched are read back.
    The cost is that of the runs, not of the issues. Returns the issues touched.
    """
    if not run_ids:
        return set()
    params = {"runs": run_ids}
    with connection.cursor() as cursor:
        touched = issue_ids_of_runs(run_ids)
        if touched:  # no IssueRun rows (new runs): nothing to take away, six statements less
            _take_away(cursor, run_ids, touched)
        made = _RUN_ROWS.format(where="f.run_id = ANY(%(runs)s)") + " RETURNING issue_id"
        cursor.execute(made, params)
        touched |= {row[0] for row in cursor.fetchall()}
        for statement in _ADD_RUNS:
            cursor.execute(statement, params)
        cursor.execute(_ENDS, {"ids": sorted(touched)})
    return touched


def _take_away(cursor: CursorWrapper, run_ids: list[int], issue_ids: set[int]) -> None:
    """Take the runs' IssueRun rows away from the counters, days and facets of their issues
    (`issue_ids`, locked), and delete them; the caller reads the issues' ends back."""
    params = {"runs": list(run_ids), "ids": sorted(issue_ids)}
    for statement in _SUBTRACT:
        cursor.execute(statement, params)


def forget_runs(run_ids: list[int]) -> set[int]:
    """Take these runs' shares away from their issues, as their deletion must: the counters,
    days and facets lose what the runs added, the runs' IssueRun rows go, and each issue's
    ends and arrays are read back from the runs it keeps. Returns the issues touched.

    Call it in the transaction that deletes the runs, with the runs' rows locked (as
    `deletion.delete_runs` does): an analysis of one of them waits, or finds it gone.
    """
    touched = issue_ids_of_runs(run_ids)
    if not touched:
        return set()
    _lock_issues({}, touched)
    with connection.cursor() as cursor:
        _take_away(cursor, run_ids, touched)
        cursor.execute(_ENDS, {"ids": sorted(touched)})
    return touched


def refresh(issue_ids: Iterable[int]) -> None:
    """Recompute the counters, days and facets of these issues from all their findings.

    The full rebuild (`regroup`, the bench): the issues' IssueRun rows are made again from
    their findings and added to counters set back to zero. Call it with the issue rows
    locked: the counts are then those of the findings committed so far plus this
    transaction's own.
    """
    ids = sorted(set(issue_ids))
    if not ids:
        return
    params = {"ids": ids}
    with connection.cursor() as cursor:
        for table in (_IR, _D, _FA):
            cursor.execute(f"DELETE FROM {table} WHERE issue_id = ANY(%(ids)s)", params)
        cursor.execute(
            f"""UPDATE {_I} SET run_count = 0, finding_count = 0, waste_steps = 0,
                    waste_tokens = NULL, waste_cost = NULL, waste_seconds = NULL
                WHERE id = ANY(%(ids)s)""",
            params,
        )
        cursor.execute(_RUN_ROWS.format(where="f.issue_id = ANY(%(ids)s)"), params)
        for statement in _ADD_ISSUES:
            cursor.execute(statement, params)
        cursor.execute(_ENDS, params)


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
            # The findings of runs whose steps expired keep their grouping (no steps to
            # fingerprint again); `refresh` counts them from it.
            Finding.objects.filter(run__project=project, run__steps_expired_at=None).update(
                issue=None, fingerprint=""
            )
            refresh(stale)
        run_ids = list(
            Run.objects.filter(project=project, findings__isnull=False, steps_expired_at=None)
            .distinct()
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        for start in range(0, len(run_ids), batch):
            chunk = run_ids[start : start + batch]
            with transaction.atomic():
                runs = Run.objects.select_for_update().filter(pk__in=chunk).order_by("pk")
                runs = list(runs)
                mark_loops(chunk)
                group_runs(runs)
            total += len(chunk)
    return total


def mark_loops(run_ids: list[int]) -> int:
    """Mark which stored findings of these runs are one loop (`Finding.loop`, `lead`), as
    the engine marks them (detection.findings.group_loops), for findings stored before
    loops were grouped; returns the rows changed. A lead keeps its own waste until the run
    is analyzed again (which gives it the loop's, each step once)."""
    rows = (
        Finding.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "fired_at", "id")
        .values_list("pk", "run_id", "detector", "severity", "seqs", "fired_at", "loop", "lead")
    )
    by_run: dict[int, list[tuple]] = defaultdict(list)
    for row in rows:
        by_run[row[1]].append(row)
    changed = []
    for found in by_run.values():
        engine = [
            detection.Finding(r[2], r[3], None, "", tuple(r[4]), 0, 0, r[5], "", "") for r in found
        ]
        for index, (row, lead) in enumerate(zip(found, group_loops(engine), strict=True)):
            if (row[6], row[7]) != (lead, lead == index):
                changed.append(Finding(pk=row[0], loop=lead, lead=lead == index))
    Finding.objects.bulk_update(changed, ["loop", "lead"], batch_size=1000)
    return len(changed)


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

    def __post_init__(self) -> None:
        for item in fields(self):  # request text: PostgreSQL cannot compare with a NUL in it
            setattr(self, item.name, storage.clean_text(getattr(self, item.name)))


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


def days_of(issue_ids: Iterable[int], since: date) -> dict[int, dict]:
    """Return issue id -> {day: runs} for the days from `since` on (for sparklines)."""
    out: dict[int, dict] = defaultdict(dict)
    rows = IssueDay.objects.filter(issue_id__in=list(issue_ids), day__gte=since)
    for issue_id, day, runs in rows.values_list("issue_id", "day", "runs"):
        out[issue_id][day] = runs
    return out


def versions_seen(project_ids: list[int]) -> list[str]:
    """Return the agent versions the issues of these projects were seen in, in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT DISTINCT unnest(versions) FROM {LoopIssue._meta.db_table}
                WHERE project_id = ANY(%s) AND finding_count > 0""",
            [project_ids],
        )
        return sorted((row[0] for row in cursor.fetchall()), key=version_order)


def runs_of(issue: LoopIssue) -> QuerySet[IssueRun]:
    """Return the ids of the issue's runs, newest first, read along the issue_run_seen index
    alone (`issue.run_count` says how many): slice a page of them, then `runs_by_id`."""
    ordered = IssueRun.objects.filter(issue=issue).order_by("-seen", "-run_id")
    return ordered.values_list("run_id", flat=True)


def runs_by_id(run_ids: list[int]) -> list[Run]:
    """Return these runs in this order (for a page of `runs_of`), without their big columns."""
    found = Run.objects.defer("search", "summary").in_bulk(run_ids)
    return [found[pk] for pk in run_ids if pk in found]


def by_version(issue: LoopIssue) -> list[tuple[str, int, int]]:
    """Return (agent version, runs, findings) of the issue, in version order ("" last)."""
    found = list(
        issue.facets.filter(kind=IssueFacet.Kind.VERSION).values_list("value", "runs", "findings")
    )
    found.sort(key=lambda row: version_order(row[0]))
    return found


def example_of(issue: LoopIssue) -> Finding | None:
    """Return the issue's example finding: the first finding of its first run."""
    if issue.first_run_id is None:
        return None
    found = Finding.objects.filter(issue=issue, run_id=issue.first_run_id).select_related("run")
    return found.order_by("id").first()
