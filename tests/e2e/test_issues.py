"""In a real browser: from a run's finding to its loop issue, the Issues list filtered without
a reload, and the issue resolved in a version from its page."""

from __future__ import annotations

import os
import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import LoopIssue, Membership, Project
from tests.runs.services.test_issues import failing_write, search_loop, upload

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def logged_in(live_server, page):
    user = get_user_model().objects.create_user("ines", password="pw-ines-123")
    project = Project.objects.create(name="Agents", slug="agents")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)  # resolves
    first = upload(project, search_loop("pg 18 jit", ts=1764489600), "v1-a.jsonl", "1.0")
    upload(project, search_loop("pg18 release", ts=1764576000), "v1-b.jsonl", "1.0")
    upload(project, failing_write("PermissionError: denied", ts=1764662400), "w.jsonl", "1.1")
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "ines")
    page.fill("input[name=password]", "pw-ines-123")
    page.click("button[type=submit], input[type=submit]")
    return first


def shoot(page, name: str) -> None:
    if shots := os.environ.get("LOOPBOARD_SCREENSHOTS"):  # a folder: the README's pictures
        page.screenshot(path=os.path.join(shots, name), full_page=True)


def test_open_the_issues_filter_them_open_one_and_resolve_it(live_server, page, logged_in):
    page.goto(live_server.url + "/")
    page.get_by_role("link", name="Issues").click()
    rows = page.locator("tr.issue-row")
    expect(rows).to_have_count(2)
    shoot(page, "issues.png")
    page.fill("input[name=tool]", "web_search")
    page.keyboard.press("Enter")  # htmx swaps the table, the URL follows
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"/issues/\?.*tool=web_search"))
    rows.first.get_by_role("link").click()

    issue = LoopIssue.objects.get(tool="web_search")
    expect(page.locator("h1")).to_contain_text("web_search")
    expect(page.locator("#issue-runs tbody tr")).to_have_count(2)
    expect(page.get_by_role("link", name="Compare first and last run")).to_be_visible()
    shoot(page, "issue.png")
    page.fill("input[name=version]", "1.1")
    page.get_by_role("button", name="Resolve").click()
    expect(page.locator("#issue-state")).to_have_text("Resolved in 1.1")
    issue.refresh_from_db()
    assert (issue.state, issue.resolved_in_version, issue.state_changed_by.username) == (
        "resolved", "1.1", "ines",
    )  # fmt: skip
    page.get_by_role("button", name="Reopen").click()
    expect(page.locator("#issue-state")).to_have_text("Open")


def test_a_finding_on_the_run_page_leads_to_its_issue(live_server, page, logged_in):
    page.goto(live_server.url + logged_in.get_absolute_url())
    page.get_by_role("link", name="This loop across runs →").first.click()
    expect(page.locator("h1")).to_contain_text("web_search")
    expect(page.locator(".issue-head")).to_contain_text("2")  # two runs
