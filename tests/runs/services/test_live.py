"""Live runs against the real PostgreSQL: racing appends, rollbacks, restarts, the quiet end,
and live findings that agree with the final analysis."""

from __future__ import annotations

import multiprocessing
import os
import random
from datetime import timedelta

import pytest

SEARCH = {"tool": "web_search", "args": {"q": "same"}, "result": {"hits": []}}


def _child_django(database: str) -> None:
    """Set Django up in a spawned process, on the parent's test database."""
    import django
    from django.conf import settings

    django.setup()
    settings.DATABASES["default"]["NAME"] = database


def _spawn(target, *args):  # type: ignore[no-untyped-def]
    """Start `target(database, *args)` in a new (spawned, not forked) process."""
    from django.conf import settings

    context = multiprocessing.get_context("spawn")
    child = context.Process(target=target, args=(settings.DATABASES["default"]["NAME"], *args))
    child.start()
    return child


def _append_in_child(database: str, project_id: int, prefix: str, count: int, start, done) -> None:
    """Append `count` steps one at a time from a separate process (its own connection)."""
    _child_django(database)
    from django.db import connections

    from runs.models import Project
    from runs.services import live

    try:
        project = Project.objects.get(pk=project_id)
        start.wait()
        for i in range(count):
            call = {"tool": "read", "args": {"i": i, "who": prefix}, "id": f"{prefix}-{i}"}
            live.append_steps(project, "raced", [call])
        done.put((prefix, "ok"))
    except BaseException as exc:  # report, so the parent test fails with the reason
        done.put((prefix, repr(exc)))
    finally:
        connections.close_all()


def _die_holding_the_lock(database: str, project_id: int, locked) -> None:
    """Append inside a transaction, then die before it commits (the row lock is held)."""
    _child_django(database)
    from django.db import transaction

    from runs.models import Project
    from runs.services import live

    project = Project.objects.get(pk=project_id)
    with transaction.atomic():
        live.append_steps(project, "killed", [{**SEARCH, "id": "lost-1"}, SEARCH])
        locked.set()
        os._exit(1)  # no commit, no rollback: PostgreSQL drops the transaction


def _hold_the_lock_then_commit(database: str, project_id: int, locked, release) -> None:
    """Append a step with id "twice" inside a transaction and commit when told to."""
    _child_django(database)
    from django.db import connections, transaction

    from runs.models import Project
    from runs.services import live

    project = Project.objects.get(pk=project_id)
    with transaction.atomic():
        live.append_steps(project, "retried", [{**SEARCH, "id": "twice"}])
        locked.set()
        release.wait(timeout=60)
    connections.close_all()


def _stored(run_id: int) -> list[tuple[int, str]]:
    from runs.models import Step

    return list(Step.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "source_id"))


@pytest.mark.django_db(transaction=True)
def test_two_processes_appending_to_one_run_lose_and_double_nothing(project):

    from runs.models import Run
    from runs.services import live

    live.open_run(project, "raced")
    n = 40
    context = multiprocessing.get_context("spawn")
    start, done = context.Event(), context.Queue()
    children = [_spawn(_append_in_child, project.pk, who, n, start, done) for who in ("a", "b")]
    start.set()
    results = sorted(done.get(timeout=120) for _ in children)
    for child in children:
        child.join(timeout=30)
    assert results == [("a", "ok"), ("b", "ok")]
    run = Run.objects.get(external_id="raced")
    stored = _stored(run.pk)
    assert [seq for seq, _ in stored] == list(range(2 * n))
    ids = [source_id for _, source_id in stored]
    assert len(set(ids)) == 2 * n
    for who in ("a", "b"):  # each process's steps in its own order
        mine = [int(i.split("-")[1]) for i in ids if i.startswith(who)]
        assert mine == list(range(n))
    assert run.next_seq == run.step_count == 2 * n and run.version == 2 * n
    # this process caught up with what the others appended, once
    check = live.check_live(project, "raced", "read", {"i": 0, "who": "a"})
    assert check.verdict == "ok"


