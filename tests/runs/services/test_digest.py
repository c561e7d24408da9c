"""The daily digest: its contents on generated runs, the project's time zone, once a day
whatever the beats, and delivery to a real local webhook receiver, Slack and email."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core import mail
from django.db import connection

from runs.models import Alert, AlertRule, LoopIssue, Project, Run
from runs.services import channels, digest, issues
from tests.helpers import healthy_trace, looping_trace

DAY = date(2026, 11, 30)
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def digest_rule(project, *chans, hour: int = 9, **fields) -> AlertRule:
    rule = AlertRule.objects.create(
        project=project, name="daily", kind=AlertRule.Kind.DIGEST, hour=hour, **fields
    )
    rule.channels.set(chans)
    return rule


def on_day(project, when: datetime = NOON) -> None:
    """Move the project's runs, and the loop issues first seen with them, to `when`."""
    Run.objects.filter(project=project).update(created_at=when)
    LoopIssue.objects.filter(project=project).update(created_at=when)


@pytest.mark.django_db
def test_the_digest_counts_the_days_runs_and_lists_issues_and_top_waste(
    project, other_project, process
):
    process(project, looping_trace(6), name="short-loop.jsonl")
    process(project, looping_trace(12, tool="fetch_url"), name="long-loop.jsonl")
    process(project, healthy_trace(), name="fine.jsonl")
    on_day(project)
    # An older issue, resolved, that comes back today: regressed.
    process(project, looping_trace(7, tool="read_file"), name="old.jsonl")
    old = LoopIssue.objects.get(project=project, tool="read_file")
    LoopIssue.objects.filter(pk=old.pk).update(created_at=NOON - timedelta(days=5))
    Run.objects.filter(name="old.jsonl").update(created_at=NOON - timedelta(days=5))
    issues.set_state(old, "resolved")
    process(project, looping_trace(8, tool="read_file"), name="back.jsonl")
    old.refresh_from_db()
    assert old.state == LoopIssue.State.REGRESSED
    Run.objects.filter(name="back.jsonl").update(created_at=NOON + timedelta(hours=1))
    LoopIssue.objects.filter(pk=old.pk).update(state_changed_at=NOON + timedelta(hours=1))
    # Neither the day before nor another project counts.
    process(project, looping_trace(20), name="yesterday.jsonl")
    Run.objects.filter(name="yesterday.jsonl").update(created_at=NOON - timedelta(days=1))
    process(other_project, looping_trace(30, tool="secret_tool"), name="theirs.jsonl")
    Run.objects.filter(project=other_project).update(created_at=NOON)

    payload = digest.build(project, DAY)

    day_runs = Run.objects.filter(project=project, created_at__date=DAY)
    assert day_runs.count() == 4
    assert payload["kind"] == "digest" and payload["day"] == "2026-11-30"
    assert payload["runs"] == {
        "total": 4,
        "flagged": 3,
        "warn": day_runs.filter(verdict="warn").count(),
        "stop": day_runs.filter(verdict="stop").count(),
    }
    assert payload["waste"]["steps"] == sum(r.waste_steps for r in day_runs) > 0
    names = [r["name"] for r in payload["top_runs"]]
    assert names == [r.name for r in day_runs.filter(waste_steps__gt=0).order_by("-waste_steps")]
    assert names[0] == "long-loop.jsonl" and "yesterday.jsonl" not in names
    wastes = [r["waste"]["steps"] for r in payload["top_runs"]]
    assert wastes == sorted(wastes, reverse=True)
    assert payload["top_runs"][0]["url"] == (
        f"http://127.0.0.1:8000/runs/{day_runs.get(name='long-loop.jsonl').pk}/"
    )
    assert payload["top_runs"][0]["finding"]  # the first finding's own words

    new_titles = {i.title for i in LoopIssue.objects.filter(project=project).exclude(pk=old.pk)}
    assert {i["title"] for i in payload["new_issues"]} == new_titles and new_titles
    assert payload["new_issue_count"] == len(new_titles)
    assert [i["id"] for i in payload["regressed_issues"]] == [old.pk]
    assert payload["regressed_issue_count"] == 1
    assert payload["regressed_issues"][0]["url"] == f"http://127.0.0.1:8000/issues/{old.pk}/"
    top_issue_ids = [i["id"] for i in payload["top_issues"]]
    assert top_issue_ids and "secret_tool" not in str(payload)
    steps = [i["day_waste_steps"] for i in payload["top_issues"]]
    assert steps == sorted(steps, reverse=True)
    assert payload["text"] == (
        f"4 runs, 3 flagged ({payload['runs']['stop']} stop). "
        f"{len(new_titles)} new loop issues, 1 regressed."
    )
    headings = [s["heading"] for s in payload["sections"]]
    assert headings == [
        "New loop issues",
        "Regressed loop issues",
        "Runs that wasted most",
        "Issues that wasted most",
    ]


@pytest.mark.django_db
def test_a_quiet_day_still_has_a_digest_without_empty_sections(project):
    payload = digest.build(project, DAY)
    assert payload["runs"]["total"] == 0 and payload["sections"] == []
    assert payload["text"] == "0 runs, 0 flagged (0 stop). 0 new loop issues, 0 regressed."


