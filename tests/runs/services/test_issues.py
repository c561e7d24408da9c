"""Loop issues: findings grouped by fingerprint across runs, counted once, with their states."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import UTC, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.models import Finding, IssueDay, IssueRun, LoopIssue, Run, ToolPolicy, Trace
from runs.services import analysis, deletion, ingest, issues
from tests.helpers import call, healthy_trace, hold_and_race, message, native_jsonl

pytestmark = pytest.mark.django_db


def search_loop(query: str, ts: int = 1764489600, times: int = 5) -> bytes:
    """A research run that repeats one search with an empty result (the query varies)."""
    return native_jsonl(
        message("user", f"find {query}", ts=ts),
        *[
            call("web_search", {"query": query, "request_id": f"r{ts}-{i}"}, {"results": []},
                 ts=ts + i)
            for i in range(times)
        ],
    )  # fmt: skip


def failing_write(error: str, ts: int = 1764489600) -> bytes:
    return native_jsonl(
        message("user", "write the migration", ts=ts),
        *[
            call("write_file", {"path": f"/tmp/m{i}.sql", "content": f"v{i}"}, error,
                 status="error", ts=ts + i)
            for i in range(4)
        ],
    )  # fmt: skip


def upload(project, data: bytes, name: str, version: str = "") -> Run:
    trace, _ = ingest.store_trace(project, data, name=name, version=version)
    ingest.ingest_trace(trace.pk)
    [run] = trace.runs.all()
    analysis.analyze_run(run.pk)
    run.refresh_from_db()
    return run


def test_the_same_loop_in_two_runs_is_one_issue_with_both_runs(project):
    first = upload(project, search_loop("postgres 18 jit", ts=1764489600), "a.jsonl", "1.0")
    second = upload(project, search_loop("pg18 release", ts=1764576000), "b.jsonl", "1.1")
    [issue] = LoopIssue.objects.filter(project=project)
    assert issue.run_count == 2
    assert issue.finding_count == Finding.objects.filter(issue=issue).count() == 2
    assert issue.first_run_id == first.pk and issue.last_run_id == second.pk
    assert issue.first_seen == first.started_at and issue.last_seen == second.started_at
    assert sorted(issue.versions) == ["1.0", "1.1"]
    assert issue.agents == [] and issue.detector == "repeat" and issue.tool == "web_search"
    assert issue.waste_steps == sum(f.waste_steps for f in Finding.objects.filter(issue=issue))
    assert "`web_search`" in issue.title
    assert IssueDay.objects.filter(issue=issue).count() == 2
    assert all(f.fingerprint for f in Finding.objects.filter(run__project=project))


def test_a_different_loop_is_another_issue_and_a_healthy_run_none(project):
    upload(project, search_loop("x"), "a.jsonl")
    upload(project, failing_write("PermissionError: [Errno 13] Permission denied"), "w.jsonl")
    upload(project, healthy_trace(), "ok.jsonl")
    assert LoopIssue.objects.filter(project=project).count() == 2
    assert {i.tool for i in LoopIssue.objects.all()} == {"web_search", "write_file"}


def test_issues_are_per_project(project, other_project):
    upload(project, search_loop("x"), "a.jsonl")
    upload(other_project, search_loop("x"), "a.jsonl")
    mine, theirs = LoopIssue.objects.order_by("pk")
    assert mine.fingerprint == theirs.fingerprint and mine.project_id != theirs.project_id


def test_reanalysis_does_not_double_counts(project):
    run = upload(project, search_loop("x"), "a.jsonl")
    [issue] = LoopIssue.objects.all()
    before = (issue.run_count, issue.finding_count, issue.waste_steps)
    analysis.analyze_run(run.pk)
    analysis.analyze_run(run.pk)
    issue.refresh_from_db()
    assert (issue.run_count, issue.finding_count, issue.waste_steps) == before == (1, 1, before[2])
    assert IssueDay.objects.get(issue=issue).runs == 1


def test_an_issue_loses_a_run_whose_loop_is_gone_after_reanalysis(project):
    run = upload(project, search_loop("x"), "a.jsonl")
    upload(project, search_loop("y", ts=1764576000), "b.jsonl")
    [issue] = LoopIssue.objects.all()
    assert issue.run_count == 2
    with transaction.atomic():  # the run's loop no longer found (the steps changed)
        analysis.analyze_run(run.pk, steps=[])
    issue.refresh_from_db()
    assert issue.run_count == 1 and issue.finding_count == 1
    assert issue.first_run_id == issue.last_run_id != run.pk


def _only_issue() -> LoopIssue:
    [issue] = LoopIssue.objects.all()
    return issue


def test_a_new_issue_is_reported_once(project):
    run = upload(project, search_loop("x"), "a.jsonl")
    issue = _only_issue()
    with transaction.atomic():
        assert issues.group_runs([run]) == []  # the issue exists already
    LoopIssue.objects.all().delete()
    with transaction.atomic():
        events = issues.group_runs([run])
    assert events == [issues.IssueEvent(_only_issue().pk, issues.NEW)]
    assert _only_issue().pk != issue.pk and _only_issue().run_count == 1


def test_resolved_in_a_version_regresses_on_a_later_version_only(project):
    upload(project, search_loop("a", ts=1764489600), "v1.jsonl", "1.9")
    issue = _only_issue()
    issues.set_state(issue, "resolve", version="2.0")
    upload(project, search_loop("b", ts=1764576000), "old.jsonl", "1.10")  # earlier than 2.0
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.RESOLVED
    upload(project, search_loop("c", ts=1764662400), "v3.jsonl", "2.1")
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.REGRESSED and issue.state_changed_by is None


def test_grouping_reports_a_regression_as_an_event(project):
    run = upload(project, search_loop("a"), "v1.jsonl", "1.0")
    issue = _only_issue()
    issues.set_state(issue, "resolve", version="1.0")
    Run.objects.filter(pk=run.pk).update(agent_version="1.1")
    run.refresh_from_db()
    with transaction.atomic():  # findings grouped already are not looked at again
        assert issues.group_runs([run]) == []
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.RESOLVED
    Finding.objects.filter(run=run).update(fingerprint="")  # fresh, as analysis writes them
    with transaction.atomic():
        events = issues.group_runs([run])
    assert events == [issues.IssueEvent(issue.pk, issues.REGRESSED)]
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.REGRESSED
    with transaction.atomic():
        assert issues.group_runs([run]) == []  # regressed already: said once


def test_resolved_without_a_version_regresses_on_a_run_started_after(project):
    run = upload(project, search_loop("a"), "a.jsonl")
    issue = _only_issue()
    issues.set_state(issue, "resolve")
    with transaction.atomic():
        assert issues.group_runs([run]) == []  # the same (older) run again: still resolved
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.RESOLVED
    later = int((timezone.now() + timedelta(minutes=5)).timestamp())
    upload(project, search_loop("b", ts=later), "b.jsonl")
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.REGRESSED


def test_an_ignored_issue_stays_ignored_and_quiet(project):
    run = upload(project, search_loop("a"), "a.jsonl", "1.0")
    issue = _only_issue()
    issues.set_state(issue, "ignore")
    Run.objects.filter(pk=run.pk).update(agent_version="9.0")
    run.refresh_from_db()
    with transaction.atomic():
        assert issues.group_runs([run]) == []
    issue.refresh_from_db()
    assert issue.state == LoopIssue.State.IGNORED and issue.run_count == 1


def test_set_state_refuses_what_a_person_cannot_set(project, user):
    upload(project, search_loop("a"), "a.jsonl")
    issue = _only_issue()
    for state, version in (("regressed", ""), ("closed", ""), ("ignore", "1.0")):
        with pytest.raises(issues.StateError):
            issues.set_state(issue, state, version=version)
    issues.set_state(issue, "resolve", user=user, version=" 2.0 ")
    issue.refresh_from_db()
    assert (issue.state, issue.resolved_in_version, issue.state_changed_by) == (
        "resolved", "2.0", user,
    )  # fmt: skip
    issues.set_state(issue, "reopen")
    issue.refresh_from_db()
    assert (issue.state, issue.resolved_in_version) == ("open", "")


@pytest.mark.parametrize(
    ("version", "than", "later"),
    [
        ("1.10", "1.9", True), ("2.0", "2.0.0", False), ("v2.1", "2.0", True),
        ("2.0rc1", "2.0", False), ("2.0", "2.0rc1", True), ("2.0.post1", "2.0", True),
        ("1.0", "1.0", False), ("abc", "def", None), ("abc", "abc", False),
    ],
)  # fmt: skip
def test_versions_compare_as_numbers_with_a_fallback(version, than, later):
    assert issues.is_later(version, than) is later


def test_regroup_rebuilds_issues_and_keeps_their_state(project):
    upload(project, search_loop("a"), "a.jsonl")
    upload(project, search_loop("b", ts=1764576000), "b.jsonl")
    issue = _only_issue()
    issues.set_state(issue, "ignore")
    Finding.objects.update(issue=None, fingerprint="")
    LoopIssue.objects.filter(pk=issue.pk).update(run_count=99)
    assert issues.regroup() == 2
    again = _only_issue()
    assert (again.pk, again.state, again.run_count, again.finding_count) == (
        issue.pk, "ignored", 2, 2,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_two_workers_grouping_the_same_loop_at_once_make_one_issue(project):
    runs = []
    for name, ts in (("a.jsonl", 1764489600), ("b.jsonl", 1764576000)):
        trace, _ = ingest.store_trace(project, search_loop(name, ts=ts), name=name)
        ingest.ingest_trace(trace.pk)
        runs.append(trace.runs.get())
    start = threading.Barrier(2)
    errors = []

    def work(run: Run) -> None:
        try:
            start.wait(10)
            analysis.analyze_run(run.pk)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    [issue] = LoopIssue.objects.filter(project=project)
    assert (issue.run_count, issue.finding_count) == (2, 2)
    assert Finding.objects.filter(issue=issue).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_grouping_waits_for_the_other_workers_commit_and_counts_it(project):
    runs = []
    for name, ts in (("a.jsonl", 1764489600), ("b.jsonl", 1764576000)):
        trace, _ = ingest.store_trace(project, search_loop(name, ts=ts), name=name)
        ingest.ingest_trace(trace.pk)
        runs.append(trace.runs.get())
    # the second waits on the first's uncommitted issue, then counts with it
    errors = hold_and_race(
        lambda: analysis.analyze_run(runs[0].pk), lambda: analysis.analyze_run(runs[1].pk)
    )
    assert errors == []
    issue = _only_issue()
    assert (issue.run_count, issue.finding_count) == (2, 2)


def test_the_regroup_command_rebuilds_one_project(project, other_project):
    from io import StringIO

    from django.core.management import CommandError, call_command

    upload(project, search_loop("a"), "a.jsonl")
    upload(other_project, search_loop("a"), "a.jsonl")
    Finding.objects.update(issue=None, fingerprint="")
    out = StringIO()
    call_command("regroup", "--project", project.slug, stdout=out)
    assert out.getvalue().strip() == "regrouped 1 run(s) into 1 issue(s)"
    assert Finding.objects.filter(run__project=project, issue__isnull=False).count() == 1
    assert not Finding.objects.filter(run__project=other_project, issue__isnull=False).exists()
    with pytest.raises(CommandError):
        call_command("regroup", "--project", "nope", stdout=out)


def test_resolving_in_a_version_that_later_runs_still_loop_in_is_regressed_at_once(project):
    upload(project, search_loop("a"), "a.jsonl", "1.0")
    upload(project, search_loop("b", ts=1764576000), "b.jsonl", "1.2")
    issue = issues.set_state(_only_issue(), "resolve", version="1.1")
    assert (issue.state, issue.resolved_in_version) == ("regressed", "1.1")
    assert issues.set_state(issue, "resolve", version="1.2").state == "resolved"


def test_the_demo_samples_give_a_fixed_loop_and_one_that_came_back(settings):
    from io import StringIO

    from django.core.management import call_command

    from runs.models import Project, Trace

    settings.EMBEDDED = False
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    demo = Project.objects.get(slug="demo")
    versioned = Trace.objects.filter(project=demo).exclude(agent_version="")
    assert versioned.count() == 14
    for trace in versioned:
        ingest.ingest_trace(trace.pk)
        for run_id in trace.runs.values_list("pk", flat=True):
            analysis.analyze_run(run_id)
    days = {run.started_at.date() for run in Run.objects.filter(trace__in=versioned)}
    assert len(days) == 14
    assert max(days) - min(days) == timedelta(days=28)
    kb = LoopIssue.objects.get(project=demo, tool="kb_search")
    tickets = LoopIssue.objects.get(project=demo, tool="fetch_ticket")
    assert kb.title == "`kb_search` returns the same empty result for rephrased queries"
    assert (kb.versions, sorted(tickets.versions)) == (["1.0"], ["2.0", "2.2"])
    assert issues.set_state(kb, "resolve", version="1.1").state == "resolved"
    assert issues.set_state(tickets, "resolve", version="2.1").state == "regressed"
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    assert Trace.objects.filter(project=demo).exclude(agent_version="").count() == 14


COUNTERS = (
    "run_count", "finding_count", "waste_steps", "waste_tokens", "waste_cost", "waste_seconds",
    "first_seen", "last_seen", "first_run_id", "last_run_id", "agents", "models_seen",
    "versions",
)  # fmt: skip


def test_counters_added_run_by_run_equal_a_recount_from_the_findings(project):
    for i, (ts, version) in enumerate(
        [(1764576000, "1.1"), (1764489600, "1.0"), (1764662400, "1.2"), (1764489600, "1.0")]
    ):
        upload(project, search_loop(f"q{i}", ts=ts), f"{i}.jsonl", version)
    issue = _only_issue()
    added = {name: getattr(issue, name) for name in COUNTERS}
    days = list(IssueDay.objects.filter(issue=issue).values_list("day", "runs", "findings"))
    with transaction.atomic():
        issues.refresh([issue.pk])
    issue.refresh_from_db()
    assert {name: getattr(issue, name) for name in COUNTERS} == added
    assert list(IssueDay.objects.filter(issue=issue).values_list("day", "runs", "findings")) == (
        days
    )
    assert added["run_count"] == 4 and added["versions"] == ["1.0", "1.1", "1.2"]
    assert [runs for _, runs, _ in days] == [2, 1, 1]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"gen_ai.agent.name": "planner", "service.version": "3.2"}, ("planner", "3.2")),
        ({"agent": "claude-code", "version": "2.1.14"}, ("claude-code", "2.1.14")),
        ({"agent": "codex", "cli_version": "0.5.0"}, ("codex", "0.5.0")),
        ({"agent": ["not", "text"], "version": True}, ("", "")),
        ({}, ("", "")),
    ],
)
def test_the_agent_and_its_version_come_from_the_run_metadata(metadata, expected):
    assert ingest.agent_of(metadata) == expected


def _recount_from_findings(issue: LoopIssue) -> tuple[dict, list, list]:
    """What the issue's counters, days and facets must be: computed here, in Python, from
    its findings and their runs (independent of the SQL that keeps them)."""
    found = list(Finding.objects.filter(issue=issue).select_related("run"))
    runs = {f.run_id: f.run for f in found}

    def seen(run):
        return run.started_at or run.created_at

    def total(name):
        values = [getattr(f, name) for f in found if getattr(f, name) is not None]
        return sum(values) if values else None

    ordered = sorted(runs.values(), key=lambda run: (seen(run), run.pk))
    counters = {
        "run_count": len(runs),
        "finding_count": len(found),
        "waste_steps": sum(f.waste_steps for f in found),
        "waste_tokens": total("waste_tokens"),
        "waste_cost": total("waste_cost"),
        "waste_seconds": total("waste_seconds"),
        "first_seen": seen(ordered[0]) if ordered else None,
        "last_seen": seen(ordered[-1]) if ordered else None,
        "first_run_id": ordered[0].pk if ordered else None,
        "last_run_id": ordered[-1].pk if ordered else None,
        "agents": sorted({run.agent for run in runs.values()} - {""}),
        "models_seen": sorted({run.metadata.get("model", "") for run in runs.values()} - {""}),
        "versions": sorted({run.agent_version for run in runs.values()} - {""}),
    }
    days: dict = defaultdict(lambda: [0, 0])
    versions: dict = defaultdict(lambda: [0, 0])
    for run in runs.values():
        mine = sum(1 for f in found if f.run_id == run.pk)
        for tally in (days[seen(run).astimezone(UTC).date()], versions[run.agent_version]):
            tally[0] += 1
            tally[1] += mine
    return (
        counters,
        sorted((day, *tally) for day, tally in days.items()),
        sorted((version, *tally) for version, tally in versions.items()),
    )


def _kept(issue: LoopIssue) -> tuple[dict, list, list]:
    issue.refresh_from_db()
    counters = {name: getattr(issue, name) for name in COUNTERS}
    days = list(IssueDay.objects.filter(issue=issue).values_list("day", "runs", "findings"))
    return counters, days, sorted(issues.by_version(issue))


def _assert_kept_equals_recount(issue: LoopIssue) -> None:
    counters, days, versions = _kept(issue)
    expected, expected_days, expected_versions = _recount_from_findings(issue)
    for name in ("waste_cost", "waste_seconds"):  # float sums, added in another order
        kept, wanted = counters.pop(name), expected.pop(name)
        assert (kept is None) == (wanted is None), name
        if wanted is not None:
            assert kept == pytest.approx(wanted, rel=1e-9, abs=1e-12), name
    assert counters == expected
    assert days == expected_days
    assert versions == expected_versions


def costly_loop(query: str, ts: int, times: int, *, priced: bool) -> bytes:
    """A search loop of `times` calls; priced ones carry tokens and a cost on every call."""
    price = {"tokens_in": 120, "tokens_out": 30, "cost": 0.0013} if priced else {}
    return native_jsonl(
        message("user", f"find {query}", ts=ts),
        *[
            call("web_search", {"query": query, "request_id": f"r{ts}-{i}"}, {"results": []},
                 ts=ts + i, **price)
            for i in range(times)
        ],
    )  # fmt: skip


def test_reanalysis_under_a_changed_policy_keeps_the_counters_equal_to_a_recount(project):
    day = 86400
    plan = [  # (days after the first, repeats, priced, version)
        (0, 4, True, "1.0"), (1, 9, False, "1.0"), (1, 6, True, "1.1"), (3, 12, False, "1.2"),
        (5, 4, False, "1.2"), (6, 5, True, ""),
    ]  # fmt: skip
    runs = [
        upload(project, costly_loop(f"q{i}", 1764489600 + at * day, n, priced=priced),
               f"{i}.jsonl", version)
        for i, (at, n, priced, version) in enumerate(plan)
    ]  # fmt: skip
    issue = _only_issue()
    assert issue.run_count == len(plan) and issue.waste_tokens and issue.waste_cost
    _assert_kept_equals_recount(issue)

    policy = ToolPolicy.objects.create(project=project, tool="web_search", warn=6, stop=20)
    for run in (runs[0], runs[5], runs[3]):  # the first run and the last leave the issue
        analysis.analyze_run(run.pk)
        _assert_kept_equals_recount(issue)
    assert (issue.first_run_id, issue.last_run_id) == (runs[1].pk, runs[4].pk)  # a tie: by id
    assert issue.run_count == 4
    for run in runs:
        analysis.analyze_run(run.pk)
    _assert_kept_equals_recount(issue)
    fewer = issue.run_count
    assert fewer < len(plan) - 2 and issue.last_run_id == runs[3].pk

    policy.warn, policy.stop = 2, 3  # more findings: every run loops, and sooner
    policy.save()
    for run in reversed(runs):
        analysis.analyze_run(run.pk)
        _assert_kept_equals_recount(issue)
    assert issue.run_count == len(plan) > fewer
    assert (issue.first_run_id, issue.last_run_id) == (runs[0].pk, runs[5].pk)

    policy.warn, policy.stop = 50, 60  # no finding left: the issue is empty, not negative
    policy.save()
    for run in runs:
        analysis.analyze_run(run.pk)
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.finding_count, issue.waste_tokens) == (0, 0, None)
    assert not IssueDay.objects.filter(issue=issue).exists()
    assert not IssueRun.objects.filter(issue=issue).exists()

    with transaction.atomic():  # and the full rebuild agrees with what was kept
        issues.refresh([issue.pk])
    _assert_kept_equals_recount(issue)


@pytest.mark.django_db(transaction=True)
def test_two_reanalyses_in_one_issue_at_once_take_turns_and_keep_it_exact(project):
    plan = [(1764489600, 5), (1764576000, 9), (1764662400, 9)]
    runs = [
        upload(project, costly_loop(f"q{i}", ts, n, priced=i == 0), f"{i}.jsonl", f"1.{i}")
        for i, (ts, n) in enumerate(plan)
    ]
    issue = _only_issue()
    ToolPolicy.objects.create(project=project, tool="web_search", warn=6, stop=20)
    # the first's loop is gone under the new policy: it leaves the issue, holding its row;
    # the second is the issue's last run, still looping: taken away and added again
    errors = hold_and_race(
        lambda: analysis.analyze_run(runs[0].pk), lambda: analysis.analyze_run(runs[2].pk)
    )
    assert errors == []  # a deadlock was one
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.first_run_id, issue.waste_tokens) == (2, runs[1].pk, None)


def test_deleting_a_run_takes_its_share_out_of_its_issue(project):
    plan = [(1764489600, 5, "1.0"), (1764576000, 9, "1.1"), (1764662400, 7, "1.2")]
    runs = [
        upload(project, costly_loop(f"q{i}", ts, n, priced=i == 1), f"{i}.jsonl", version)
        for i, (ts, n, version) in enumerate(plan)
    ]
    issue = _only_issue()
    assert issue.run_count == 3

    assert deletion.delete_runs(Run.objects.filter(pk=runs[2].pk)) == 1  # the last one
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.last_run_id) == (2, runs[1].pk)
    assert issue.versions == ["1.0", "1.1"]

    deletion.delete_runs(Run.objects.filter(pk=runs[1].pk))  # the only priced one
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.waste_tokens, issue.waste_cost) == (1, None, None)

    deletion.delete_traces(Trace.objects.filter(pk=runs[0].trace_id))
    issue.refresh_from_db()
    assert (issue.run_count, issue.finding_count, issue.first_run_id) == (0, 0, None)
    assert not IssueDay.objects.filter(issue=issue).exists()
    assert not issues.filter_issues(LoopIssue.objects.all(), issues.IssueFilter()).exists()


def test_the_admin_deletes_runs_and_traces_through_the_service(project, client):
    from django.contrib.auth import get_user_model

    runs = [upload(project, search_loop(f"q{i}", ts=1764489600 + i * 86400), f"{i}.jsonl")
            for i in range(3)]  # fmt: skip
    issue = _only_issue()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-root-1"))
    response = client.post(f"/admin/runs/run/{runs[0].pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    _assert_kept_equals_recount(issue)
    assert issue.run_count == 2

    changelist = {
        "action": "delete_selected",
        "post": "yes",
        "_selected_action": [runs[1].trace_id],
    }
    assert client.post("/admin/runs/trace/", changelist).status_code == 302
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.first_run_id) == (1, runs[2].pk)


@pytest.mark.django_db(transaction=True)
def test_a_run_deleted_while_it_is_analyzed_is_counted_once_or_not_at_all(project):
    runs = [upload(project, search_loop(f"q{i}", ts=1764489600 + i * 86400), f"{i}.jsonl")
            for i in range(2)]  # fmt: skip
    issue = _only_issue()
    # a re-analysis holds the run's row; the deletion waits for it, then takes it all away
    errors = hold_and_race(
        lambda: analysis.analyze_run(runs[1].pk),
        lambda: deletion.delete_runs(Run.objects.filter(pk=runs[1].pk)),
    )
    assert errors == []
    assert not Run.objects.filter(pk=runs[1].pk).exists()
    _assert_kept_equals_recount(issue)
    assert (issue.run_count, issue.last_run_id) == (1, runs[0].pk)


def test_a_live_run_joins_its_loop_issue_soon_after_the_loop_fires_and_keeps_it_exact(
    project, django_capture_on_commit_callbacks
):
    from runs.services import live

    upload(project, search_loop("pg18 release", ts=1764489600), "before.jsonl")
    issue = _only_issue()
    calls = [{"tool": "web_search", "args": {"query": "pg18 jit", "request_id": "x"},
              "result": {"results": []}}]  # fmt: skip
    with django_capture_on_commit_callbacks() as queued:
        for _ in range(3):
            live.append_steps(project, "live-1", calls)  # the loop fires
        live.append_steps(project, "live-1", calls)  # fires again: queued once until run
    run = Run.objects.get(external_id="live-1")
    assert run.issues_queued_at is not None and len(queued) == 1
    issue.refresh_from_db()
    assert issue.run_count == 1  # the append does not group

    live.group_live_issues(run.pk)  # what the worker does a few seconds later
    run.refresh_from_db()
    issue.refresh_from_db()
    assert issue.run_count == 2 and run.issues_queued_at is None  # while still live
    _assert_kept_equals_recount(issue)
    for _ in range(4):  # the loop goes on: its share grows, still counted once
        live.append_steps(project, "live-1", calls)
    # an escalation writes its finding over the earlier row, which keeps its issue meanwhile
    flagged = Finding.objects.filter(run=run).exclude(severity=Finding.Severity.INFO)
    assert flagged.filter(fingerprint="").exists()  # rewritten since the grouping
    assert not flagged.filter(issue=None).exists()
    live.group_live_issues(run.pk)
    _assert_kept_equals_recount(issue)

    live.end_run(project, "live-1")
    assert live.group_live_issues(run.pk) == []  # ended: left to the final analysis
    analysis.analyze_run(run.pk)  # which groups it again
    _assert_kept_equals_recount(issue)
    assert issue.run_count == 2 and LoopIssue.objects.count() == 1


def test_recovery_asks_again_for_a_live_runs_grouping_whose_task_was_lost(
    project, django_capture_on_commit_callbacks
):
    from datetime import timedelta as delta

    from runs.services import live, recovery

    calls = [{"tool": "web_search", "args": {"query": "x"}, "result": {"results": []}}]
    for _ in range(3):
        live.append_steps(project, "lost-task", calls)  # the loop fires; its task is lost
    run = Run.objects.get(external_id="lost-task")
    asked = run.issues_queued_at
    with django_capture_on_commit_callbacks() as queued:
        recovery.requeue_stale(older_than=delta(hours=1))  # not stale yet: left alone
    assert queued == []
    Run.objects.filter(pk=run.pk).update(issues_queued_at=asked - delta(hours=2))
    with django_capture_on_commit_callbacks(execute=False) as queued:
        recovery.requeue_stale(older_than=delta(hours=1))
    run.refresh_from_db()
    assert len(queued) == 1 and run.issues_queued_at > asked  # its clock restarted
    live.group_live_issues(run.pk)  # what that task does
    run.refresh_from_db()
    assert run.issues_queued_at is None and _only_issue().run_count == 1
