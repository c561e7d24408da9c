"""The live loop check ("would this next call be a loop?") and live runs.

`check_next_call` replays a run (stored, or given) on every call. A live run instead is
appended to as it happens and keeps its Monitor: the run row (`next_seq`, `version`) and the
stored steps are the state every web process shares; `live_state` keeps each process's
Monitor of the run caught up with them. An append locks the run row, so appends to one run
serialize across processes: each step gets one seq, none is lost or counted twice.

An append is the hot path of the guard, so it costs a fixed number of statements whatever the
run's length: one lookup (the run and the policy version), then in one transaction the row
lock (which also reads the step ids the batch repeats), the catch-up read only when another
process appended since, and one statement that inserts the steps and updates the run. No
model is made unless a finding fires; then the findings are written, and the worker is
asked (once until it has run) to fold them into the run's loop issues a few seconds later.

Appended values are cut as imported ones are (`importers.reading.clip_json`: long strings,
deep nesting). A session id must be usable in the run's URL: one that is `.` or `..`, or
holds `/`, `\\` or a control character, is refused when the run would be opened.

The guard's own words are not a loop: a `stop` answer's message starts with `GUARD_MARK`,
and a step appended later whose result carries that message, for a tool the guard stopped
in this run, is stored as the guard's (a `system` step with the refusal as its text), not
as a result of the tool, so the refusal an agent's framework hands back as the tool's
result is never counted as one more failure of the call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet, Subquery
from django.utils import timezone

import detection

from ..importers.reading import DEFAULT_LIMITS, clip_json, clip_strings
from ..models import Finding, LedgerRow, Project, Run, Step, StoppedCall, Verdict
from . import alerts, analysis, issues, live_state, policy, queue, storage

LIVE_FORMAT = "live"  # the format of runs opened through the live API
MAX_TOOLS = 200  # tool names a run row lists
# last_append_at is indexed (the quiet-run sweep), so writing it makes the run's UPDATE touch
# every index of the row; it is only moved forward when it is older than this.
APPEND_AT_STEP = timedelta(seconds=1)
# How a stop answer's message begins: what the agent's model reads instead of the result,
# and how a refusal handed back as a tool's result is recognised (`_guard_words`).
GUARD_MARK = "[loopboard guard]"
GUARD_SEARCH_CHARS = 4000  # how far into a result the mark is looked for


class UnusableSessionId(ValueError):
    """A session id that cannot address its run's URL (the API answers 400)."""


# The row lock of an append, with what it reads: the run's columns, the steps it already holds
# of the ids given, and `next_seq` as the statement's snapshot saw it. When that equals the
# locked row's, the snapshot held every committed step of the run (steps and next_seq commit
# together, under this lock); otherwise an append committed while this one waited for the
# lock, and the ids are read again.
LOCK_SQL = """
SELECT r.next_seq, r.verdict, r.tools, r.detectors, r.issues_queued_at IS NOT NULL,
       (SELECT o.next_seq FROM runs_run o WHERE o.id = r.id),
       ARRAY(SELECT s.source_id FROM runs_step s
             WHERE s.run_id = r.id AND s.source_id <> '' AND s.source_id = ANY(%(ids)s)
             ORDER BY s.seq),
       ARRAY(SELECT s.seq FROM runs_step s
             WHERE s.run_id = r.id AND s.source_id <> '' AND s.source_id = ANY(%(ids)s)
             ORDER BY s.seq)
FROM runs_run r WHERE r.id = %(run)s FOR UPDATE OF r
"""
# The new steps (storage.INSERT_STEPS_SQL) and the run row, in one statement.
WRITE_SQL = f"""
WITH new_steps AS ({storage.INSERT_STEPS_SQL})
UPDATE runs_run SET
    live = true, next_seq = %(next_seq)s, version = version + 1, step_count = %(next_seq)s,
    tool_call_count = tool_call_count + %(tool_calls)s, tools = %(tools)s::varchar(200)[],
    started_at = LEAST(started_at, %(first)s::timestamptz),
    ended_at = GREATEST(ended_at, %(last)s::timestamptz),
    verdict = %(verdict)s, detectors = %(detectors)s::varchar(40)[],
    stall_score = %(stall_score)s, waste_steps = %(waste_steps)s,
    waste_tokens = %(waste_tokens)s, waste_cost = %(waste_cost)s,
    waste_seconds = %(waste_seconds)s,
    issues_queued_at = CASE WHEN %(queue_issues)s AND issues_queued_at IS NULL THEN %(now)s
                            ELSE issues_queued_at END,
    last_append_at = CASE WHEN last_append_at IS NULL OR last_append_at < %(stale)s
                          THEN %(now)s ELSE last_append_at END
WHERE id = %(run)s
"""


