"""The Issues list and an issue's page, through HTTP as a browser without JavaScript sees them."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.models import LoopIssue
from tests.runs.services.test_issues import failing_write, search_loop, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_issues(project):
    upload(project, search_loop("a", ts=1764489600), "a.jsonl", "1.0")
    upload(project, search_loop("b", ts=1764576000), "b.jsonl", "1.1")
    upload(project, failing_write("PermissionError: denied", ts=1764662400), "w.jsonl", "1.1")
    search = LoopIssue.objects.get(tool="web_search")
    write = LoopIssue.objects.get(tool="write_file")
    return search, write


def rows(html: str) -> list[str]:
    return re.findall(r'<tr class="issue-row[^"]*">.*?</tr>', html, re.S)


def test_the_issues_list_shows_each_issue_with_its_counts_and_a_sparkline(client_in, two_issues):
    search, write = two_issues
    html = client_in.get(reverse("runs:issues")).content.decode()
    assert 'aria-current="page">Issues</a>' in html
    listed = rows(html)
    assert len(listed) == 2
    [row] = [r for r in listed if f'href="/issues/{search.pk}/"' in r]
    assert "<code>web_search</code>" in row and '<td class="num">2</td>' in row
    assert '<svg class="chart spark"' in row and "1.0" in row and "1.1" in row


def test_the_list_sorts_by_runs_and_filters_by_state_detector_tool_and_version(
    client_in, two_issues
):
    search, write = two_issues
    by_runs = rows(client_in.get(reverse("runs:issues"), {"sort": "runs"}).content.decode())
    assert f"/issues/{search.pk}/" in by_runs[0]
    last_seen = rows(client_in.get(reverse("runs:issues")).content.decode())
    assert f"/issues/{write.pk}/" in last_seen[0]  # its run is the newest
    for query, shown in (
        ({"tool": "write_file"}, write),
        ({"detector": "repeat", "tool": "web_search"}, search),
        ({"version": "1.0"}, search),
    ):
        html = client_in.get(reverse("runs:issues"), query).content.decode()
        assert [f"/issues/{shown.pk}/" in r for r in rows(html)] == [True], query
    LoopIssue.objects.filter(pk=write.pk).update(state="ignored")
    html = client_in.get(reverse("runs:issues"), {"state": "ignored"}).content.decode()
    assert len(rows(html)) == 1 and f"/issues/{write.pk}/" in html


def test_the_list_filter_answers_htmx_with_the_table_only(client_in, two_issues):
    response = client_in.get(reverse("runs:issues"), {"state": "open"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="issue-table">') and "<form" not in html


def test_an_issue_page_shows_its_runs_trend_versions_sides_and_compare_link(client_in, two_issues):
    search, _ = two_issues
    html = client_in.get(reverse("runs:issue", args=[search.pk])).content.decode()
    runs = [r for r in re.findall(r'href="/runs/(\d+)/"', html)]
    assert runs[:2] == [str(search.first_run_id), str(search.last_run_id)]  # sides
    listed = re.search(r'<div id="issue-runs">(.*?)</div>', html, re.S).group(1)
    assert re.findall(r'href="/runs/(\d+)/"', listed) == [
        str(search.last_run_id), str(search.first_run_id),
    ]  # newest first  # fmt: skip
    compare = reverse("runs:compare", args=[search.first_run_id, search.last_run_id])
    assert f'href="{compare}"' in html and "Compare first and last run" in html
    assert "Runs per day" in html and "By agent version" in html
    assert "web_search" in html and "<blockquote>" in html


def test_an_issue_page_pages_its_runs_newest_first_and_counts_them_by_version(
    client_in, project, monkeypatch
):
    monkeypatch.setattr("runs.web.issues.RUNS_PER_PAGE", 2)
    made = [
        upload(project, search_loop(f"q{i}", ts=1764489600 + i * 3600), f"{i}.jsonl", version)
        for i, version in enumerate(["1.0", "1.0", "1.2", "", "1.10"])
    ]
    issue = LoopIssue.objects.get(tool="web_search")
    url = reverse("runs:issue", args=[issue.pk])
    pages = []
    for number in (1, 2, 3):
        html = client_in.get(url, {"page": number}, headers={"HX-Request": "true"}).content
        assert html.decode().lstrip().startswith('<div id="issue-runs">')  # the partial only
        pages.append(re.findall(r'href="/runs/(\d+)/"', html.decode()))
    assert pages == [
        [str(made[4].pk), str(made[3].pk)],
        [str(made[2].pk), str(made[1].pk)],
        [str(made[0].pk)],
    ]
    html = client_in.get(url).content.decode()
    table = re.search(r"By agent version.*?<tbody>(.*?)</tbody>", html, re.S).group(1)
    cells = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">(\d+)</td>", table)
    assert cells == [("1.0", "2"), ("1.2", "1"), ("1.10", "1"), ("—", "1")]  # "" last


def test_the_run_page_links_each_finding_to_its_issue(client_in, two_issues):
    search, _ = two_issues
    html = client_in.get(reverse("runs:detail", args=[search.first_run_id])).content.decode()
    assert f'href="/issues/{search.pk}/"' in html


def test_resolving_in_a_version_then_ignoring_then_reopening(client_in, two_issues, user):
    search, _ = two_issues
    url = reverse("runs:issue", args=[search.pk])
    response = client_in.post(url, {"action": "resolve", "version": "1.2"})
    assert response.status_code == 302 and response["Location"] == url
    search.refresh_from_db()
    assert (search.state, search.resolved_in_version, search.state_changed_by) == (
        "resolved", "1.2", user,
    )  # fmt: skip
    html = client_in.get(url).content.decode()
    assert "Resolved in 1.2" in html
    client_in.post(url, {"action": "ignore"})
    search.refresh_from_db()
    assert search.state == "ignored" and search.resolved_in_version == ""
    client_in.post(url, {"action": "reopen"})
    search.refresh_from_db()
    assert search.state == "open"


def test_a_bad_state_change_is_refused_with_a_reason(client_in, two_issues):
    search, _ = two_issues
    url = reverse("runs:issue", args=[search.pk])
    response = client_in.post(url, {"action": "ignore", "version": "2.0"})
    assert response.status_code == 400 and b"only a resolved issue takes a version" in (
        response.content
    )
    response = client_in.post(url, {"action": "close"})
    assert response.status_code == 400
    search.refresh_from_db()
    assert search.state == "open"


def test_another_projects_issue_is_404_and_not_listed(client_in, other_project, two_issues):
    upload(other_project, search_loop("theirs"), "t.jsonl")
    theirs = LoopIssue.objects.get(project=other_project)
    assert client_in.get(reverse("runs:issue", args=[theirs.pk])).status_code == 404
    assert (
        client_in.post(reverse("runs:issue", args=[theirs.pk]), {"action": "ignore"}).status_code
        == 404
    )
    theirs.refresh_from_db()
    assert theirs.state == "open"
    assert f"/issues/{theirs.pk}/" not in client_in.get(reverse("runs:issues")).content.decode()


def test_trace_content_in_a_title_is_escaped(client_in, project):
    upload(project, search_loop("x"), "a.jsonl")
    issue = LoopIssue.objects.get()
    LoopIssue.objects.filter(pk=issue.pk).update(title="`<script>x</script>` loops <b>")
    html = client_in.get(reverse("runs:issues")).content.decode()
    assert "<script>x" not in html and "<code>&lt;script&gt;x&lt;/script&gt;</code>" in html
    html = client_in.get(reverse("runs:issue", args=[issue.pk])).content.decode()
    assert "<script>x" not in html and "loops &lt;b&gt;" in html


def test_an_upload_with_a_version_gives_its_runs_that_version(client_in, project):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from runs.models import Trace

    client_in.post(
        reverse("runs:upload"),
        {"project": project.slug, "version": "3.1.4",
         "files": SimpleUploadedFile("v.jsonl", search_loop("v"))},
    )  # fmt: skip
    trace = Trace.objects.get()
    assert trace.agent_version == "3.1.4"


def test_the_admin_lists_issues_and_its_actions_set_the_state(client_in, user, two_issues):
    search, write = two_issues
    user.is_staff = user.is_superuser = True
    user.save()
    url = reverse("admin:runs_loopissue_changelist")
    assert "web_search" in client_in.get(url).content.decode()
    client_in.post(url, {"action": "ignore", "_selected_action": [search.pk]})
    search.refresh_from_db()
    write.refresh_from_db()
    assert (search.state, search.state_changed_by, write.state) == ("ignored", user, "open")


def test_issue_state_changes_need_the_same_role_on_the_web_page_and_the_api(
    client, project, two_issues
):
    """A plain member can see an issue but not resolve, ignore or reopen it, as a key below
    admin cannot through the API; an owner and an admin key can."""
    from django.contrib.auth import get_user_model

    from runs.models import ApiKey, Membership

    search, _ = two_issues
    member = get_user_model().objects.create_user("bob", password="pw-bob-123")
    Membership.objects.create(project=project, user=member, role=Membership.Role.MEMBER)
    url = reverse("runs:issue", args=[search.pk])
    client.force_login(member)
    assert client.get(url).status_code == 200
    for action in ("resolve", "ignore", "reopen"):
        assert client.post(url, {"action": action}).status_code == 403
    api_url = f"/api/issues/{search.pk}"
    ingest_key = ApiKey.issue(project, "ci", scope=ApiKey.Scope.INGEST)[1]
    refused = client.patch(
        api_url, {"state": "resolved"}, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {ingest_key}",
    )  # fmt: skip
    assert refused.status_code == 403
    search.refresh_from_db()
    assert search.state == "open"
    owner = Membership.objects.get(project=project, role=Membership.Role.OWNER).user
    client.force_login(owner)
    assert client.post(url, {"action": "ignore"}).status_code == 302
    admin_key = ApiKey.issue(project, "ops", scope=ApiKey.Scope.ADMIN)[1]
    answer = client.patch(
        api_url, {"state": "open"}, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {admin_key}",
    )  # fmt: skip
    assert answer.status_code == 200, answer.content
    search.refresh_from_db()
    assert search.state == "open"
