"""One rule per permission: each act is tried by every web role on the page and by every key
scope through the API, and the table of who may is written out here, not read from the code.

A web user is a plain member, an owner, or a staff member of the project; a key is `read`,
`ingest` or `admin`. "Refused" is the entry point's own refusal (403, or 404 for a page only
staff see); anything else (done, or a 4xx about the input) means the rule let it through.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from runs.models import ApiKey, LoopIssue, Membership, StoppedCall, Trace
from runs.services import access, live
from tests.runs.services.test_issues import search_loop, upload

pytestmark = pytest.mark.django_db

ROLES = ("member", "owner", "staff")
SCOPES = ("read", "ingest", "admin")
EVERYONE, OWNERS, STAFF = set(ROLES), {"owner", "staff"}, {"staff"}
ANY_KEY, WRITE_KEYS, ADMIN_KEYS = set(SCOPES), {"ingest", "admin"}, {"admin"}


@pytest.fixture
def people(project, user):
    """One user per web role in the project (alice, the `project` fixture's owner, is one)."""
    users = get_user_model().objects
    member = users.create_user("bob", password="pw-bob-123")
    staff = users.create_user("sam", password="pw-sam-123", is_staff=True)
    Membership.objects.create(project=project, user=member, role=Membership.Role.MEMBER)
    Membership.objects.create(project=project, user=staff, role=Membership.Role.MEMBER)
    return {"member": member, "owner": user, "staff": staff}


@pytest.fixture
def keys(project):
    return {scope: ApiKey.issue(project, scope, scope=scope)[1] for scope in SCOPES}


def web_outcomes(client, people, attempt) -> set[str]:
    """The roles whose attempt the page did not refuse."""
    allowed = set()
    for role, person in people.items():
        client.force_login(person)
        status = attempt(client)
        assert status < 500, (role, status)
        if status not in (403, 404):
            allowed.add(role)
    client.logout()
    return allowed


def api_outcomes(client, keys, attempt) -> set[str]:
    """The scopes whose request the API did not refuse (a refusal is 403 naming the scope)."""
    allowed = set()
    for scope, key in keys.items():
        response = attempt(client, {"HTTP_AUTHORIZATION": f"Bearer {key}"})
        assert response.status_code < 500, (scope, response.content)
        if response.status_code == 403:
            assert "scope" in response.json()["detail"], response.content
        else:
            allowed.add(scope)
    return allowed


def rule_of(act: access.Act, people, project) -> tuple[set[str], set[str]]:
    """What access.py answers for the act: the roles and the scopes that may."""
    roles = {role for role, person in people.items() if access.may(person, project, act)}
    scopes = {s for s in SCOPES if access.key_may(ApiKey(scope=s), act)}
    return roles, scopes


def _json(client, method: str, url: str, body: dict, headers: dict):
    return getattr(client, method)(url, json.dumps(body), "application/json", **headers)


def test_issue_state_changes_need_the_same_role_on_the_web_and_the_api(
    client, project, people, keys
):
    upload(project, search_loop("a"), "a.jsonl")
    issue = LoopIssue.objects.get(tool="web_search")
    page = reverse("runs:issue", args=[issue.pk])
    web = web_outcomes(client, people, lambda c: c.post(page, {"action": "ignore"}).status_code)
    api = api_outcomes(
        client, keys,
        lambda c, h: _json(c, "patch", f"/api/issues/{issue.pk}", {"state": "open"}, h),
    )  # fmt: skip
    assert (web, api) == (OWNERS, ADMIN_KEYS)
    assert rule_of(access.CHANGE_ISSUE_STATE, people, project) == (OWNERS, ADMIN_KEYS)
    issue.refresh_from_db()
    assert issue.state == "open"  # the admin key's change came last


def test_a_plain_member_sees_an_issue_but_cannot_resolve_or_ignore_it(client, project, people):
    upload(project, search_loop("a"), "a.jsonl")
    issue = LoopIssue.objects.get(tool="web_search")
    client.force_login(people["member"])
    page = reverse("runs:issue", args=[issue.pk])
    assert client.get(page).status_code == 200
    for action in ("resolve", "ignore", "reopen"):
        assert client.post(page, {"action": action}).status_code == 403
    issue.refresh_from_db()
    assert issue.state == "open"


def test_scopes_decide_what_a_key_may_write(client, project, people, keys):
    """Uploads, live appends and the calls the guard stopped are writes: `ingest` and up.
    A `read` key gets the live check's answer, and writes no stopped call."""
    uploads = api_outcomes(
        client, keys,
        lambda c, h: c.post("/api/traces?name=t.jsonl", search_loop("x"),
                            "application/octet-stream", **h),
    )  # fmt: skip
    step = {"tool": "Bash", "args": {"command": "make"}, "result": "Error: 2", "status": "error"}
    appends = api_outcomes(
        client, keys,
        lambda c, h: _json(c, "post", "/api/live/runs/s/steps", {"steps": [step]}, h),
    )  # fmt: skip
    assert uploads == appends == WRITE_KEYS
    assert rule_of(access.SEND, people, project) == (EVERYONE, WRITE_KEYS)

    for i in range(4):
        live.append_steps(project, "loop", [{**step, "id": f"f{i}"}])

    def written() -> int:  # each stopped call kept, and each time it was asked again
        return sum(StoppedCall.objects.values_list("times", flat=True))

    kept = {}
    for scope, key in keys.items():
        before = written()
        answer = _json(
            client, "post", "/api/live/runs/loop/check", {"tool": "Bash", "args": step["args"]},
            {"HTTP_AUTHORIZATION": f"Bearer {key}"},
        )  # fmt: skip
        assert answer.status_code == 200 and answer.json()["verdict"] == "stop", scope
        kept[scope] = written() > before
    assert kept == {"read": False, "ingest": True, "admin": True}


def test_every_member_may_upload_on_the_page(client, project, people):
    def attempt(c):
        data = {"project": project.slug, "files": _file(f"{c.session['_auth_user_id']}.jsonl")}
        return c.post(reverse("runs:upload"), data).status_code

    assert web_outcomes(client, people, attempt) == EVERYONE
    assert Trace.objects.filter(project=project).count() == 3


def _file(name: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, search_loop(name))


def test_alert_changes_need_the_same_role_on_the_web_and_the_api(client, project, people, keys):
    url = reverse("runs:project_timezone", args=[project.slug])
    web = web_outcomes(client, people, lambda c: c.post(url, {"timezone": "UTC"}).status_code)
    channel = {"name": "ops", "kind": "email", "recipients": ["ops@example.com"]}
    api = api_outcomes(client, keys, lambda c, h: _json(c, "post", "/api/channels", channel, h))
    assert (web, api) == (OWNERS, ADMIN_KEYS)
    assert rule_of(access.CHANGE_ALERTS, people, project) == (OWNERS, ADMIN_KEYS)


def test_retention_changes_need_the_same_role_on_the_web_and_the_api(client, project, people, keys):
    url = reverse("runs:project_retention", args=[project.slug])
    web = web_outcomes(
        client, people, lambda c: c.post(url, {"raw_retention_days": "30"}).status_code
    )
    body = {"raw_retention_days": 30}
    api = api_outcomes(client, keys, lambda c, h: _json(c, "put", "/api/retention", body, h))
    assert (web, api) == (OWNERS, ADMIN_KEYS)
    assert rule_of(access.CHANGE_RETENTION, people, project) == (OWNERS, ADMIN_KEYS)


def test_policy_changes_need_staff_on_the_web_and_an_admin_key_in_the_api(
    client, project, people, keys
):
    url = reverse("runs:tuning", args=[project.slug])
    web = web_outcomes(client, people, lambda c: c.get(url).status_code)
    body = {"defaults": {"warn": 3, "stop": 5}, "tools": {}}
    api = api_outcomes(client, keys, lambda c, h: _json(c, "put", "/api/policy", body, h))
    assert (web, api) == (STAFF, ADMIN_KEYS)
    assert rule_of(access.CHANGE_POLICY, people, project) == (STAFF, ADMIN_KEYS)
    assert rule_of(access.BACKTEST, people, project)[0] == STAFF


def test_only_staff_may_mint_an_admin_key(client, project, people):
    url = reverse("runs:project_key_create", args=[project.slug])
    minted = set()
    for role, person in people.items():
        client.force_login(person)
        client.post(url, {"name": role, "scope": "admin"})
        if ApiKey.objects.filter(name=role, scope="admin").exists():
            minted.add(role)
    assert minted == STAFF
    assert access.key_scopes_for(None)[-1] == ApiKey.Scope.ADMIN  # the operator's command


def test_another_projects_acts_are_404_for_every_role(client, project, people, other_project):
    """Seeing comes first: no role answers 403 (which would tell the project exists)."""
    url = reverse("runs:project_timezone", args=[other_project.slug])
    for person in people.values():
        client.force_login(person)
        assert client.post(url, {"timezone": "UTC"}).status_code == 404
        assert access.may(person, other_project, access.READ) is False


def test_the_admin_changes_issue_states_by_the_same_rule(client, project, people):
    """Admin users are staff, whom the rule lets change a state in their own projects."""
    from django.contrib.auth.models import Permission

    upload(project, search_loop("a"), "a.jsonl")
    issue = LoopIssue.objects.get(tool="web_search")
    url = reverse("admin:runs_loopissue_changelist")
    staff = people["staff"]
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_loopissue", "change_loopissue"])
    )
    client.force_login(staff)
    client.post(url, {"action": "ignore", "_selected_action": [issue.pk]})
    issue.refresh_from_db()
    assert (issue.state, issue.state_changed_by) == ("ignored", staff)
    assert access.may(staff, project, access.CHANGE_ISSUE_STATE)
