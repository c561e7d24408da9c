"""Project isolation: another project's runs, traces and findings are 404 everywhere."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from runs.models import Finding, Membership, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def theirs(other_project, process):
    """A flagged run (with findings) in a project alice is not a member of."""
    from tests.helpers import looping_trace

    trace = process(other_project, looping_trace(6), name="secret.jsonl")
    run = trace.runs.get()
    assert run.findings.exists()
    return trace, run


def test_api_refuses_another_projects_objects_with_404(api, theirs):
    trace, run = theirs
    for url in (
        f"/api/traces/{trace.pk}",
        f"/api/traces/{trace.pk}/raw",
        f"/api/runs/{run.pk}",
        f"/api/runs/{run.pk}/steps",
    ):
        response = api.get(url)
        assert response.status_code == 404, url
        assert response.json() == {"detail": "Not Found"}
    assert api.post(f"/api/runs/{run.pk}/analyze").status_code == 404
    check = api.post(
        "/api/check", {"run_id": run.pk, "tool": "web_search"}, content_type="application/json"
    )
    assert check.status_code == 404
    assert api.get("/api/runs").json()["count"] == 0


def test_the_key_decides_the_project(client, other_key, theirs):
    _, run = theirs
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {other_key}"
    assert client.get(f"/api/runs/{run.pk}").status_code == 200


def test_pages_and_downloads_refuse_another_projects_objects(client_in, theirs, project, process):
    from tests.helpers import healthy_trace

    trace, run = theirs
    assert client_in.get(f"/runs/{run.pk}/").status_code == 404
    assert client_in.get(f"/traces/{trace.pk}/raw").status_code == 404
    assert client_in.get(f"/traces/{trace.pk}/status/").status_code == 404
    assert client_in.get("/projects/secret/settings/").status_code == 404
    assert client_in.post("/projects/secret/settings/keys/", {"name": "x"}).status_code == 404
    mine = process(project, healthy_trace())
    response = client_in.get(f"/traces/{mine.pk}/raw")
    assert response.status_code == 200 and b"".join(response.streaming_content) == healthy_trace()


def test_downloads_need_a_login(client, theirs):
    trace, _ = theirs
    response = client.get(f"/traces/{trace.pk}/raw")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.fixture
def staff(user, project):
    """alice as staff (not superuser) with every runs permission."""
    from django.contrib.auth.models import Permission

    user.is_staff = True
    user.save()
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="runs"))
    return user


def test_admin_shows_staff_only_their_projects(client, staff, theirs, project, process):
    from tests.helpers import healthy_trace

    trace, run = theirs
    mine = process(project, healthy_trace()).runs.get()
    client.force_login(staff)
    listing = client.get("/admin/runs/run/")
    assert listing.status_code == 200
    assert mine.name in listing.content.decode() and run.name not in listing.content.decode()
    assert b"Secret" not in listing.content  # the project filter lists only her projects
    assert client.get(f"/admin/runs/run/{run.pk}/change/").status_code == 302  # "doesn't exist"
    assert client.get(f"/admin/runs/run/{mine.pk}/change/").status_code == 200
    assert client.get(f"/admin/runs/trace/{trace.pk}/change/").status_code == 302
    finding = Finding.objects.filter(run=run).first()
    assert client.get(f"/admin/runs/finding/{finding.pk}/change/").status_code == 302
    assert client.get(f"/admin/runs/project/{run.project_id}/change/").status_code == 302
    projects = client.get("/admin/runs/project/").content.decode()
    assert "Agents" in projects and "Secret" not in projects
    memberships = client.get("/admin/runs/membership/").content.decode()
    assert "mallory" not in memberships


def test_superuser_admin_sees_everything(client, theirs):
    _, run = theirs
    boss = get_user_model().objects.create_superuser("root", password="pw-root-1234")
    client.force_login(boss)
    assert client.get(f"/admin/runs/run/{run.pk}/change/").status_code == 200
    assert Run.objects.count() == 1 and Membership.objects.count() >= 1
