"""The admin writes policy only through the policy service: validated, recorded, re-analyzed."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from runs.models import Membership, PolicyChange, ToolPolicy
from runs.services import policy
from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/runs/toolpolicy/add/"


@pytest.fixture
def admin_client(client, project):
    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    Membership.objects.create(project=project, user=root)
    client.force_login(root)
    return client


def row_form(project, **fields) -> dict:
    data = {"project": str(project.pk), "tool": "", "scope": "", "volatile": "[]",
            "detectors": "{}", "polling": "unknown", "mutating": "unknown"}  # fmt: skip
    return data | {k: str(v) for k, v in fields.items()}


def test_a_row_that_makes_the_policy_invalid_is_refused_with_a_message(admin_client, project):
    response = admin_client.post(ADD_URL, row_form(project, warn=5, stop=2))
    assert response.status_code == 200
    page = response.content.decode()
    assert "would make the project policy invalid" in page and "warn &lt;= stop" in page
    assert not ToolPolicy.objects.exists()
    assert not PolicyChange.objects.exists()


def test_a_row_out_of_range_is_refused(admin_client, project):
    response = admin_client.post(ADD_URL, row_form(project, tool="bash", warn=2**31))
    assert response.status_code == 200
    assert not ToolPolicy.objects.exists()


def test_a_valid_row_is_saved_as_a_policy_change_that_reanalyzes(
    admin_client, project, process, django_capture_on_commit_callbacks
):
    process(project, looping_trace(3, tool="slow_search"))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = admin_client.post(ADD_URL, row_form(project, tool="slow_search", warn=2))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert policy.current(project)["tools"] == {"slow_search": {"warn": 2}}
    change = PolicyChange.objects.get(project=project)
    assert change.user.username == "root" and change.reanalyzed == 1
    assert "slow_search" in change.summary
    assert len(callbacks) == 1  # the analysis of the one affected run


def test_deleting_a_row_goes_through_the_policy_service(admin_client, project):
    policy.save_policy(project, {"defaults": {}, "tools": {"bash": {"warn": 4}}}, None)
    row = ToolPolicy.objects.get(project=project, tool="bash")
    response = admin_client.post(f"/admin/runs/toolpolicy/{row.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert policy.current(project)["tools"] == {}
    assert PolicyChange.objects.filter(project=project).count() == 2


def test_the_project_page_shows_policy_rows_read_only(admin_client, project):
    policy.save_policy(project, {"defaults": {}, "tools": {"bash": {"warn": 4}}}, None)
    page = admin_client.get(f"/admin/runs/project/{project.pk}/change/").content.decode()
    assert 'name="tool_policies-0-warn"' not in page
    assert "bash" in page
