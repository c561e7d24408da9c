"""Stored bytes you can see: the settings page, the API, /metrics, and the budget warning."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Alert, Channel, StorageDay
from runs.services import ingest, retention, usage
from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db


def stored(project) -> None:
    trace, _ = ingest.store_trace(project, looping_trace(20), name="loop.jsonl")
    ingest.ingest_trace(trace.pk)


def test_the_retention_pass_measures_each_project_and_the_growth_per_day(project):
    stored(project)
    StorageDay.objects.create(
        project=project, day=timezone.now().date() - timedelta(days=2), raw_bytes=10
    )
    retention.apply()
    figures = usage.figures(project)
    assert figures.latest.raw_bytes > 0 and figures.latest.step_bytes > 0
    assert figures.growth["raw_bytes"] == (figures.latest.raw_bytes - 10) / 2


def test_the_settings_page_shows_and_sets_retention(project, client_in):
    stored(project)
    retention.apply()
    page = client_in.get(f"/projects/{project.slug}/storage/", headers={"HX-Request": "true"})
    assert page.status_code == 200 and b"Raw traces" in page.content
    settings_page = client_in.get(f"/projects/{project.slug}/settings/").content
    assert f"/projects/{project.slug}/storage/".encode() in settings_page
    answer = client_in.post(
        f"/projects/{project.slug}/retention/",
        {"raw_retention_days": "7", "step_retention_days": "", "run_retention_days": ""},
    )
    assert answer.status_code == 302
    project.refresh_from_db()
    assert (project.raw_retention_days, project.step_retention_days) == (7, None)


def test_the_api_reads_and_sets_retention(project, client, key):
    auth = {"Authorization": f"Bearer {key}"}
    got = client.get("/api/retention", headers=auth)
    assert got.status_code == 200 and got.json()["run_retention_days"] == 365
    body = {"raw_retention_days": 10, "step_retention_days": 20, "run_retention_days": 30}
    put = client.put("/api/retention", body, content_type="application/json", headers=auth)
    assert put.status_code == 200 and put.json()["step_retention_days"] == 20
    bad = {"step_retention_days": 40, "run_retention_days": 30}
    put = client.put("/api/retention", bad, content_type="application/json", headers=auth)
    assert put.status_code == 422 and "longer than the runs" in put.json()["detail"]


def test_metrics_show_the_stored_bytes(project, client, key):
    stored(project)
    retention.apply()
    text = client.get("/metrics", headers={"Authorization": f"Bearer {key}"}).text
    assert f'loopboard_stored_bytes{{kind="raw",project="{project.slug}"}}' in text


def test_a_project_near_its_budget_warns_its_channels_once_a_day(project):
    stored(project)
    Channel.objects.create(project=project, name="hook", kind=Channel.Kind.WEBHOOK)
    project.storage_budget_bytes = 1000
    project.save()
    day = usage.measure(project)
    assert day.total_bytes >= 1000
    alert = usage.warn_if_near_budget(project, day)
    assert alert is not None and alert.rule is None and "over its budget" in alert.payload["title"]
    assert usage.warn_if_near_budget(project, day) is None  # once a day
    assert Alert.objects.filter(key__startswith="storage:").count() == 1