@dataclass(slots=True)
class Appended:
    """What an append did: where each given step is, and what fired on the new ones."""

    run_id: int
    seqs: list[int]
    findings: list[detection.Finding]
    verdict: str


def check_next_call(
    project: Project,
    tool: str,
    args: Any = None,
    *,
    run: Run | None = None,
    steps: Iterable[detection.Step] = (),
) -> detection.Check:
    """Replay a run's steps (a stored run, or the steps given) through the engine's Monitor
    with the project's policy, then ask whether `tool(args)` would be a loop.

    The answer's message is what the agent should tell its model; a `stop` message starts
    with `GUARD_MARK`, as the live check's does.
    """
    monitor = detection.Monitor(policy.engine_policy(project))
    history = storage.iter_steps(run.pk) if run is not None else steps
    for step in history:
        monitor.observe(step)
    return _marked(monitor.check(tool, args))


def live_runs(project: Project):  # type: ignore[no-untyped-def]
    """The project's live-API runs (live now or ended)."""
    return Run.objects.filter(project=project, format=LIVE_FORMAT)


def stopped_calls(run: Run) -> QuerySet[StoppedCall]:
    """The calls the guard stopped in a run, by the step they came before; none (and no
    query) for a run that was not sent live."""
    if run.format != LIVE_FORMAT:
        return StoppedCall.objects.none()
    return run.stopped_calls.all()


def session_id(external_id: str) -> str:
    """Return a session id as it is stored (bounded, no NUL)."""
    return storage.clean_text(external_id[:255])


def check_session_id(external_id: str) -> None:
    """Raise UnusableSessionId for a session id its run's URLs could not carry: empty, `.`
    or `..` (dot segments, which clients resolve away), or holding `/` or `\\` (a path
    separator even percent-encoded, through proxies and the router) or a control character.
    """
    if external_id.strip() in ("", ".", ".."):
        raise UnusableSessionId(
            f"the session id {external_id!r} cannot name a run: it is empty, '.' or '..'"
        )
    bad = sorted({c for c in external_id if c in "/\\" or ord(c) < 32 or 127 <= ord(c) < 160})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise UnusableSessionId(
            f"the session id {external_id[:80]!r} holds {shown}: a session id may not hold "
            "'/', '\\' or control characters (its run's URLs could not address it)"
        )


def find_run(project: Project, external_id: str) -> Run | None:
    """Return the project's live-API run of this session id, or None."""
    return live_runs(project).filter(external_id=session_id(external_id)).first()


def open_run(
    project: Project, external_id: str, *, name: str = "", metadata: dict | None = None
) -> Run:
    """Return the live run of this session id, opening it first if there is none."""
    run = find_run(project, external_id)
    if run is not None:
        return run
    check_session_id(external_id)
    now = timezone.now()
    try:
        with transaction.atomic():
            return Run.objects.create(
                project=project,
                format=LIVE_FORMAT,
                external_id=session_id(external_id),
                name=storage.clean_text((name or external_id)[:255]),
                metadata=storage.as_stored(metadata or {}),
                verdict=Verdict.OK,
                live=True,
                last_append_at=now,
            )
    except IntegrityError:  # opened meanwhile by another request
        return live_runs(project).get(external_id=session_id(external_id))