@pytest.mark.django_db(transaction=True)
def test_an_append_killed_before_commit_loses_nothing_else(project):

    from runs.models import Run
    from runs.services import live

    live.append_steps(project, "killed", [{**SEARCH, "id": "kept-0"}])
    locked = multiprocessing.get_context("spawn").Event()
    child = _spawn(_die_holding_the_lock, project.pk, locked)
    assert locked.wait(timeout=60)
    # waits on the dead child's row lock, then goes on where the committed steps end
    appended = live.append_steps(project, "killed", [{**SEARCH, "id": "kept-1"}])
    child.join(timeout=30)
    assert appended.seqs == [1]
    run = Run.objects.get(external_id="killed")
    assert _stored(run.pk) == [(0, "kept-0"), (1, "kept-1")]
    assert run.next_seq == 2


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_append_is_forgotten_by_this_process_too(project):
    from django.db import transaction

    from runs.services import live

    live.append_steps(project, "rb", [SEARCH, SEARCH])
    with pytest.raises(RuntimeError), transaction.atomic():
        live.append_steps(project, "rb", [SEARCH, SEARCH])
        raise RuntimeError("the caller gave up")
    # two stored calls: a third is a warn (repeat warns at 3), not the stop of five
    assert live.check_live(project, "rb", "web_search", {"q": "same"}).verdict == "warn"
    assert live.append_steps(project, "rb", [SEARCH]).seqs == [2]


@pytest.mark.django_db(transaction=True)
def test_a_restarted_process_reads_the_run_once_and_answers_the_same(project):
    from runs.services import live, live_state, policy

    live.append_steps(project, "restart", [{"role": "user", "text": "go"}, SEARCH])
    run_id = live.find_run(project, "restart").pk
    watch = live_state.watch(run_id, policy.engine_policy(project))
    live.append_steps(project, "restart", [SEARCH])
    before = live.check_live(project, "restart", "web_search", {"q": "same"})
    # the same Monitor went on from where it was, without reading the run again
    assert live_state.watch(run_id, policy.engine_policy(project)) is watch
    assert watch.seen == 3 and watch.monitor.steps == 3
    live_state.clear()
    after = live.check_live(project, "restart", "web_search", {"q": "same"})
    assert before.to_dict() == after.to_dict() and after.verdict == "warn"
    appended = live.append_steps(project, "restart", [SEARCH])
    assert appended.seqs == [3] and appended.verdict == "warn"


