"""`/api/issues`: list, read and change the state of the key's project's loop issues."""

from __future__ import annotations

import pytest

from runs.models import ApiKey, LoopIssue
from tests.runs.services.test_issues import failing_write, search_loop, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def issues(project):
    upload(project, search_loop("a", ts=1764489600), "a.jsonl", "1.0")
    upload(project, search_loop("b", ts=1764576000), "b.jsonl", "1.1")
    upload(project, failing_write("PermissionError: denied", ts=1764662400), "w.jsonl", "1.1")
    return LoopIssue.objects.get(tool="web_search"), LoopIssue.objects.get(tool="write_file")


def patch(api, url: str, body: dict):
    return api.patch(url, body, content_type="application/json")


def test_list_issues_newest_first_with_counts(api, issues):
    search, write = issues
    body = api.get("/api/issues").json()
    assert body["count"] == 2
    assert [i["id"] for i in body["items"]] == [write.pk, search.pk]
    [item] = [i for i in body["items"] if i["id"] == search.pk]
    assert item["run_count"] == 2 and item["finding_count"] == 2 and item["state"] == "open"
    assert sorted(item["versions"]) == ["1.0", "1.1"] and item["models"] == []
    assert item["first_run_id"] == search.first_run_id and item["tool"] == "web_search"


def test_list_issues_filters_and_sorts(api, issues):
    search, write = issues
    assert [i["id"] for i in api.get("/api/issues?sort=runs").json()["items"]][0] == search.pk
    assert [i["id"] for i in api.get("/api/issues?tool=write_file").json()["items"]] == [write.pk]
    assert [i["id"] for i in api.get("/api/issues?version=1.0").json()["items"]] == [search.pk]
    assert api.get("/api/issues?state=resolved").json()["count"] == 0
    assert api.get("/api/issues?sort=nonsense").status_code == 422
    assert api.get("/api/issues?limit=1").json()["items"][0]["id"] == write.pk


def test_get_an_issue_with_its_days_and_versions(api, issues):
    search, _ = issues
    body = api.get(f"/api/issues/{search.pk}").json()
    assert body["id"] == search.pk and "web_search" in body["example_message"]
    assert [d["runs"] for d in body["days"]] == [1, 1]
    assert body["by_version"] == [
        {"version": "1.0", "runs": 1, "findings": 1},
        {"version": "1.1", "runs": 1, "findings": 1},
    ]


def test_patch_resolves_in_a_version_and_reopens(api, issues):
    search, _ = issues
    response = patch(api, f"/api/issues/{search.pk}",
                     {"state": "resolved", "resolved_in_version": "1.2"})  # fmt: skip
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "resolved"
    search.refresh_from_db()
    assert (search.state, search.resolved_in_version) == ("resolved", "1.2")
    assert search.state_changed_at is not None
    assert patch(api, f"/api/issues/{search.pk}", {"state": "open"}).json()["state"] == "open"


def test_patch_refuses_a_bad_state_or_a_version_on_ignore(api, issues):
    search, _ = issues
    assert patch(api, f"/api/issues/{search.pk}", {"state": "regressed"}).status_code == 422
    response = patch(
        api, f"/api/issues/{search.pk}", {"state": "ignored", "resolved_in_version": "1"}
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "only a resolved issue takes a version"}
    search.refresh_from_db()
    assert search.state == "open"


def test_patch_needs_an_admin_key(client, project, issues):
    search, _ = issues
    read = ApiKey.issue(project, "reader", scope=ApiKey.Scope.READ)[1]
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {read}"
    assert client.get(f"/api/issues/{search.pk}").status_code == 200
    assert patch(client, f"/api/issues/{search.pk}", {"state": "ignored"}).status_code == 403
    search.refresh_from_db()
    assert search.state == "open"


def test_another_projects_issue_is_404(api, other_project, issues):
    upload(other_project, search_loop("theirs"), "t.jsonl")
    theirs = LoopIssue.objects.get(project=other_project)
    assert api.get(f"/api/issues/{theirs.pk}").status_code == 404
    response = patch(api, f"/api/issues/{theirs.pk}", {"state": "ignored"})
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
    theirs.refresh_from_db()
    assert theirs.state == "open"
    assert theirs.pk not in [i["id"] for i in api.get("/api/issues").json()["items"]]


def test_issues_need_a_key(client, issues):
    assert client.get("/api/issues").status_code == 401


def test_an_uploads_version_reaches_its_runs(api, project):
    from runs.models import Trace
    from runs.services import ingest

    response = api.post(
        "/api/traces?name=v.jsonl&version=2.0.1",
        data=search_loop("v"),
        content_type="application/octet-stream",
    )
    assert response.status_code == 202, response.content
    trace = Trace.objects.get(pk=response.json()["trace_id"])
    ingest.ingest_trace(trace.pk)
    assert trace.agent_version == "2.0.1" and trace.runs.get().agent_version == "2.0.1"