def append_steps(project: Project, external_id: str, calls: Sequence[dict[str, Any]]) -> Appended:
    """Store steps at the end of a live run (opened if missing, reopened if ended) and return
    their seqs and the findings that fire on them.

    A step whose `id` the run already holds is not stored again; its seq is returned.
    Raises policy.PolicyInvalid when the project's policy cannot be used, and
    UnusableSessionId when the run would be opened under an unusable session id.
    """
    found = _session_run(project, external_id)
    if found is None:
        open_run(project, external_id)
        found = _session_run(project, external_id)
        assert found is not None, "a live run that was just opened"
    run_id, _, version = found
    engine_policy = live_state.engine_policy(project, version)
    # Inside a caller's transaction the append may still be rolled back after it returns:
    # then this process must not keep a Monitor that saw it.
    durable = not transaction.get_connection().in_atomic_block
    watch = live_state.watch(run_id, engine_policy)
    with watch.lock:
        try:
            with transaction.atomic():
                return _append_locked(project, run_id, calls, watch)
        except BaseException:
            durable = False  # it may have seen steps that were rolled back
            raise
        finally:
            if not durable:
                live_state.forget(run_id, watch)


def _session_run(project: Project, external_id: str) -> tuple[int, int, int] | None:
    """Return the session's live run (its id and `next_seq`) and the project's policy
    version, in one query; None when the session has no run."""
    runs = live_runs(project).filter(external_id=session_id(external_id))
    version = Subquery(policy.version_query(project))
    found = runs.annotate(policy_version=version)
    return found.values_list("pk", "next_seq", "policy_version").first()


def _append_locked(
    project: Project, run_id: int, calls: Sequence[dict[str, Any]], watch: live_state.Watch
) -> Appended:
    ids = [storage.clean_text(str(c["id"])[:255]) for c in calls if c.get("id")]
    with connection.cursor() as cursor:
        cursor.execute(LOCK_SQL, {"run": run_id, "ids": ids})
        next_seq, verdict, tools, detectors, issues_queued, seen_next_seq, known_ids, known_seqs = (
            cursor.fetchone()
        )
    if watch.seen > next_seq:  # read under both locks: it saw steps that are gone
        watch.reset()
    watch.catch_up(run_id, next_seq)  # what other processes appended since
    known = dict(zip(known_ids, known_seqs, strict=True))
    if ids and seen_next_seq != next_seq:  # the lock waited: read them as they are now
        found = Step.objects.filter(run_id=run_id, source_id__in=ids)
        known = dict(found.values_list("source_id", "seq"))
    seqs: list[int] = []
    rows: list[tuple] = []
    repeats: list[tuple] = []  # the ledger rows of the new steps, as analysis writes them
    fired: list[detection.Finding] = []
    names = set(tools)
    refused = _stopped_tools(run_id, calls)
    for call in calls:
        source_id = storage.clean_text(str(call["id"])[:255]) if call.get("id") else ""
        if source_id in known:
            seqs.append(known[source_id])
            continue
        if refused and str(call.get("tool") or "") in refused and _guard_words(call):
            call = _as_guard_step(call)
        values, step = storage.step_values(run_id, step_from_call(watch.seen, call), watch.policy)
        rows.append(values)
        if source_id:
            known[source_id] = step.seq
        if step.tool and len(names) < MAX_TOOLS:
            names.add(step.tool)  # cut to its column by step_values
        seqs.append(step.seq)
        fired.extend(watch.observe(step))
        repeat = watch.monitor.last_repeat
        if repeat is not None:
            row = analysis.ledger_row(run_id, step.seq, step.tool, *repeat)
            if row is not None:
                repeats.append(row)
    if not rows:  # only retries: nothing changes
        return Appended(run_id, seqs, [], watch.verdict if verdict == Verdict.PENDING else verdict)
    if fired or verdict == Verdict.PENDING:
        verdict = watch.verdict
        detectors = sorted({*detectors, *(f.detector for f in fired if f.severity != "info")})
    # A loop that fired joins its issues in the worker, soon: queued once until it has run.
    group = bool(fired) and not issues_queued
    _write_append(run_id, rows, sorted(names), watch.seen, verdict, detectors, group, watch)
    if repeats:  # the timeline's ×count of each step, as the final analysis gives it
        storage.copy_rows(LedgerRow._meta.db_table, analysis.LEDGER_COLUMNS, repeats)
    if fired:
        run = Run(pk=run_id, project=project)
        _store_fired(run, fired)
        issues.mark_loops([run_id])  # one loop seen by several detectors, as at the end
        alerts.on_live_findings(run, fired)  # queued on commit: the append does not wait
    if group:
        queue.queue_live_issues(run_id)
    return Appended(run_id, seqs, fired, verdict)


