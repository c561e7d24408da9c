"""In a real browser with a real Celery worker: back-test a threshold over the last 30 days
from the Tuning page, watch its progress, and read precision and recall side by side."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import BacktestJob, Finding, Membership, Project
from runs.services import labels
from tests.helpers import looping_trace
from tests.runs.services.test_worker import start_worker, stop_worker

pytestmark = [pytest.mark.e2e, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_back_test_over_30_days_shows_precision_and_recall(live_server, page, process):
    user = get_user_model().objects.create_user("tess", password="pw-tess-123", is_staff=True)
    project = Project.objects.create(name="Tuned", slug="tuned")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    real = process(project, looping_trace(3, tool="search"), name="real.jsonl").runs.get()
    noisy = process(project, looping_trace(3, tool="poll"), name="noisy.jsonl").runs.get()
    process(project, looping_trace(2, tool="poll"), name="quiet.jsonl")
    for run, verdict, reason in ((real, "real", ""), (noisy, "false", "polling")):
        finding = Finding.objects.filter(run=run).exclude(severity="info").first()
        labels.label_finding(user, finding, verdict, reason)

    worker = start_worker(LOOPBOARD_STALE_SECONDS="60")
    try:
        page.goto(live_server.url + "/accounts/login/")
        page.fill("input[name=username]", "tess")
        page.fill("input[name=password]", "pw-tess-123")
        page.click("button[type=submit], input[type=submit]")
        page.goto(f"{live_server.url}/projects/{project.slug}/tuning/")
        # The draft: poll is a polling tool (exempt from repeat rules).
        page.fill("input[name=t-0-tool]", "poll")
        page.select_option("select[name=t-0-polling]", "yes")
        page.select_option("select[name=b-range]", "30d")
        page.get_by_role("button", name="Run back-test").click()

        block = page.locator("#backtest")
        expect(block.get_by_text("Done")).to_be_visible(timeout=60_000)
        expect(block.get_by_text("1 cleared")).to_be_visible()
        expect(block.get_by_text("2 labels in range")).to_be_visible()
        scores = block.locator(".backtest__scores tbody tr")
        expect(scores.nth(0)).to_contain_text(re.compile(r"Current policy\s+0\.50\s+1\.00"))
        expect(scores.nth(1)).to_contain_text(re.compile(r"Draft\s+1\.00\s+1\.00"))
        assert page.url.endswith("/tuning/")  # htmx swapped the block, the page stayed
        job = BacktestJob.objects.get()
        assert job.status == "done" and job.user == user

        block.get_by_role("link", name="noisy.jsonl").click()
        expect(page).to_have_url(re.compile(rf"/runs/{noisy.pk}/$"))
    finally:
        stop_worker(worker)
