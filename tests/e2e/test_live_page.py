"""In a real browser: a live run's page gains steps and a finding while the agent appends,
with no reload (htmx polling), its loop joins its loop issue through a real worker while it
runs, a call the guard stops shows on it, and the page stops polling when the run ends."""

from __future__ import annotations

import os

import httpx
import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import ApiKey, LoopIssue, Membership, Project
from tests.runs.services.test_worker import start_worker, stop_worker

pytestmark = [pytest.mark.e2e, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_live_run_page_gains_steps_and_a_finding(live_server, page, settings, tmp_path):
    settings.LOOPBOARD_LIVE_ISSUES_SECONDS = 1  # the web process (this one) queues it
    user = get_user_model().objects.create_user("lena", password="pw-lena-123")
    project = Project.objects.create(name="Live", slug="live")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    key = ApiKey.issue(project, "agent", scope=ApiKey.Scope.INGEST)[1]
    api = httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {key}"})

    opened = api.post("/api/live/runs", json={"external_id": "session-42", "name": "live agent"})
    assert opened.status_code == 200, opened.text
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "lena")
    page.fill("input[name=password]", "pw-lena-123")
    page.click("button[type=submit], input[type=submit]")
    page.goto(live_server.url + opened.json()["url"])
    expect(page.get_by_text("live agent").first).to_be_visible()

    def append(n: int) -> dict:
        step = {"id": f"t{n}", "tool": "Bash", "args": {"command": "make test"}}
        step |= {"result": "make: *** [test] Error 2", "status": "error"}
        answer = api.post("/api/live/runs/session-42/steps", json={"steps": [step]})
        assert answer.status_code == 200, answer.text
        return answer.json()

    append(0)
    expect(page.get_by_text("make: *** [test] Error 2").first).to_be_visible(timeout=10_000)
    verdicts = [append(n)["verdict"] for n in range(1, 5)]
    assert verdicts[-1] == "stop"
    # the page, never reloaded, shows the fifth step and the stop finding
    expect(page.locator("text=#4").first).to_be_visible(timeout=10_000)
    expect(page.locator(".badge--stop").first).to_be_visible(timeout=10_000)
    # a worker folds the loop into its issue a second later; the page links to it, live
    with open(tmp_path / "worker.log", "wb") as log:
        worker = start_worker(log)
        try:
            expect(page.locator(".finding__issue").first).to_be_visible(timeout=30_000)
        finally:
            stop_worker(worker)
    joined = LoopIssue.objects.filter(project=project, finding_count__gt=0)
    assert joined and {(i.run_count, i.tool) for i in joined} == {(1, "Bash")}
    # the guard stops the sixth identical call; the page lists it, still without a reload
    check = {"tool": "Bash", "args": {"command": "make test"}}
    assert api.post("/api/live/runs/session-42/check", json=check).json()["verdict"] == "stop"
    stopped = page.locator(".stopped-calls")
    expect(stopped).to_contain_text("Stopped by the guard", timeout=10_000)
    expect(stopped).to_contain_text("after step #4")  # the last step made, which exists
    expect(page.locator(".finding__issue")).to_have_count(2)  # each loop links to its issue
    if shots := os.environ.get("LOOPBOARD_SCREENSHOTS"):  # a folder: the README's pictures
        page.screenshot(path=os.path.join(shots, "live.png"), full_page=True)
    ended = api.post("/api/live/runs/session-42/end")
    assert ended.status_code == 200 and ended.json()["live"] is False