def _guard_words(call: dict[str, Any]) -> bool:
    """Whether a call's result carries the guard's refusal (`GUARD_MARK`)."""
    result = call.get("result")
    if result is None:
        return False
    if not isinstance(result, str):
        try:
            result = json.dumps(result, ensure_ascii=False, default=str)[:GUARD_SEARCH_CHARS]
        except (TypeError, ValueError, RecursionError):
            return False
    return GUARD_MARK in result[:GUARD_SEARCH_CHARS]


def _stopped_tools(run_id: int, calls: Sequence[dict[str, Any]]) -> set[str]:
    """The tools of this batch the guard stopped in the run, only looked up (one query)
    when a step's result carries the guard's mark."""
    marked = {str(c.get("tool")) for c in calls if c.get("tool") and _guard_words(c)}
    if not marked:
        return set()
    stopped = StoppedCall.objects.filter(run_id=run_id, tool__in=[t[:200] for t in marked])
    return {t for t in marked if t[:200] in set(stopped.values_list("tool", flat=True))}


def _as_guard_step(call: dict[str, Any]) -> dict[str, Any]:
    """The guard's refusal handed back as a tool's result, as the guard's own step: a
    `system` step whose text says which call was refused and why (no tool, no result)."""
    result = call.get("result")
    words = result if isinstance(result, str) else json.dumps(result, default=str)
    return {
        "kind": "system",
        "id": call.get("id"),
        "parent_id": call.get("parent_id"),
        "lane": call.get("lane"),
        "text": f"{call.get('tool')} not run: {words}",
        "started_at": call.get("started_at"),
        "ended_at": call.get("ended_at"),
        "ts": call.get("ts"),
    }


def _write_append(
    run_id: int,
    rows: list[tuple],
    tools: list[str],
    next_seq: int,
    verdict: str,
    detectors: list,
    queue_issues: bool,
    watch: live_state.Watch,
) -> None:
    """Insert the new steps (`storage.step_values` rows, as COPY writes them at ingest) and
    update the run row, in one statement: one round trip, whatever the batch's size. The
    run's stall score and waste are the Monitor's so far, as the final analysis gives them."""
    params: dict[str, Any] = storage.step_arrays(rows)
    times = [t for t in (*params["started_at"], *params["ended_at"]) if t is not None]
    now = timezone.now()
    waste = watch.monitor.waste()
    params.update(
        run=run_id,
        next_seq=next_seq,
        tool_calls=sum(1 for kind in params["kind"] if kind == "tool_call"),
        tools=tools,
        first=min(times) if times else None,
        last=max(times) if times else None,
        verdict=verdict,
        detectors=detectors,
        queue_issues=queue_issues,
        stall_score=watch.monitor.stall_score,
        waste_steps=waste.steps,
        waste_tokens=waste.tokens,
        waste_cost=waste.cost,
        waste_seconds=waste.seconds,
        stale=now - APPEND_AT_STEP,
        now=now,
    )
    with connection.cursor() as cursor:
        cursor.execute(WRITE_SQL, params)


