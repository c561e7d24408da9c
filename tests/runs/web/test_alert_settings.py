"""The alerts sections of the project settings page: channels, rules and the delivery log,
changed by owners only, seen by members, and 404 for other projects."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from runs.models import Alert, AlertRule, Channel, Delivery, Membership
from runs.services import channels
from tests.receivers import Receiver


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(autouse=True)
def private_ok(settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True


def settings_url(project) -> str:
    return reverse("runs:project_settings", args=[project.slug])


def add_channel(client, project, **fields):
    data = {"channel-name": "ops hook", "channel-kind": "webhook", **fields}
    return client.post(reverse("runs:alert_channel_create", args=[project.slug]), data)


def test_an_owner_adds_a_webhook_and_its_secret_is_shown_once(client_in, project, receiver):
    response = add_channel(client_in, project, **{"channel-url": receiver.url + "?t=zz99"})
    assert response.status_code == 302
    channel = Channel.objects.get(project=project)
    secret = channels.secret_of(channel)
    page = client_in.get(settings_url(project)).content.decode()
    assert secret in page and "shown only once" in page
    assert "127.0.0.1/…zz99" in page
    again = client_in.get(settings_url(project)).content.decode()
    assert secret not in again
    assert receiver.url not in again  # the URL is never shown again either


def test_a_private_url_is_refused_without_the_setting(client_in, project, settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    response = add_channel(client_in, project, **{"channel-url": "http://127.0.0.1:9/x"})
    page = client_in.get(response.url).content.decode()
    assert "Channel not added" in page and "LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS" in page
    assert not Channel.objects.exists()


def test_send_test_is_queued_reaches_the_receiver_and_shows_in_the_log(
    client_in, project, receiver, django_capture_on_commit_callbacks
):
    """The page does not wait on the receiver: the test is sent by the worker (run inline
    here, after the request's transaction commits) and its result is in the log."""
    from runs.tasks import app

    add_channel(client_in, project, **{"channel-url": receiver.url})
    channel = Channel.objects.get()
    url = reverse("runs:alert_channel_action", args=[project.slug, channel.pk])
    with django_capture_on_commit_callbacks() as queued:
        page = client_in.post(url, {"action": "test"}, follow=True).content.decode()
    assert "Test queued for “ops hook”" in page
    assert receiver.requests == [] and not Delivery.objects.exists()  # not sent in the request
    app.conf.task_always_eager = True
    try:
        for callback in queued:
            callback()
    finally:
        app.conf.task_always_eager = False
    assert receiver.requests[0]["json"]["kind"] == "test"
    log = client_in.get(
        reverse("runs:alert_deliveries", args=[project.slug]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert log.lstrip().startswith('<section class="card" id="delivery-log"')
    assert "sent" in log and Delivery.objects.get().payload_sha256[:12] in log


def test_disable_and_delete_a_channel(client_in, project, receiver):
    add_channel(client_in, project, **{"channel-url": receiver.url})
    channel = Channel.objects.get()
    url = reverse("runs:alert_channel_action", args=[project.slug, channel.pk])
    client_in.post(url, {"action": "disable"})
    channel.refresh_from_db()
    assert not channel.enabled
    client_in.post(url, {"action": "delete"})
    assert not Channel.objects.exists()


def rule_data(**fields) -> dict:
    data = {
        "rule-name": "stops", "rule-kind": "run", "rule-enabled": "on", "rule-severity": "stop",
        "rule-max_per_hour": "10", "rule-window_minutes": "60", "rule-no_data": "ok",
        "rule-hour": "9", "rule-tools": "", "rule-agents": "", "rule-detectors": "",
    }  # fmt: skip
    return data | {f"rule-{k}": v for k, v in fields.items()}


def test_create_edit_and_delete_a_rule(client_in, project, receiver):
    add_channel(client_in, project, **{"channel-url": receiver.url})
    channel = Channel.objects.get()
    create = reverse("runs:alert_rule_create", args=[project.slug])
    response = client_in.post(create, rule_data(channels=[channel.pk], tools="bash, web_*"))
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert list(rule.channels.all()) == [channel] and rule.tools == ["bash", "web_*"]
    edit_page = client_in.get(settings_url(project) + f"?rule={rule.pk}").content.decode()
    assert "Edit “stops”" in edit_page
    edit = reverse("runs:alert_rule_edit", args=[project.slug, rule.pk])
    client_in.post(edit, rule_data(name="warns too", severity="warn", channels=[channel.pk]))
    rule.refresh_from_db()
    assert (rule.name, rule.severity) == ("warns too", "warn")
    client_in.post(reverse("runs:alert_rule_delete", args=[project.slug, rule.pk]))
    assert not AlertRule.objects.exists()


def test_an_invalid_rate_rule_is_shown_again_with_its_error(client_in, project):
    create = reverse("runs:alert_rule_create", args=[project.slug])
    response = client_in.post(create, rule_data(kind="rate", metric="flagged_share"))
    assert response.status_code == 400
    assert "a rate rule needs a warn or an alert threshold" in response.content.decode()
    response = client_in.post(
        create,
        rule_data(kind="rate", metric="flagged_share", warn_threshold="0.9", alert_threshold="0.5"),
    )
    assert "must not exceed the alert threshold" in response.content.decode()
    assert not AlertRule.objects.exists()


def test_a_rule_cannot_use_another_projects_channel(client_in, project, other_project, receiver):
    theirs, _ = channels.create_channel(
        other_project, channels.ChannelData(name="theirs", kind="webhook", url=receiver.url)
    )
    create = reverse("runs:alert_rule_create", args=[project.slug])
    response = client_in.post(create, rule_data(channels=[theirs.pk]))
    assert response.status_code == 400
    assert not AlertRule.objects.exists()


def test_members_see_the_alerts_but_change_nothing(client, project, receiver):
    member = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    Membership.objects.create(project=project, user=member, role=Membership.Role.MEMBER)
    channels.create_channel(
        project, channels.ChannelData(name="ops hook", kind="webhook", url=receiver.url)
    )
    client.force_login(member)
    page = client.get(settings_url(project)).content.decode()
    assert "ops hook" in page and "Delivery log" in page
    assert 'id="channel-form"' not in page and 'id="rule-form"' not in page
    assert add_channel(client, project, **{"channel-url": receiver.url}).status_code == 403
    create = reverse("runs:alert_rule_create", args=[project.slug])
    assert client.post(create, rule_data()).status_code == 403
    assert Channel.objects.count() == 1


def test_another_projects_alerts_are_404(client_in, other_project, receiver):
    theirs, _ = channels.create_channel(
        other_project, channels.ChannelData(name="theirs", kind="webhook", url=receiver.url)
    )
    rule = AlertRule.objects.create(project=other_project, name="r", kind="run")
    slug = other_project.slug
    urls = [
        ("get", reverse("runs:project_settings", args=[slug])),
        ("get", reverse("runs:alert_deliveries", args=[slug])),
        ("post", reverse("runs:alert_channel_create", args=[slug])),
        ("post", reverse("runs:alert_channel_action", args=[slug, theirs.pk])),
        ("post", reverse("runs:alert_rule_edit", args=[slug, rule.pk])),
        ("post", reverse("runs:alert_rule_delete", args=[slug, rule.pk])),
    ]
    for method, url in urls:
        assert getattr(client_in, method)(url, {"action": "delete"}).status_code == 404, url
    assert Channel.objects.filter(pk=theirs.pk).exists()
    assert receiver.requests == []


def test_the_delivery_log_escapes_trace_content(client_in, project, receiver):
    channel, _ = channels.create_channel(
        project, channels.ChannelData(name="ops", kind="webhook", url=receiver.url)
    )
    rule = AlertRule.objects.create(project=project, name="r", kind="run")
    alert = Alert.objects.create(
        rule=rule, key="run:1", payload={"title": "Run “<script>alert(1)</script>” reached stop"}
    )
    Delivery.objects.create(
        alert=alert, channel=channel, status="failed", response_code=400,
        error="<img src=x onerror=alert(2)>", payload_sha256="ab" * 32,
    )  # fmt: skip
    page = client_in.get(settings_url(project)).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<img src=x" not in page


def test_the_log_link_works_without_javascript(client_in, project):
    response = client_in.get(reverse("runs:alert_deliveries", args=[project.slug]))
    assert response.status_code == 302
    assert response.url == settings_url(project) + "#delivery-log"


def test_the_admin_shows_channels_without_their_url_or_secret(client, project, receiver):
    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    Membership.objects.create(project=project, user=root)
    client.force_login(root)
    channel, secret = channels.create_channel(
        project, channels.ChannelData(name="ops", kind="webhook", url=receiver.url)
    )
    for url in ("/admin/runs/channel/", f"/admin/runs/channel/{channel.pk}/change/"):
        page = client.get(url).content.decode()
        assert "ops" in page
        assert receiver.url not in page and secret not in page
        assert channel.url_encrypted not in page
    assert client.get("/admin/runs/channel/add/").status_code == 403


def test_rules_of_every_kind_are_described(client_in, project):
    AlertRule.objects.create(
        project=project, name="r1", kind="run", severity="warn", tools=["bash"]
    )
    AlertRule.objects.create(project=project, name="r2", kind="issue", max_per_hour=3)
    AlertRule.objects.create(
        project=project, name="r3", kind="rate", metric="waste_cost_per_hour",
        window_minutes=30, alert_threshold=5, state="alert",
    )  # fmt: skip
    AlertRule.objects.create(project=project, name="r4", kind="digest", hour=8)
    page = client_in.get(settings_url(project)).content.decode()
    assert "a run reaches warn · tools bash" in page
    assert "a loop issue is new or regressed · at most 3/h" in page
    assert "waste cost per hour over 30 min" in page and 'badge--stop">alert' in page
    assert "daily digest at 8:00 (UTC)" in page


def test_an_owner_sets_the_project_time_zone_of_the_digest(client_in, project, other_project):
    url = reverse("runs:project_timezone", args=[project.slug])
    page = client_in.get(settings_url(project)).content.decode()
    assert 'name="timezone"' in page and '<option value="Europe/Berlin">' in page
    response = client_in.post(url, {"timezone": "Europe/Berlin"})
    assert response.status_code == 302 and response.url.endswith("#alert-rules")
    project.refresh_from_db()
    assert project.timezone == "Europe/Berlin"
    page = client_in.get(settings_url(project)).content.decode()
    assert '<option value="Europe/Berlin" selected>' in page
    assert "Time zone set to Europe/Berlin." in page

    client_in.post(url, {"timezone": "Mars/<b>Olympus</b>"})  # not a zone: refused, escaped
    project.refresh_from_db()
    assert project.timezone == "Europe/Berlin"
    page = client_in.get(settings_url(project)).content.decode()
    assert "Time zone not changed" in page and "&lt;b&gt;Olympus" in page and "<b>Olymp" not in page

    theirs = reverse("runs:project_timezone", args=[other_project.slug])
    assert client_in.post(theirs, {"timezone": "Asia/Tokyo"}).status_code == 404


def test_a_member_sees_the_time_zone_but_cannot_change_it(client, project):
    member = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    Membership.objects.create(project=project, user=member, role=Membership.Role.MEMBER)
    client.force_login(member)
    page = client.get(settings_url(project)).content.decode()
    assert "The daily digest's hour is in UTC." in page and 'name="timezone"' not in page
    url = reverse("runs:project_timezone", args=[project.slug])
    assert client.post(url, {"timezone": "Asia/Tokyo"}).status_code == 403
    project.refresh_from_db()
    assert project.timezone == "UTC"
