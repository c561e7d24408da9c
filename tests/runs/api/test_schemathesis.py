"""Property-based run of schemathesis against the OpenAPI schema: no request gives a 5xx.

The WSGI app is called in-process (the test's database transaction, alice's project with a
stored run so that ids exist). Every operation of the schema is given up to
MAX_EXAMPLES generated cases (Hypothesis stops early for an operation whose inputs have fewer
distinct values); the test checks that every operation ran and prints how many cases each
had, so CI's output states the coverage.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import status_code_conformance

from loopboard.wsgi import application
from runs.models import ApiKey, Membership, Project
from runs.services import ingest
from tests.helpers import looping_trace

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", application)
# Generated cases per operation at most (LOOPBOARD_SCHEMATHESIS_EXAMPLES runs it longer).
MAX_EXAMPLES = int(os.environ.get("LOOPBOARD_SCHEMATHESIS_EXAMPLES", "40"))


@pytest.fixture
def stocked_key(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """A project with a run and a key; made once, kept for the module's examples."""
    with django_db_blocker.unblock():
        project, _ = Project.objects.get_or_create(slug="fuzz", defaults={"name": "Fuzz"})
        if not project.runs.exists():
            from runs.services import analysis

            trace, _ = ingest.store_trace(project, looping_trace(4), name="fuzz.jsonl")
            ingest.ingest_trace(trace.pk)
            for run_id in trace.runs.values_list("pk", flat=True):
                analysis.analyze_run(run_id)
        Membership.objects.filter(project=project).delete()
        _, key = ApiKey.issue(project, "fuzz", scope=ApiKey.Scope.ADMIN)
    return key


@pytest.fixture(autouse=True)
def generous_limits(settings_=None):  # type: ignore[no-untyped-def]
    from django.conf import settings as dj

    old = dj.LOOPBOARD_API_RATE, dj.LOOPBOARD_API_BURST
    dj.LOOPBOARD_API_RATE, dj.LOOPBOARD_API_BURST = 10_000.0, 10_000
    yield
    dj.LOOPBOARD_API_RATE, dj.LOOPBOARD_API_BURST = old


@pytest.mark.django_db(transaction=True)
def test_api_never_answers_5xx(stocked_key, django_db_blocker, capsys):  # type: ignore[no-untyped-def]
    """Every operation of the schema, up to MAX_EXAMPLES generated cases each: no 5xx, every
    status documented. One test walks them all (so the count is whole under pytest-xdist too),
    goes on past a failing operation and reports every one that failed."""
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations, "the schema has no operation"
    counts: Counter[str] = Counter()
    failed: dict[str, str] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case):  # type: ignore[no-untyped-def]
            counts[case.operation.label] += 1
            with django_db_blocker.unblock():
                response = case.call(headers={"Authorization": f"Bearer {stocked_key}"})
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} -> {response.status_code}: "
                f"{response.text[:500]}"
            )
            case.validate_response(response, checks=[status_code_conformance])

        try:
            check()
        except Exception as exc:  # noqa: BLE001 - every failing operation is reported below
            failed[operation.label] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    shown = sorted(counts.values())
    with capsys.disabled():  # visible without -s: CI's log states the coverage
        print(
            f"\nschemathesis: {len(operations)} operations, {sum(shown)} cases, "
            f"{shown[0] if shown else 0} to {shown[-1] if shown else 0} per operation "
            f"(at most {MAX_EXAMPLES} generated each), {len(failed)} failed"
        )
        for label in sorted(counts, key=lambda label: (counts[label], label)):
            print(f"schemathesis:   {counts[label]:4d}  {label}")
    missed = sorted(op.label for op in operations if not counts[op.label])
    assert not missed, f"operations that ran no case: {missed}"
    assert not failed, "\n\n".join(f"{label}: {why}" for label, why in failed.items())