def group_live_issues(run_id: int) -> list[issues.IssueEvent]:
    """Fold a live run's findings so far into its loop issues (the worker, a few seconds
    after a loop fired: `queue.queue_live_issues`), and alert on the issues new or back.

    Under the run's row lock, as analysis groups a run; only the findings not grouped yet
    are fingerprinted, so it costs what fired since. An ended run is left to its final
    analysis, which groups it again without counting it twice.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            return []
        Run.objects.filter(pk=run_id).update(issues_queued_at=None)
        if not run.live:
            return []
        events = issues.group_runs([run])
        queue.queue_alerts([], events)
    return events


def _store_fired(run: Run, fired: list[detection.Finding]) -> None:
    """Write the findings that fired, each over its earlier row (a loop that escalates
    from warn to stop keeps its detector, signature and fired_at): the cost follows what
    fired, not the run's length. Counts and seqs go on growing in the Monitor after a
    finding last fired; the final analysis writes them all.

    A row written over keeps its loop issue until the worker groups the run again (queued
    with this append), so the run page goes on linking the loop to its issue."""
    latest = {(f.detector, (f.signature or "")[:200], f.fired_at or 0): f for f in fired}
    if not latest:
        return
    same = Q()
    for detector, signature, fired_at in latest:
        same |= Q(detector=detector, signature=signature, fired_at=fired_at)
    earlier = Finding.objects.filter(same, run_id=run.pk)
    rows = list(earlier.values_list("pk", "detector", "signature", "fired_at", "issue_id"))
    issue_of = {(d, sig, at): issue for _pk, d, sig, at, issue in rows}
    Finding.objects.filter(pk__in=[row[0] for row in rows]).delete()
    written = []
    for key, finding in latest.items():
        row = analysis.finding_row(run, finding)
        row.issue_id = issue_of.get(key)
        written.append(row)
    Finding.objects.bulk_create(written)


def check_live(
    project: Project, external_id: str, tool: str, args: Any = None, *, keep: bool = True
) -> detection.Check:
    """Would `tool(args)` be a loop next in this live run? An unknown run has seen nothing.

    A `stop` answer's message starts with `GUARD_MARK`. With `keep` (a caller that may
    write to the run) a `stop` is kept as the run's StoppedCall at this point (the agent is
    told not to make the call), so the run page shows what the guard stopped. Raises
    policy.PolicyInvalid when the project's policy cannot be used.
    """
    found = _session_run(project, external_id)
    if found is None:
        return detection.Check("ok", (), "")
    run_id, next_seq, version = found
    watch = live_state.watch(run_id, live_state.engine_policy(project, version))
    with watch.lock:
        watch.catch_up(run_id, next_seq)
        answer = watch.monitor.check(tool, args)
        before_seq = watch.seen
    answer = _marked(answer)
    if answer.verdict == Verdict.STOP and keep:
        _keep_stopped(run_id, before_seq, tool, args, answer)
    return answer


def _marked(answer: detection.Check) -> detection.Check:
    """The engine's answer, a `stop` message marked as the guard's own words (`GUARD_MARK`)."""
    if answer.verdict != Verdict.STOP or answer.message.startswith(GUARD_MARK):
        return answer
    return detection.Check(answer.verdict, answer.findings, f"{GUARD_MARK} {answer.message}")


# One row per point of the run and tool: asking again there counts, racing asks included.
STOPPED_SQL = f"""
INSERT INTO {StoppedCall._meta.db_table} AS c
    (run_id, before_seq, tool, args, message, detectors, times, first_at, last_at)
VALUES (%(run)s, %(seq)s, %(tool)s, %(args)s, %(message)s, %(detectors)s::varchar(40)[], 1,
        %(now)s, %(now)s)
ON CONFLICT (run_id, before_seq, tool) DO UPDATE SET times = c.times + 1,
    last_at = EXCLUDED.last_at, message = EXCLUDED.message, detectors = EXCLUDED.detectors
