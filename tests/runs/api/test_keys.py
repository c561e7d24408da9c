"""API keys: settings page, management command, hashing, revocation, rate limit."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from runs.models import ApiKey

pytestmark = pytest.mark.django_db


def test_settings_page_creates_a_key_shown_once_and_stored_hashed(client_in, project):
    response = client_in.post("/projects/agents/settings/keys/", {"name": "CI"}, follow=True)
    assert response.status_code == 200
    shown = re.search(r'id="new-key-value">(lb_[\w-]+)<', response.content.decode()).group(1)
    row = ApiKey.objects.get(project=project, name="CI")
    assert row.key_hash == ApiKey.hash(shown) and shown not in row.key_hash
    again = client_in.get("/projects/agents/settings/").content.decode()
    assert shown not in again and row.prefix in again  # shown once


def test_revoked_key_is_refused_with_403(client_in, client, project):
    row, key = ApiKey.issue(project, "old")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    assert client.get("/api/runs").status_code == 200
    client_in.post(f"/projects/agents/settings/keys/{row.pk}/revoke/")
    row.refresh_from_db()
    assert row.revoked_at is not None
    response = client.get("/api/runs")
    assert response.status_code == 403 and "revoked" in response.json()["detail"]


def test_missing_and_unknown_keys_are_401(client, project):
    response = client.get("/api/runs")
    assert response.status_code == 401 and "API key" in response.json()["detail"]
    client.defaults["HTTP_AUTHORIZATION"] = "Bearer lb_nope"
    assert client.get("/api/runs").status_code == 401


def test_last_used_time_is_recorded(api, project):
    api.get("/api/runs")
    assert ApiKey.objects.get(project=project).last_used_at is not None


def test_management_command_prints_a_working_key(client, project):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_key", "agents", "CI", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert key.startswith("lb_") and "shown once" in err.getvalue()
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    assert client.get("/api/runs").status_code == 200


def test_rate_limit_answers_429_with_retry_after(api, settings):
    settings.LOOPBOARD_API_RATE = 0.5
    settings.LOOPBOARD_API_BURST = 3
    codes = [api.get("/api/runs").status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    response = api.get("/api/runs")
    assert int(response["Retry-After"]) >= 1 and "rate limit" in response.json()["detail"]


def test_rate_limit_is_per_key(api, client, other_key, settings):
    settings.LOOPBOARD_API_RATE = 0.01
    settings.LOOPBOARD_API_BURST = 1
    assert api.get("/api/runs").status_code == 200
    assert api.get("/api/runs").status_code == 429
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {other_key}"
    assert client.get("/api/runs").status_code == 200


def test_a_member_without_staff_rights_can_mint_only_read_and_ingest_keys(client_in, project):
    page = client_in.get("/projects/agents/settings/").content.decode()
    assert 'value="ingest"' in page and 'value="read"' in page and 'value="admin"' not in page
    response = client_in.post(
        "/projects/agents/settings/keys/", {"name": "sneaky", "scope": "admin"}, follow=True
    )
    assert "You may not create a key with the &#x27;admin&#x27; scope" in response.content.decode()
    assert not ApiKey.objects.filter(name="sneaky").exists()
    client_in.post("/projects/agents/settings/keys/", {"name": "agent", "scope": "ingest"})
    assert ApiKey.objects.get(name="agent").scope == "ingest"


def test_staff_can_mint_an_admin_key(client_in, user, project):
    user.is_staff = True
    user.save()
    client_in.post("/projects/agents/settings/keys/", {"name": "ops", "scope": "admin"})
    assert ApiKey.objects.get(name="ops").scope == "admin"


@pytest.mark.parametrize(
    ("scope", "allowed"),
    [("read", {"read"}), ("ingest", {"read", "ingest"}), ("admin", {"read", "ingest", "admin"})],
)
def test_what_each_scope_may_do(client, project, scope, allowed):
    _, key = ApiKey.issue(project, scope, scope=scope)
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    answers = {
        "read": client.get("/api/runs").status_code,
        "ingest": client.post(
            "/api/traces", b'{"type":"message","role":"user","content":"hi"}\n',
            content_type="application/octet-stream",
        ).status_code,
        "admin": client.put(
            "/api/policy", {"defaults": {"warn": 2, "stop": 4}}, content_type="application/json"
        ).status_code,
    }  # fmt: skip
    for action, status in answers.items():
        assert (status < 400) == (action in allowed), (action, status)
        assert status < 400 or status == 403
    otlp = client.post("/v1/traces", b"", content_type="application/x-protobuf")
    assert (otlp.status_code == 403) == (scope == "read")


def test_the_management_command_mints_admin_keys_unless_told(project):
    out = io.StringIO()
    call_command("create_api_key", "agents", "ops", stdout=out, stderr=io.StringIO())
    assert ApiKey.objects.get(name="ops").scope == "admin"
    call_command(
        "create_api_key", "agents", "bot", "--scope", "read", stdout=out, stderr=io.StringIO()
    )
    assert ApiKey.objects.get(name="bot").scope == "read"


def test_refused_requests_use_no_rate_limit_tokens(api, settings):
    """400 requests as fast as the client sends them, ignoring Retry-After: about the burst
    plus the rate times the time taken pass (refused ones took tokens, so far fewer did)."""
    import time

    settings.LOOPBOARD_API_RATE = 5  # well under the pace the test client asks at
    settings.LOOPBOARD_API_BURST = 5
    started = time.monotonic()
    codes = [api.get("/api/policy").status_code for _ in range(400)]
    elapsed = time.monotonic() - started
    passed = codes.count(200)
    assert set(codes) == {200, 429}
    expected = 5 + 5 * elapsed
    assert 400 / elapsed > 10  # the client asked faster than the rate
    assert abs(passed - expected) <= 0.1 * expected + 2, (passed, expected, elapsed)
    print(f"{passed} of 400 passed in {elapsed:.2f} s; the rate allows {expected:.0f}")
