"""`GET /api/labels`: JSON lines streamed, the key's project only, since/until filters."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Label
from runs.services import labels
from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db


def alarm(run):
    return run.findings.exclude(severity="info").order_by("fired_at", "pk").first()


@pytest.fixture
def labeled(user, project, other_project, process):
    """Two labels in alice's project (one made 3 days ago), one in another project."""
    stuck = process(project, looping_trace(6), name="stuck.jsonl").runs.get()
    older = process(project, looping_trace(6, tool="fetch"), name="older.jsonl").runs.get()
    theirs = process(other_project, looping_trace(6), name="secret.jsonl").runs.get()
    old = labels.label_finding(user, alarm(older), "real")
    Label.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    new = labels.label_finding(user, alarm(stuck), "false", "other", "ünïcode <b>probe</b>")
    labels.label_finding(None, alarm(theirs), "real")
    return old, new


def lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    body = b"".join(response.streaming_content).decode()
    assert body == "" or body.endswith("\n")
    return [json.loads(line) for line in body.splitlines()]


def test_labels_are_streamed_as_json_lines_of_the_keys_project(api, labeled):
    old, new = labeled
    rows = lines(api.get("/api/labels"))
    assert [row["id"] for row in rows] == [old.pk, new.pk]
    assert rows[1]["text"] == "ünïcode <b>probe</b>" and rows[1]["external_id"] == "stuck.jsonl"
    assert set(rows[1]) >= {"run_id", "detector", "tool", "seqs", "verdict", "reason", "user"}


def test_since_and_until_filter_by_when_the_label_was_made(api, labeled):
    old, new = labeled
    day_ago = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert [r["id"] for r in lines(api.get("/api/labels", {"since": day_ago}))] == [new.pk]
    assert [r["id"] for r in lines(api.get("/api/labels", {"until": day_ago}))] == [old.pk]
    zoned = (timezone.now() + timedelta(hours=1)).isoformat()
    assert lines(api.get("/api/labels", {"since": zoned})) == []


def test_a_bad_time_is_422_and_no_key_is_401(api, client, labeled):
    response = api.get("/api/labels", {"since": "yesterday"})
    assert response.status_code == 422 and "since" in response.json()["detail"]
    del client.defaults["HTTP_AUTHORIZATION"]
    assert client.get("/api/labels").status_code == 401


def test_another_projects_key_sees_only_its_labels(client, other_key, labeled):
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {other_key}"
    rows = lines(client.get("/api/labels"))
    assert [row["external_id"] for row in rows] == ["secret.jsonl"]
