"""In a real browser, with a real worker: add a webhook channel pointing at a local receiver
and a stop rule, upload a looping trace, and see the signed delivery arrive and show in the
settings page's delivery log."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from runs.models import Membership, Project
from tests.helpers import looping_trace
from tests.receivers import Receiver
from tests.runs.services.test_worker import start_worker, stop_worker

pytestmark = [pytest.mark.e2e, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def owner_login(live_server, page):
    user = get_user_model().objects.create_user("olga", password="pw-olga-123")
    project = Project.objects.create(name="Ops", slug="ops")
    Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "olga")
    page.fill("input[name=password]", "pw-olga-123")
    page.click("button[type=submit], input[type=submit]")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    return project


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


def test_a_looping_upload_alerts_a_webhook_and_shows_in_the_delivery_log(
    live_server, page, owner_login, receiver, settings, tmp_path
):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True  # the web process (this one)
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed in finally
    worker = start_worker(log, LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS="true")
    try:
        page.goto(f"{live_server.url}/projects/{owner_login.slug}/settings/")

        # A webhook channel to the local receiver; its generated secret is shown once.
        channels = page.locator("#alert-channels")
        channels.locator("input[name=channel-name]").fill("ops receiver")
        channels.locator("select[name=channel-kind]").select_option("webhook")
        channels.locator("input[name=channel-url]").fill(receiver.url)
        channels.get_by_role("button", name="Add channel").click()
        expect(page.locator("#new-channel-secret")).to_contain_text("shown only once")
        receiver.secret = page.locator("#new-channel-secret code").inner_text().strip()
        expect(page.locator("#alert-channels tbody")).to_contain_text("ops receiver")

        # A rule: a run reaches stop, sent to that channel.
        rules = page.locator("#rule-form")
        rules.locator("input[name=rule-name]").fill("Stopped runs")
        rules.locator("select[name=rule-kind]").select_option("run")
        rules.locator("select[name=rule-severity]").select_option("stop")
        rules.get_by_label("ops receiver").check()
        rules.get_by_role("button", name="Add rule").click()
        expect(page.locator("#alert-rules tbody")).to_contain_text("a run reaches stop")

        # Upload a looping trace; the worker analyzes it and delivers the alert.
        trace = tmp_path / "looping-search.jsonl"
        trace.write_bytes(looping_trace(8))
        page.get_by_role("link", name="Upload", exact=True).click()
        page.set_input_files("input[name=files]", str(trace))
        page.get_by_role("button", name="Upload").click()
        expect(page.locator("#upload-results .badge--stop")).to_be_visible(timeout=30_000)

        # Back on the settings page, the delivery log (refreshing itself) shows it sent.
        page.goto(f"{live_server.url}/projects/{owner_login.slug}/settings/")
        row = page.locator("#delivery-log tr.delivery--sent")
        expect(row).to_contain_text("Stopped runs", timeout=30_000)
        expect(row).to_contain_text("ops receiver")
        expect(row).to_contain_text("200")
        deadline = time.monotonic() + 5
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.1)
        [request] = receiver.requests
        assert request["verified"], "the receiver could not verify the signature"
        assert request["json"]["kind"] == "run"
        assert request["json"]["run"]["name"] == "looping-search.jsonl"
    finally:
        stop_worker(worker)
        log.close()
        print((tmp_path / "worker.log").read_text(errors="replace")[-4000:])