"""


def _keep_stopped(
    run_id: int, before_seq: int, tool: str, args: Any, answer: detection.Check
) -> None:
    """Keep (or count again) the call the guard just answered `stop` for; nothing when the
    run was deleted meanwhile."""
    try:
        shown = json.dumps(args, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        shown = repr(args)
    detectors = sorted({f.detector for f in answer.findings if f.severity == Verdict.STOP})
    params = {
        "run": run_id,
        "seq": before_seq,
        "tool": storage.clean_text(tool[:200]),
        "args": storage.clean_text(shown[: StoppedCall.ARGS_SHOWN]) if args is not None else "",
        "message": storage.clean_text(answer.message[:4000]),
        "detectors": [d[:40] for d in detectors],
        "now": timezone.now(),
    }
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(STOPPED_SQL, params)
    except IntegrityError:  # the run is gone: there is nothing to show it on
        pass


def end_run(project: Project, external_id: str) -> Run | None:
    """End a live run and queue its analysis (as any other run's); None if unknown.

    Ending an ended run changes nothing. The verdict returned is the live one.
    """
    with transaction.atomic():
        runs = live_runs(project).select_for_update().filter(external_id=session_id(external_id))
        run = runs.first()
        if run is not None and run.live:
            _end(run)
    return run


def _end(run: Run) -> None:
    """Mark a locked live run ended and queue its analysis (pending until it is done, so
    that recovery queues it again if the task is lost)."""
    Run.objects.filter(pk=run.pk).update(live=False, verdict=Verdict.PENDING, issues_queued_at=None)
    run.live = False
    queue.queue_analysis([run.pk])


def end_quiet_runs(*, quiet_seconds: float | None = None) -> int:
    """End the live runs with no append for LOOPBOARD_LIVE_QUIET_SECONDS; return how many."""
    if quiet_seconds is None:
        quiet_seconds = settings.LOOPBOARD_LIVE_QUIET_SECONDS
    cutoff = timezone.now() - timedelta(seconds=quiet_seconds)
    quiet = Run.objects.filter(live=True, last_append_at__lte=cutoff)
    ended = 0
    for run_id in list(quiet.values_list("pk", flat=True)[:1000]):
        with transaction.atomic():
            run = quiet.select_for_update().filter(pk=run_id).first()  # still quiet?
            if run is not None:
                _end(run)
                ended += 1
    return ended


def step_from_call(seq: int, call: dict[str, Any]) -> detection.Step:
    """Return the engine's step for one call or message given to the live API, its
    arguments, result and text cut as an import cuts them (`reading.clip_json`)."""
    kind = call.get("kind") or ("tool_call" if call.get("tool") else "assistant")
    if call.get("role") in ("user", "assistant", "system") and not call.get("tool"):
        kind = call["role"]
    started_at = _epoch(call.get("started_at"))
    return detection.Step(
        seq=seq,
        kind=kind,
        id=call.get("id"),
        parent_id=call.get("parent_id"),
        tool=call.get("tool"),
        args=clip_json(call.get("args"), DEFAULT_LIMITS),
        result=clip_json(call.get("result"), DEFAULT_LIMITS),
        status=call["status"] if call.get("status") in ("error", "invalid") else "ok",
        batch_id=call.get("batch_id"),
        text=_clip_text(call.get("text") or call.get("content")),
        started_at=started_at if started_at is not None else _epoch(call.get("ts")),
        ended_at=_epoch(call.get("ended_at")),
        tokens_in=call.get("tokens_in"),
        tokens_out=call.get("tokens_out"),
        cost=call.get("cost"),
        lane=call.get("lane") or None,
    )


def _clip_text(text: Any) -> Any:
    """A message's text cut as imported values are (see `reading.clip_strings`)."""
    return clip_strings(text, DEFAULT_LIMITS.max_value_chars) if isinstance(text, str) else text


def _epoch(value: Any) -> float | None:
    """Return epoch seconds for a number or an ISO 8601 string; None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    return None