@pytest.mark.django_db
def test_the_digest_hour_is_the_projects_local_hour(project, other_project):
    project.timezone = "America/New_York"  # UTC-5 in December
    project.save()
    other_project.timezone = "Asia/Tokyo"  # UTC+9
    other_project.save()
    new_york = digest_rule(project, hour=9)
    tokyo = digest_rule(other_project, hour=9)

    # 18:59 in New York (past 9: the day before goes out), 08:59 in Tokyo (not yet).
    [alert] = digest.send_due_digests(datetime(2026, 12, 1, 23, 59, tzinfo=UTC))
    assert (alert.rule, alert.key) == (new_york, "digest:2026-11-30")
    [alert] = digest.send_due_digests(datetime(2026, 12, 2, 0, 0, tzinfo=UTC))  # 09:00 Tokyo
    assert (alert.rule, alert.key, alert.payload["day"]) == (
        tokyo,
        "digest:2026-12-01",
        "2026-12-01",
    )
    assert alert.payload["timezone"] == "Asia/Tokyo"
    assert alert.payload["window"]["start"] == "2026-12-01T00:00:00+09:00"

    assert digest.send_due_digests(datetime(2026, 12, 2, 13, 59, tzinfo=UTC)) == []
    [alert] = digest.send_due_digests(datetime(2026, 12, 2, 14, 0, tzinfo=UTC))  # 09:00 NY
    assert (alert.rule, alert.key) == (new_york, "digest:2026-12-01")
    assert alert.payload["window"] == {
        "start": "2026-12-01T00:00:00-05:00",
        "end": "2026-12-02T00:00:00-05:00",
    }


@pytest.mark.django_db
def test_the_digest_counts_the_runs_of_the_local_day(project, process):
    project.timezone = "America/New_York"
    project.save()
    process(project, looping_trace(6), name="late-evening.jsonl")
    process(project, healthy_trace(), name="after-midnight.jsonl")
    # 23:30 on 30 November in New York is 04:30 UTC on 1 December.
    Run.objects.filter(name="late-evening.jsonl").update(
        created_at=datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    )
    Run.objects.filter(name="after-midnight.jsonl").update(
        created_at=datetime(2026, 12, 1, 5, 30, tzinfo=UTC)
    )
    assert [r["name"] for r in digest.build(project, DAY)["top_runs"]] == ["late-evening.jsonl"]
    assert digest.build(project, DAY)["runs"]["total"] == 1
    assert digest.build(project, date(2026, 12, 1))["runs"]["total"] == 1


@pytest.mark.django_db
def test_a_digest_is_sent_once_per_day_whatever_the_calls(project):
    rule = digest_rule(project, hour=9)
    disabled = digest_rule(project, hour=9, enabled=False)
    for hour in (9, 9, 12, 23):
        digest.send_due_digests(datetime(2026, 12, 2, hour, 30, tzinfo=UTC))
    digest.send_due_digests(datetime(2026, 12, 3, 8, 59, tzinfo=UTC))  # before the hour
    assert list(rule.alerts.values_list("key", flat=True)) == ["digest:2026-12-01"]
    digest.send_due_digests(datetime(2026, 12, 3, 9, 0, tzinfo=UTC))
    assert sorted(rule.alerts.values_list("key", flat=True)) == [
        "digest:2026-12-01",
        "digest:2026-12-02",
    ]
    assert not disabled.alerts.exists()


@pytest.mark.django_db(transaction=True)
def test_two_beats_at_the_same_minute_send_one_digest():
    project = Project.objects.create(name="Racing", slug="racing")
    rule = digest_rule(project, hour=9)
    now = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    start = threading.Barrier(4)
    made: list[list[Alert]] = []

    def beat() -> None:
        try:
            start.wait()
            made.append(digest.send_due_digests(now))
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(len(alerts) for alerts in made) == [0, 0, 0, 1]
    assert rule.alerts.count() == 1


@pytest.mark.django_db
def test_the_digest_reaches_a_webhook_receiver_slack_and_email(
    project,
    process,
    eager,
    receivers,
):
    hook_receiver, slack_receiver = receivers(), receivers()
    hook, secret = channels.create_channel(
        project, channels.ChannelData(name="hook", kind="webhook", url=hook_receiver.url)
    )
    hook_receiver.secret = secret
    slack, _ = channels.create_channel(
        project, channels.ChannelData(name="slack", kind="slack", url=slack_receiver.url)
    )
    email, _ = channels.create_channel(
        project, channels.ChannelData(name="mail", kind="email", recipients=["oncall@example.com"])
    )
    digest_rule(project, hook, slack, email, hour=9)
    process(project, looping_trace(9), name="loop <b>.jsonl")
    process(project, healthy_trace(), name="fine.jsonl")
    on_day(project)

    with eager():
        [alert] = digest.send_due_digests(datetime(2026, 12, 1, 9, 5, tzinfo=UTC))

    [request] = hook_receiver.requests
    assert request["verified"]
    body = request["json"]
    assert body["kind"] == "digest" and body["day"] == "2026-11-30"
    assert body["runs"]["total"] == 2 and body["runs"]["flagged"] == 1
    assert body["idempotency_key"] == request["headers"]["Idempotency-Key"]
    assert body["top_runs"][0]["name"] == "loop <b>.jsonl"

    [posted] = slack_receiver.requests
    blocks = posted["json"]["blocks"]
    assert blocks[0]["text"]["text"] == "Daily digest for Agents, Monday 30 November 2026"
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    runs_section = next(t for t in texts if t.startswith("*Runs that wasted most*"))
    assert "loop &lt;b&gt;.jsonl" in runs_section  # trace content escaped for mrkdwn
    assert blocks[-2]["elements"][0]["url"] == alert.payload["url"]

    [message] = mail.outbox
    assert message.subject == "[loopboard] Daily digest for Agents, Monday 30 November 2026"
    assert message.to == ["oncall@example.com"]
    assert "2 runs, 1 flagged" in message.body
    assert "Runs that wasted most" in message.body and "loop <b>.jsonl" in message.body
    assert "http://127.0.0.1:8000/?project=agents&since=2026-11-30&until=2026-11-30" in (
        message.body
    )
