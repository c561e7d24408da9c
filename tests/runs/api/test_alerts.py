"""The alerts API: channels and rules CRUD, the test send, the delivery log; secrets never
returned, admin keys to change, other projects 404."""

from __future__ import annotations

import json

import pytest

from runs.models import AlertRule, ApiKey, Channel
from runs.services import channels
from tests.receivers import Receiver


@pytest.fixture
def receiver(settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    receiver = Receiver()
    yield receiver
    receiver.close()


def send(api, method: str, url: str, body: dict | None = None):
    return getattr(api, method)(url, json.dumps(body or {}), content_type="application/json")


def test_channel_crud_never_returns_the_url_or_a_stored_secret(api, receiver):
    created = send(
        api, "post", "/api/channels", {"name": "ops", "kind": "webhook", "url": receiver.url}
    )
    assert created.status_code == 201, created.content
    body = created.json()
    secret = body["secret"]
    assert len(secret) >= 32 and body["hint"].endswith(f"••••{secret[-4:]}")
    listed = api.get("/api/channels")
    assert receiver.url not in listed.content.decode() and secret not in listed.content.decode()
    assert [c["name"] for c in listed.json()] == ["ops"]
    changed = send(api, "patch", f"/api/channels/{body['id']}", {"name": "ops 2", "enabled": False})
    assert changed.json()["name"] == "ops 2" and changed.json()["secret"] == ""
    assert not Channel.objects.get().enabled
    assert api.delete(f"/api/channels/{body['id']}").status_code == 204
    assert not Channel.objects.exists()


def test_a_bad_channel_is_422_with_the_reason(api, settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    response = send(
        api, "post", "/api/channels", {"name": "x", "kind": "webhook", "url": "http://127.0.0.1/x"}
    )
    assert response.status_code == 422
    assert "LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS" in response.json()["detail"]
    response = send(
        api, "post", "/api/channels", {"name": "x", "kind": "email", "recipients": ["nope"]}
    )
    assert response.status_code == 422 and "not an email address" in response.json()["detail"]


def test_send_test_and_the_delivery_log(api, receiver):
    channel = send(
        api, "post", "/api/channels", {"name": "ops", "kind": "webhook", "url": receiver.url}
    ).json()
    tested = api.post(f"/api/channels/{channel['id']}/test")
    assert tested.status_code == 200
    assert tested.json()["status"] == "sent" and tested.json()["response_code"] == 200
    assert receiver.requests[0]["json"]["kind"] == "test"
    log = api.get("/api/deliveries").json()
    assert [(d["channel"], d["status"], d["rule"]) for d in log] == [("ops", "sent", "")]
    assert api.get("/api/deliveries?status=failed").json() == []


def test_rule_crud(api, project, receiver):
    channel = send(
        api, "post", "/api/channels", {"name": "ops", "kind": "webhook", "url": receiver.url}
    ).json()
    created = send(
        api, "post", "/api/alert-rules",
        {"name": "stops", "kind": "run", "channel_ids": [channel["id"]], "tools": ["bash"]},
    )  # fmt: skip
    assert created.status_code == 201, created.content
    rule = created.json()
    assert (rule["severity"], rule["tools"], rule["channel_ids"]) == (
        "stop",
        ["bash"],
        [channel["id"]],
    )
    changed = send(
        api, "patch", f"/api/alert-rules/{rule['id']}", {"severity": "warn", "channel_ids": []}
    )
    assert changed.json()["severity"] == "warn" and changed.json()["channel_ids"] == []
    assert changed.json()["tools"] == ["bash"]  # left out: kept
    assert [r["name"] for r in api.get("/api/alert-rules").json()] == ["stops"]
    assert api.delete(f"/api/alert-rules/{rule['id']}").status_code == 204
    assert not AlertRule.objects.exists()


def test_an_invalid_rule_is_422(api):
    response = send(
        api, "post", "/api/alert-rules", {"name": "r", "kind": "rate", "metric": "flagged_share"}
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "a rate rule needs a warn or an alert threshold"


def test_changes_need_an_admin_key(client, project, receiver):
    _, read_key = ApiKey.issue(project, "reader", scope=ApiKey.Scope.READ)
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {read_key}"
    assert client.get("/api/channels").status_code == 200
    response = send(
        client, "post", "/api/channels", {"name": "x", "kind": "webhook", "url": receiver.url}
    )
    assert response.status_code == 403
    assert send(client, "post", "/api/alert-rules", {"name": "r", "kind": "run"}).status_code == 403


def test_another_projects_channels_and_rules_are_404(api, other_project, receiver):
    theirs, _ = channels.create_channel(
        other_project, channels.ChannelData(name="theirs", kind="webhook", url=receiver.url)
    )
    rule = AlertRule.objects.create(project=other_project, name="r", kind="run")
    assert api.get("/api/channels").json() == []
    assert api.get("/api/alert-rules").json() == []
    assert send(api, "patch", f"/api/channels/{theirs.pk}", {"name": "mine"}).status_code == 404
    assert api.post(f"/api/channels/{theirs.pk}/test").status_code == 404
    assert api.delete(f"/api/channels/{theirs.pk}").status_code == 404
    assert send(api, "patch", f"/api/alert-rules/{rule.pk}", {"name": "mine"}).status_code == 404
    assert api.delete(f"/api/alert-rules/{rule.pk}").status_code == 404
    # nor can a rule of this project point at their channel
    response = send(
        api, "post", "/api/alert-rules", {"name": "r", "kind": "run", "channel_ids": [theirs.pk]}
    )
    assert response.status_code == 422
    assert receiver.requests == [] and Channel.objects.get().name == "theirs"
