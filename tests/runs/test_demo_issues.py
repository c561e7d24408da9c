"""The demo shows issue states: seed_demo leaves one loop resolved and one regressed."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from runs.models import LoopIssue, Project, Run

pytestmark = pytest.mark.django_db


def seed(**options) -> Project:
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO(), **options)
    return Project.objects.get(slug="demo")


def test_seed_demo_leaves_the_support_loop_resolved_and_the_triage_loop_regressed(settings, client):
    settings.EMBEDDED = True
    demo = seed(user=True)
    user = get_user_model().objects.get(username="demo")
    kb = LoopIssue.objects.get(project=demo, tool="kb_search")
    tickets = LoopIssue.objects.get(project=demo, tool="fetch_ticket")
    assert (kb.state, kb.resolved_in_version, kb.state_changed_by) == ("resolved", "1.1", user)
    assert kb.versions == ["1.0"]  # 1.1 does not loop: it stays resolved
    # Resolved in 2.1 by the demo user, then the 2.2 runs came back: the grouping says so.
    assert (tickets.state, tickets.resolved_in_version) == ("regressed", "2.1")
    assert tickets.state_changed_by is None
    assert sorted(tickets.versions) == ["2.0", "2.2"] and tickets.run_count == 4
    assert not Run.objects.filter(project=demo, trace__agent_version__gt="",
                                  analyzed_at__isnull=True).exists()  # fmt: skip

    client.force_login(user)
    page = client.get(reverse("runs:issues")).content.decode()
    assert page.count("badge--resolved") == 1 and page.count("badge--regressed") == 1
    for state, issue in (("resolved", kb), ("regressed", tickets)):
        listed = client.get(reverse("runs:issues"), {"state": state}).content.decode()
        assert issue.get_absolute_url() in listed


def test_seeding_twice_changes_nothing_and_keeps_what_a_person_decided(settings):
    settings.EMBEDDED = False  # no demo login: the states are set by nobody
    demo = seed()
    kb = LoopIssue.objects.get(project=demo, tool="kb_search")
    assert kb.state == "resolved" and kb.state_changed_by is None
    before = {
        issue.pk: (issue.state, issue.state_changed_at, issue.run_count, issue.finding_count)
        for issue in LoopIssue.objects.filter(project=demo)
    }
    seed()
    assert {
        issue.pk: (issue.state, issue.state_changed_at, issue.run_count, issue.finding_count)
        for issue in LoopIssue.objects.filter(project=demo)
    } == before
    LoopIssue.objects.filter(pk=kb.pk).update(state="open")  # someone reopened it
    seed()
    kb.refresh_from_db()
    assert kb.state == "open"