@pytest.mark.django_db
def test_quiet_live_runs_are_ended_by_the_beat_and_queued(
    project, settings, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from runs import tasks
    from runs.models import Run
    from runs.services import live

    settings.LOOPBOARD_LIVE_QUIET_SECONDS = 60
    quiet = Run.objects.get(pk=live.append_steps(project, "quiet", [SEARCH]).run_id)
    busy = Run.objects.get(pk=live.append_steps(project, "busy", [SEARCH]).run_id)
    Run.objects.filter(pk=quiet.pk).update(last_append_at=timezone.now() - timedelta(seconds=61))
    with django_capture_on_commit_callbacks() as queued:
        tasks.recover()
    quiet.refresh_from_db()
    busy.refresh_from_db()
    assert quiet.live is False and quiet.verdict == "pending"
    assert busy.live is True
    assert len(queued) == 1


def _generated_steps(rng: random.Random, length: int) -> list[dict]:
    """A run of a few tools, arguments and results, with user turns, failures and (in half
    the runs) sub-trees: steps whose parent is an earlier step."""
    steps: list[dict] = [{"role": "user", "text": "start"}]
    spread, tree = rng.choice([2, 4]), rng.random() < 0.5
    for i in range(length):
        roll = rng.random()
        if roll < 0.05:
            steps.append({"role": "user", "text": f"more {rng.randint(0, 2)}"})
        elif roll < 0.1:
            steps.append({"role": "assistant", "text": rng.choice(["let me retry", "hmm"])})
        else:
            tool = rng.choice(["web_search", "read_file", "bash", "edit_file"])
            failed = rng.random() < 0.3
            step = {
                "tool": tool,
                "args": {"q": rng.randrange(spread)},
                "result": f"error: no luck {rng.randint(0, 1)}" if failed else rng.randint(0, 2),
                "status": "error" if failed else "ok",
                "id": f"s{i}",
            }
            if tree and i > 3 and rng.random() < 0.3:
                step["parent_id"] = f"s{rng.randrange(max(i - 6, 0), i)}"
            steps.append(step)
    return steps


def _row(finding) -> tuple:
    """What a finding says about where the loop is (its count and seqs go on growing
    after it last fired; the stored live row is rewritten only when something fires)."""
    return (finding.detector, finding.severity, finding.tool or "", finding.signature,
            finding.threshold, finding.started_at, finding.fired_at, finding.stop_at)  # fmt: skip


def _full(finding) -> tuple:
    return (*_row(finding), list(finding.seqs), finding.count, finding.message,
            finding.waste_steps)  # fmt: skip


def _loops(findings) -> list[tuple]:
    """Each finding with the finding that leads its loop (findings in the run's order)."""
    key = [(f.detector, f.signature, f.fired_at) for f in findings]
    return sorted((key[i], key[f.loop] if f.loop >= 0 else key[i]) for i, f in enumerate(findings))


def _assert_live_figures_are_final(project, run_id: int) -> None:
    """The live run's ×counts (ledger rows), stall score and waste equal what the final
    analysis gives for the steps stored so far."""
    import detection
    from runs.models import LedgerRow, Run
    from runs.services import policy, storage

    result = detection.analyze(list(storage.iter_steps(run_id)), policy.engine_policy(project))
    run = Run.objects.get(pk=run_id)
    assert run.stall_score == pytest.approx(result.stall_score, abs=1e-4)
    waste = result.waste
    assert (run.waste_steps, run.waste_tokens, run.waste_cost) == (
        waste.steps, waste.tokens, waste.cost,
    )  # fmt: skip
    stored = set(LedgerRow.objects.filter(run_id=run_id).values_list("seq", "repeat_of", "count"))
    final = {
        (e.seq, e.repeat_of, e.count)
        for e in result.ledger
        if e.repeat_of is not None and e.count > 1
    }
    assert stored == final


@pytest.mark.django_db(transaction=True)  # outside a transaction: the cached Monitors
@pytest.mark.parametrize("seed", range(16))
def test_live_findings_agree_with_the_final_analysis(project, seed):
    from runs.models import Finding, Run
    from runs.services import analysis, live, live_state, policy

    rng = random.Random(seed)
    steps = _generated_steps(rng, rng.randint(20, 120))
    fired = set()
    i = 0
    while i < len(steps):
        size = rng.choice([1, 1, 2, 5, 17])
        appended = live.append_steps(project, f"gen-{seed}", steps[i : i + size])
        fired |= {(f.detector, f.signature, f.fired_at) for f in appended.findings}
        i += size
        _assert_live_figures_are_final(project, appended.run_id)
    run = Run.objects.get(external_id=f"gen-{seed}")
    live_rows = sorted(_row(f) for f in Finding.objects.filter(run=run))
    live_loops = _loops(list(Finding.objects.filter(run=run)))
    live_verdict = run.verdict
    assert live.end_run(project, f"gen-{seed}").verdict == live_verdict
    analysis.analyze_run(run.pk)
    run.refresh_from_db()
    final = list(Finding.objects.filter(run=run))
    assert sorted(_row(f) for f in final) == live_rows
    assert _loops(final) == live_loops  # one loop, whichever detectors saw it, live as at the end
    # and the live Monitor itself says exactly what the analysis wrote, counts included
    monitor = live_state.watch(run.pk, policy.engine_policy(project)).monitor
    written = [analysis.finding_row(run, f) for f in monitor.findings]
    assert sorted(_full(f) for f in final) == sorted(_full(f) for f in written)
    assert {(f.detector, f.signature, f.fired_at) for f in final} == fired
    assert run.verdict == live_verdict and run.live is False


@pytest.mark.django_db(transaction=True)
def test_a_retry_waiting_on_the_lock_of_its_first_try_is_stored_once(project):
    import threading

    from runs.models import Run
    from runs.services import live

    live.append_steps(project, "retried", [{**SEARCH, "id": "first"}])
    context = multiprocessing.get_context("spawn")
    locked, release = context.Event(), context.Event()
    child = _spawn(_hold_the_lock_then_commit, project.pk, locked, release)
    assert locked.wait(timeout=60)
    # the retry's lock statement starts before the first try commits: its snapshot misses
    # the step, so the ids are read again once the lock is granted
    threading.Timer(0.5, release.set).start()
    appended = live.append_steps(project, "retried", [{**SEARCH, "id": "twice"}])
    child.join(timeout=30)
    assert appended.seqs == [1]
    run = Run.objects.get(external_id="retried")
    assert _stored(run.pk) == [(0, "first"), (1, "twice")]
    assert run.next_seq == run.step_count == 2


def _append_statements(project, session: str, call: dict) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.services import live

    with CaptureQueriesContext(connection) as queries:
        live.append_steps(project, session, [call])
    # BEGIN and COMMIT are round trips too, but every write has them
    return [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]


@pytest.mark.django_db(transaction=True)
def test_an_append_costs_the_same_statements_whatever_the_run_length(project):
    from runs.services import live, live_state

    for size in (10, 1000):
        session = f"long-{size}"
        calls = [{"tool": "read", "args": {"i": i}, "id": f"c{i}"} for i in range(size)]
        for i in range(0, size, 500):
            live.append_steps(project, session, calls[i : i + 500])
        statements = _append_statements(project, session, {"tool": "read", "id": "new"})
        # the run and the policy version; the row lock with the known ids; the write
        assert len(statements) == 3, statements
        assert "runs_toolpolicy" not in " ".join(statements)  # the policy is cached
        assert "FOR UPDATE" in statements[1] and "INSERT INTO runs_step" in statements[2]
        # a retry of a stored step is answered from the row lock's read: no write
        assert len(_append_statements(project, session, {"tool": "read", "id": "c3"})) == 2
    # a process that has not seen the run reads it once, then is back to three statements
    live_state.clear()
    first = _append_statements(project, "long-1000", {"tool": "read", "args": {"i": -1}})
    assert len(first) > 3
    again = _append_statements(project, "long-1000", {"tool": "read", "args": {"i": -2}})
    assert len(again) == 3


@pytest.mark.django_db(transaction=True)
def test_the_cached_policy_follows_every_saved_change(project, django_user_model):
    from runs.services import live, policy

    user = django_user_model.objects.create_user("tuner")
    live.append_steps(project, "tuned", [SEARCH, SEARCH])
    assert live.check_live(project, "tuned", "web_search", {"q": "same"}).verdict == "warn"
    # save_policy is what the Tuning page, the API and the admin all call
    policy.save_policy(project, {"defaults": {"warn": 5, "stop": 8}}, user)
    assert live.check_live(project, "tuned", "web_search", {"q": "same"}).verdict == "ok"
    assert live.append_steps(project, "tuned", [SEARCH]).verdict == "ok"
    policy.save_policy(project, {}, user)
    assert live.check_live(project, "tuned", "web_search", {"q": "same"}).verdict == "warn"
    live.append_steps(project, "tuned", [SEARCH])
    assert live.check_live(project, "tuned", "web_search", {"q": "same"}).verdict == "stop"


FAILING = {"tool": "Bash", "args": {"command": "make test"}, "result": "Error: exit 2"}


def _failing_session(project, session: str, times: int = 3) -> None:
    from runs.services import live

    for i in range(times):
        live.append_steps(project, session, [{**FAILING, "status": "error", "id": f"f{i}"}])


@pytest.mark.django_db(transaction=True)
def test_a_stop_answer_is_kept_as_the_call_the_guard_stopped(project):
    from runs.models import Run, StoppedCall
    from runs.services import live

    _failing_session(project, "stopping")
    ok = live.check_live(project, "stopping", "Read", {"path": "Makefile"})
    assert ok.verdict != "stop" and not StoppedCall.objects.exists()
    answer = live.check_live(project, "stopping", "Bash", FAILING["args"])
    assert answer.verdict == "stop"
    [stopped] = StoppedCall.objects.all()
    run = Run.objects.get(external_id="stopping")
    assert (stopped.run_id, stopped.before_seq, stopped.tool) == (run.pk, 3, "Bash")
    assert stopped.args == '{"command": "make test"}' and stopped.message == answer.message
    assert stopped.detectors and stopped.times == 1
    live.check_live(project, "stopping", "Bash", FAILING["args"])  # asked again, same point
    stopped.refresh_from_db()
    assert stopped.times == 2 and StoppedCall.objects.count() == 1
    assert run.steps.count() == 3  # a stopped call is no step: analysis never sees it

    live.append_steps(project, "stopping", [{"tool": "Read", "args": {"path": "Makefile"}}])
    live.check_live(project, "stopping", "Bash", FAILING["args"])  # later: another point
    assert list(StoppedCall.objects.values_list("before_seq", "times")) == [(3, 2), (4, 1)]


@pytest.mark.django_db(transaction=True)
def test_stop_answers_racing_at_one_point_are_each_counted_once(project):
    import threading

    from django.db import connection

    from runs.models import StoppedCall
    from runs.services import live, live_state

    _failing_session(project, "raced-stop")
    start, errors = threading.Barrier(6), []

    def ask() -> None:
        try:
            start.wait(10)
            assert live.check_live(project, "raced-stop", "Bash", FAILING["args"]).verdict == "stop"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    live_state.clear()  # each thread catches up on its own: the point is read under the lock
    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert list(StoppedCall.objects.values_list("before_seq", "times")) == [(3, 6)]
