"""Alerts end to end against real local HTTP receivers: signed webhooks, Slack Block Kit,
email through Django's locmem backend, retries, refusals, debounce, windowed rate rules, issue
and live alerts, and project isolation. Celery runs eagerly (inline) and the on-commit hooks
run, so each test goes through the same tasks the worker runs."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from runs.models import Alert, AlertRule, Channel, Delivery, Finding, LoopIssue, Run, Verdict
from runs.services import alerts, channels, delivery, live
from tests.helpers import healthy_trace, looping_trace


def webhook(project, url: str, name: str = "hook") -> tuple[Channel, str]:
    return channels.create_channel(
        project, channels.ChannelData(name=name, kind="webhook", url=url)
    )


def rule(project, *chans: Channel, **fields) -> AlertRule:
    fields.setdefault("kind", AlertRule.Kind.RUN)
    created = AlertRule.objects.create(project=project, name=fields.pop("name", "stops"), **fields)
    created.channels.set(chans)
    return created


def test_a_stop_run_sends_a_signed_webhook_the_receiver_verifies(
    project, process, eager, receivers
):
    receiver = receivers(secret="")
    channel, secret = webhook(project, receiver.url)
    receiver.secret = secret
    rule(project, channel)

    with eager():
        trace = process(project, looping_trace(8))
    run = trace.runs.get()
    assert run.verdict == Verdict.STOP

    [request] = receiver.requests
    assert request["verified"] and request["fresh"]
    body = request["json"]
    assert request["headers"]["Idempotency-Key"] == body["idempotency_key"]
    finding = run.findings.filter(severity="stop").get()
    assert body["kind"] == "run"
    assert body["text"] == finding.message  # the finding's own words
    assert body["url"] == f"http://127.0.0.1:8000/runs/{run.pk}/"
    assert body["run"]["waste"]["steps"] == run.waste_steps > 0
    assert body["findings"][0]["policy_rule"] == finding.rule
    assert body["findings"][0]["message"] == finding.message
    [attempt] = Delivery.objects.all()
    assert (attempt.status, attempt.response_code, attempt.attempt) == ("sent", 200, 1)
    assert attempt.payload_sha256 == hashlib.sha256(request["body"]).hexdigest()


def test_a_tampered_body_fails_the_receivers_check(project, receivers):
    secret = "s" * 32
    body = b'{"kind":"run"}'
    headers = delivery.signature_headers(secret, body)
    receiver = receivers(secret=secret)
    receiver.record(headers, body)
    receiver.record(headers, body.replace(b"run", b"rum"))
    assert [r["verified"] for r in receiver.requests] == [True, False]


def test_one_alert_per_run_per_rule_even_when_analyzed_again(project, process, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel)
    with eager():
        trace = process(project, looping_trace(8))
    from runs.services import analysis

    with eager():
        analysis.analyze_run(trace.runs.get().pk)
    assert len(receiver.requests) == 1
    assert Alert.objects.count() == 1


def test_a_500_is_retried_with_backoff_until_200(project, process, eager, receivers):
    receiver = receivers([500, 503, 200])
    channel, _ = webhook(project, receiver.url)
    rule(project, channel)
    with eager():
        process(project, looping_trace(8))
    attempts = list(
        Delivery.objects.order_by("attempt").values_list("attempt", "status", "response_code")
    )
    assert attempts == [(1, "retrying", 500), (2, "retrying", 503), (3, "sent", 200)]
    # every attempt carries the same body and idempotency key
    assert len({r["body"] for r in receiver.requests}) == 1


def test_backoff_doubles_up_to_an_hour(settings):
    settings.LOOPBOARD_ALERT_RETRY_SECONDS = 10
    assert [delivery.backoff(n) for n in (1, 2, 3, 4, 10)] == [10, 20, 40, 80, 3600]


def test_a_400_is_not_retried(project, process, eager, receivers):
    receiver = receivers([400, 200])
    channel, _ = webhook(project, receiver.url)
    rule(project, channel)
    with eager():
        process(project, looping_trace(8))
    [attempt] = Delivery.objects.all()
    assert (attempt.status, attempt.response_code) == ("failed", 400)
    assert attempt.error.startswith("HTTP 400: nope")
    assert len(attempt.error) <= 500  # the answer's read is capped
    assert len(receiver.requests) == 1


def test_delivery_gives_up_after_the_last_attempt(project, process, eager, receivers, settings):
    settings.LOOPBOARD_ALERT_ATTEMPTS = 3
    receiver = receivers([502])
    channel, _ = webhook(project, receiver.url)
    rule(project, channel)
    with eager():
        process(project, looping_trace(8))
    statuses = list(Delivery.objects.order_by("attempt").values_list("status", flat=True))
    assert statuses == ["retrying", "retrying", "gave_up"]


def test_a_timeout_and_a_refused_connection_are_retried(project, eager, receivers, settings):
    settings.LOOPBOARD_ALERT_TIMEOUT_SECONDS = 0.3
    settings.LOOPBOARD_ALERT_ATTEMPTS = 1
    slow = receivers(delay=1.5)
    closed = receivers()
    closed_url = closed.url
    closed.close()
    for url in (slow.url, closed_url):
        channel, _ = webhook(project, url, name=url)
        attempt = delivery.send_test(channel)
        assert attempt.status == "failed"  # a test is one attempt
        assert delivery.post(url, b"{}", {}).retry
    errors = list(Delivery.objects.order_by("id").values_list("error", flat=True))
    assert errors[0] == "timed out after 0.3 s"
    assert errors[1].startswith("ConnectError")


def test_a_receiver_that_trickles_a_byte_at_a_time_is_cut_at_the_overall_deadline(
    project, eager, settings
):
    """httpx's timeout holds per read: a receiver sending one byte a second never trips it.
    The call as a whole ends at LOOPBOARD_ALERT_TIMEOUT_SECONDS, logged and retried."""
    import time

    from tests.cli.test_hook_install import Trickle

    settings.LOOPBOARD_ALERT_TIMEOUT_SECONDS = 1.5
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    trickle = Trickle()
    try:
        started = time.monotonic()
        outcome = delivery.post(trickle.url + "/hook", b"{}", {})
        took = time.monotonic() - started
    finally:
        trickle.close()
    assert not outcome.sent and outcome.retry
    assert outcome.error == "timed out after 1.5 s"
    assert took < 6  # not the 10,000 s the trickle would take


def test_redirects_are_not_followed(project, eager, receivers):
    elsewhere = receivers()
    bouncer = receivers([302], location=elsewhere.url)
    channel, _ = webhook(project, bouncer.url)
    attempt = delivery.send_test(channel)
    assert (attempt.status, attempt.response_code) == ("failed", 302)
    assert attempt.error == "redirect to 127.0.0.1 not followed"
    assert len(bouncer.requests) == 1 and elsewhere.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/hook",
        "http://[::1]/hook",
    ],
)
def test_private_addresses_are_refused_without_the_setting(project, settings, url):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    with pytest.raises(channels.ChannelInvalid, match="LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS"):
        webhook(project, url)
    assert not Channel.objects.exists()


@pytest.mark.parametrize(
    ("kind", "url", "why"),
    [
        ("webhook", "ftp://example.com/x", "http:// or https://"),
        ("webhook", "https://user:pw@example.com/x", "no user name"),
        ("slack", "https://example.com/services/x", "hooks.slack.com"),
        ("slack", "http://hooks.slack.com/services/x", "hooks.slack.com"),
    ],
)
def test_bad_urls_are_refused(project, settings, kind, url, why):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    with pytest.raises(channels.ChannelInvalid, match=why):
        channels.create_channel(project, channels.ChannelData(name="x", kind=kind, url=url))


def test_the_address_is_checked_again_at_send_time(project, eager, receivers, settings):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)  # allowed then
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    attempt = delivery.send_test(channel)
    assert attempt.status == "failed"
    assert "private address" in attempt.error
    assert receiver.requests == []


def test_secrets_are_stored_encrypted_and_shown_only_as_a_hint(project, eager, receivers):
    receiver = receivers()
    channel, secret = webhook(project, receiver.url + "?token=abcd1234")
    channel.refresh_from_db()
    assert receiver.url not in channel.url_encrypted and secret not in channel.secret_encrypted
    assert channels.url_of(channel).endswith("token=abcd1234")
    assert channel.hint == f"127.0.0.1/…1234 · secret ••••{secret[-4:]}"
    assert len(secret) >= 32


def test_slack_gets_block_kit_with_trace_content_escaped(project, process, eager, receivers):
    receiver = receivers()
    channel, _ = channels.create_channel(
        project, channels.ChannelData(name="slack", kind="slack", url=receiver.url)
    )
    rule(project, channel)
    with eager():
        process(project, looping_trace(8, tool="<!channel>_search"))
    [request] = receiver.requests
    body = request["json"]
    assert "X-Loopboard-Signature" not in request["headers"]
    assert body["text"].startswith("Run “")
    types = [block["type"] for block in body["blocks"]]
    assert types[0] == "header" and types[-2:] == ["actions", "context"]
    assert "section" in types
    # mrkdwn (and the notification text) would turn <!channel> into a mention: escaped
    mrkdwn = [body["text"]] + [
        part["text"]
        for block in body["blocks"]
        for part in [block.get("text") or {}, *block.get("fields", []), *block.get("elements", [])]
        if part.get("type") == "mrkdwn"
    ]
    assert all("<!channel>" not in text for text in mrkdwn)
    assert any("&lt;!channel&gt;_search" in text for text in mrkdwn)
    assert body["blocks"][-2]["elements"][0]["url"].startswith("http://127.0.0.1:8000/runs/")


def test_email_goes_through_djangos_backend(project, process, eager):
    channel, _ = channels.create_channel(
        project,
        channels.ChannelData(
            name="oncall", kind="email", recipients=["a@example.com", "b@example.com"]
        ),
    )
    rule(project, channel)
    with eager():
        trace = process(project, looping_trace(8))
    run = trace.runs.get()
    [email] = mail.outbox
    assert email.to == ["a@example.com", "b@example.com"]
    assert email.subject.startswith("[loopboard] Run “")
    assert run.findings.filter(severity="stop").get().message in email.body
    assert f"http://127.0.0.1:8000/runs/{run.pk}/" in email.body
    assert Delivery.objects.get().status == "sent"


def test_bad_recipients_are_refused(project):
    with pytest.raises(channels.ChannelInvalid, match="not an email address"):
        channels.create_channel(
            project, channels.ChannelData(name="x", kind="email", recipients=["nope"])
        )


def test_filters_pick_tools_detectors_agents_and_severity(project, process, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel, name="bash only", tools=["bash*"])
    rule(
        project,
        channel,
        name="search",
        tools=["web_*"],
        detectors=["repeat", "no_progress", "cycle"],
    )
    rule(project, channel, name="other agent", agents=["someone-else"])
    rule(project, channel, name="warns", severity="warn")
    with eager():
        process(project, looping_trace(8))
        process(project, healthy_trace())
    fired = sorted(Alert.objects.values_list("rule__name", flat=True))
    detectors = set(Finding.objects.filter(severity="stop").values_list("detector", flat=True))
    expected = ["warns"] + (["search"] if detectors & {"repeat", "no_progress", "cycle"} else [])
    assert fired == sorted(expected)


def test_debounce_holds_alerts_over_the_hourly_cap_and_sums_them_into_the_next(
    project, process, eager, receivers
):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    capped = rule(project, channel, max_per_hour=2)
    with eager():
        for i in range(5):
            process(project, looping_trace(6 + i))  # distinct runs
    assert len(receiver.requests) == 2
    assert capped.alerts.filter(held=True).count() == 3
    # an hour later the next alert goes out and says what was held back
    capped.alerts.filter(held=False).update(created_at=timezone.now() - timedelta(hours=2))
    with eager():
        process(project, looping_trace(20))
    assert len(receiver.requests) == 3
    held = receiver.requests[-1]["json"]["held"]
    assert held["count"] == 3 and len(held["titles"]) == 3
    assert "3 alerts of this rule held back" in held["text"]
    assert capped.alerts.filter(held=True, summed_into=None).count() == 0


def test_fire_is_idempotent_on_rule_and_key(project, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    digest = rule(project, channel, kind="digest", name="daily")
    payload = {"kind": "digest", "title": "Daily digest", "text": "3 runs"}
    with eager():
        first = alerts.fire(digest, "digest:2026-12-01", payload)
        again = alerts.fire(digest, "digest:2026-12-01", payload)
    assert first is not None and again is None
    assert len(receiver.requests) == 1


def make_runs(project, now, *, ok=0, stop=0, cost=0.0, minutes_ago=5):
    """Generated analyzed runs, created `minutes_ago`, with one stop finding each stop run."""
    created = now - timedelta(minutes=minutes_ago)
    for i in range(ok + stop):
        verdict = Verdict.STOP if i < stop else Verdict.OK
        run = Run.objects.create(
            project=project, external_id=f"g{i}-{created:%H%M%S%f}", name=f"generated {i}",
            format="native", verdict=verdict, created_at=created,
            waste_steps=4 if i < stop else 0, waste_cost=cost if i < stop else None,
        )  # fmt: skip
        if verdict == Verdict.STOP:
            Finding.objects.create(
                run=run, detector="repeat", severity="stop", tool="web_search",
                message="web_search was called 5 times with the same arguments", rule="defaults",
            )  # fmt: skip


def test_a_windowed_share_goes_warn_then_alert_then_back_to_ok(project, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    share = rule(
        project, channel, kind="rate", name="flagged share", metric="flagged_share",
        window_minutes=60, warn_threshold=0.3, alert_threshold=0.6,
    )  # fmt: skip
    now = timezone.now()
    make_runs(project, now, ok=6, stop=4)  # 0.4
    with eager():
        alerts.evaluate_rate_rules(now)
        alerts.evaluate_rate_rules(now + timedelta(seconds=20))  # same level: quiet
    make_runs(project, now, stop=10, minutes_ago=3)  # 14 of 20 = 0.7
    with eager():
        alerts.evaluate_rate_rules(now + timedelta(minutes=1))
        alerts.evaluate_rate_rules(now + timedelta(minutes=2))
    # two hours on, the window is empty: no data counts as ok
    with eager():
        alerts.evaluate_rate_rules(now + timedelta(hours=2))
    levels = [r["json"]["rate"]["level"] for r in receiver.requests]
    assert levels == ["warn", "alert", "ok"]
    first = receiver.requests[0]["json"]
    assert first["rate"]["value"] == pytest.approx(0.4)
    assert first["rate"]["previous"] == "ok"
    assert "web_search was called 5 times" in json.dumps(first["sections"])
    share.refresh_from_db()
    assert share.state == "ok"


def test_waste_and_stop_rates_per_hour(project, eager):
    now = timezone.now()
    make_runs(project, now, stop=3, cost=0.5)
    cost = rule(
        project, kind="rate", metric="waste_cost_per_hour", window_minutes=30, alert_threshold=3
    )
    stops = rule(
        project, kind="rate", metric="stop_findings_per_hour", window_minutes=120, warn_threshold=1
    )
    assert alerts.measure(cost, now) == (pytest.approx(3.0), 3)  # 1.5 in half an hour
    assert alerts.measure(stops, now) == (pytest.approx(1.5), 3)  # 3 in two hours
    with eager():
        alerts.evaluate_rate_rules(now)
    cost.refresh_from_db()
    stops.refresh_from_db()
    assert (cost.state, stops.state) == ("alert", "warn")


@pytest.mark.parametrize(
    ("no_data", "expected"), [("ok", "ok"), ("alert", "alert"), ("keep", "warn")]
)
def test_no_data_handling(project, eager, no_data, expected):
    rate = rule(
        project,
        kind="rate",
        metric="flagged_share",
        warn_threshold=0.1,
        no_data=no_data,
        state="warn",
    )
    with eager():
        alerts.evaluate_rate_rules(timezone.now())
    rate.refresh_from_db()
    assert rate.state == expected
    assert rate.alerts.count() == (0 if expected == "warn" else 1)


def test_one_projects_rules_never_see_another_projects_runs(
    project, other_project, process, eager, receivers
):
    theirs = receivers()
    channel, _ = webhook(other_project, theirs.url)
    rule(other_project, channel)
    rate = rule(other_project, channel, kind="rate", metric="flagged_share", warn_threshold=0.1)
    with eager():
        process(project, looping_trace(8))
        alerts.evaluate_rate_rules(timezone.now() + timedelta(seconds=1))
        alerts.on_runs_analyzed(Run.objects.values_list("pk", flat=True))
    assert theirs.requests == []
    assert alerts.measure(rate, timezone.now() + timedelta(seconds=1)) == (None, 0)


def test_a_live_run_alerts_while_it_runs_and_not_again_when_it_ends(project, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel)
    calls = [{"tool": "web_search", "args": {"q": "same"}, "result": {"results": []}}]
    with eager():
        for _ in range(8):
            live.append_steps(project, "session-1", calls)
    [request] = receiver.requests
    assert request["json"]["run"]["live"] is True
    assert "while live" in request["json"]["title"]
    with eager():
        live.end_run(project, "session-1")
    assert Run.objects.get().verdict == Verdict.STOP  # analyzed at the end
    assert len(receiver.requests) == 1


def test_a_new_loop_issue_alerts_its_issue_rules(project, process, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel, kind="issue", name="issues")
    with eager():
        process(project, looping_trace(8))
        process(project, looping_trace(9))  # the same loop: no new issue
    issues = list(LoopIssue.objects.filter(project=project))
    assert issues
    assert sorted(r["json"]["issue"]["id"] for r in receiver.requests) == sorted(
        i.pk for i in issues
    )
    body = receiver.requests[0]["json"]
    assert body["event"] == "new" and body["title"].startswith("New loop issue: ")
    assert body["url"].startswith("http://127.0.0.1:8000/")


def test_a_regressed_issue_alerts_each_time_it_comes_back(project, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel, kind="issue", name="issues")
    issue = LoopIssue.objects.create(
        project=project, fingerprint="f" * 16, detector="repeat", title="web_search repeats",
        state="regressed", state_changed_at=timezone.now(),
    )  # fmt: skip
    with eager():
        alerts.on_issue_events([(issue.pk, "regressed")])
        alerts.on_issue_events([(issue.pk, "regressed")])  # the same regression
    issue.state_changed_at += timedelta(days=3)
    issue.save()
    with eager():
        alerts.on_issue_events([(issue.pk, "regressed")])
    assert [r["json"]["event"] for r in receiver.requests] == ["regressed", "regressed"]


def test_a_disabled_channel_or_rule_sends_nothing(project, process, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    off = rule(project, channel, enabled=False)
    with eager():
        process(project, looping_trace(8))
    channels.update_channel(channel, channels.ChannelData(enabled=False))
    off.enabled = True
    off.save()
    with eager():
        process(project, looping_trace(9))
    assert receiver.requests == []
    assert Delivery.objects.count() == 0


def fire_at_once(rule_id: int, keys: list[str]) -> list[bool]:
    """Fire one key per thread, each on its own connection, released together; return
    whether each made an alert to deliver."""
    from django.db import connection

    barrier = threading.Barrier(len(keys))
    sent = [False] * len(keys)

    def work(i: int) -> None:
        try:
            barrier.wait()
            alert = alerts.fire(AlertRule.objects.get(pk=rule_id), keys[i], {"title": keys[i]})
            sent[i] = alert is not None and not alert.held
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(keys))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return sent


@pytest.mark.django_db(transaction=True)
def test_concurrent_fires_of_one_key_make_one_alert(project):
    same = rule(project, max_per_hour=0)
    sent = fire_at_once(same.pk, ["run:1"] * 6)
    assert sent.count(True) == 1
    assert same.alerts.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_fires_keep_to_the_hourly_cap(project):
    capped = rule(project, max_per_hour=2)
    sent = fire_at_once(capped.pk, [f"run:{i}" for i in range(6)])
    assert sent.count(True) == 2
    assert capped.alerts.filter(held=False).count() == 2
    assert capped.alerts.filter(held=True).count() == 4


def test_the_connection_goes_to_the_address_that_was_checked():
    assert delivery.pinned("https://hooks.example.com:8443/a?b=1", "93.184.215.14") == (
        "https://93.184.215.14:8443/a?b=1"
    )
    assert delivery.pinned("http://example.com/x", "2606:2800:220:1::1") == (
        "http://[2606:2800:220:1::1]/x"
    )


def test_a_host_that_resolves_elsewhere_at_send_time_is_refused(
    project, receivers, settings, monkeypatch
):
    """DNS rebinding: public when the channel was saved, loopback when the alert is sent."""
    import socket

    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    receiver = receivers()
    answers = {"now": "93.184.215.14"}

    def getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers["now"], port))]

    monkeypatch.setattr(channels.socket, "getaddrinfo", getaddrinfo)
    port = receiver.server.server_port
    channel, _ = webhook(project, f"http://rebind.example:{port}/hook")
    answers["now"] = "127.0.0.1"
    attempt = delivery.send_test(channel)
    assert attempt.status == "failed" and "resolves to 127.0.0.1" in attempt.error
    assert receiver.requests == []


def test_a_host_that_does_not_resolve_at_send_time_is_retried(settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    outcome = delivery.post("https://loopboard-test.invalid/hook", b"{}", {})
    assert outcome.retry and "does not resolve" in outcome.error


def test_a_live_runs_new_loop_issue_alerts_while_it_runs(project, eager, receivers):
    receiver = receivers()
    channel, _ = webhook(project, receiver.url)
    rule(project, channel, kind="issue", name="issues")
    calls = [{"tool": "web_search", "args": {"q": "same"}, "result": {"results": []}}]
    with eager():
        for _ in range(8):
            live.append_steps(project, "session-issue", calls)
    [issue] = LoopIssue.objects.filter(project=project)
    [request] = receiver.requests
    assert request["json"]["event"] == "new" and request["json"]["issue"]["id"] == issue.pk
    with eager():
        live.end_run(project, "session-issue")  # analyzed: the same issue, not new again
    assert LoopIssue.objects.filter(project=project).count() == 1
    assert len(receiver.requests) == 1


def test_beat_queues_a_task_per_rate_rule_and_each_fires_on_its_own(
    project, other_project, eager, receivers
):
    mine, theirs = receivers(), receivers()
    now = timezone.now()
    for target, receiver in ((project, mine), (other_project, theirs)):
        channel, _ = webhook(target, receiver.url)
        rule(target, channel, kind="rate", name="share", metric="flagged_share",
             window_minutes=60, warn_threshold=0.3, alert_threshold=0.6)  # fmt: skip
    rule(project, kind="rate", name="off", metric="flagged_share", warn_threshold=0.1,
         enabled=False)  # fmt: skip
    make_runs(project, now, ok=6, stop=4)  # 0.4: warn
    make_runs(other_project, now, ok=2, stop=8)  # 0.8: alert
    with eager():
        assert alerts.queue_rate_rules(now) == 2  # the disabled rule is not queued
    assert [r["json"]["rate"]["level"] for r in mine.requests] == ["warn"]
    assert [r["json"]["rate"]["level"] for r in theirs.requests] == ["alert"]
    with eager():  # the same minute again (a second beat): nothing fires twice
        alerts.queue_rate_rules(now)
    assert len(mine.requests) == len(theirs.requests) == 1


SEPARATORS = "\r\n\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"


def test_an_email_alert_whose_run_name_holds_line_separators_is_sent_on_one_line(
    project, process, eager
):
    channel, _ = channels.create_channel(
        project, channels.ChannelData(name="oncall", kind="email", recipients=["a@example.com"])
    )
    rule(project, channel)
    name = "".join(f"x{sep}" for sep in SEPARATORS) + "end.jsonl"
    with eager():
        process(project, looping_trace(8), name=name)
    [email] = mail.outbox
    assert email.subject.startswith("[loopboard] Run “x x")
    assert not any(sep in email.subject for sep in SEPARATORS)
    assert len(email.message().get("Subject").splitlines()) <= 2  # one header, maybe folded
    assert Delivery.objects.get().status == "sent"


def test_every_send_failure_goes_into_the_delivery_log(project, process, eager, caplog):
    """An email channel whose recipients were edited in the database to hold a header line:
    the mail library raises inside the send; the attempt still gets its row, is retried and
    given up, and the failure is logged."""
    channel, _ = channels.create_channel(
        project, channels.ChannelData(name="oncall", kind="email", recipients=["a@example.com"])
    )
    Channel.objects.filter(pk=channel.pk).update(recipients=["a@example.com\nBcc: b@example.com"])
    rule(project, channel)
    with eager():
        process(project, looping_trace(8))
    assert mail.outbox == []
    rows = list(Delivery.objects.order_by("attempt"))
    assert [row.attempt for row in rows] == list(range(1, len(rows) + 1)) and len(rows) > 1
    assert {row.status for row in rows[:-1]} == {"retrying"} and rows[-1].status == "gave_up"
    assert all(row.error.startswith("ValueError: Header values") for row in rows)
    assert "could not be sent" in caplog.text
    test_row = delivery.send_test(Channel.objects.get(pk=channel.pk))
    assert test_row.status == "failed" and test_row.error.startswith("ValueError: Header values")
