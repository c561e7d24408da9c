"""Property-based run of schemathesis against the OpenAPI schema: no request gives a 5xx.

The WSGI app is called in-process (the test's database transaction, alice's project with a
stored run so that ids exist). Examples are bounded so the whole file takes well under 2 min.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import status_code_conformance

from loopboard.wsgi import application
from runs.models import ApiKey, Membership, Project
from runs.services import ingest
from tests.helpers import looping_trace

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", application)


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
@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_never_answers_5xx(case, stocked_key, django_db_blocker):  # type: ignore[no-untyped-def]
    with django_db_blocker.unblock():
        response = case.call(headers={"Authorization": f"Bearer {stocked_key}"})
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    case.validate_response(response, checks=[status_code_conformance])
