"""Labeling findings on the run page: the buttons, htmx and plain posts, members only, 404
across projects, and labels shown again after re-analysis."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from runs.models import Label
from runs.services import analysis
from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


@pytest.fixture
def stuck(project, process):
    return process(project, looping_trace(6), name="stuck.jsonl").runs.get()


@pytest.fixture
def theirs(other_project, process):
    """A stuck run of a project alice is not a member of."""
    return process(other_project, looping_trace(6), name="secret.jsonl").runs.get()


def alarm(run):
    return run.findings.exclude(severity="info").order_by("fired_at", "pk").first()


def label_url(run, finding) -> str:
    return reverse("runs:label_finding", args=[run.pk, finding.pk])


def test_each_finding_has_real_loop_and_false_alarm_forms(client_in, stuck):
    html = client_in.get(reverse("runs:detail", args=[stuck.pk])).content.decode()
    for finding in stuck.findings.all():
        assert f'id="label-{finding.pk}"' in html
        assert html.count(f'action="{label_url(stuck, finding)}"') == 3  # real, reasons, other
    assert 'name="verdict" value="real"' in html and "False alarm…" in html
    for reason in ("Polling", "Paging", "Batch work", "Edit and re-check", "Other"):
        assert f">{reason}</button>" in html
    assert "js/labels.js" in html


def test_an_htmx_post_labels_a_real_loop_and_returns_the_box(client_in, user, stuck):
    finding = alarm(stuck)
    response = client_in.post(label_url(stuck, finding), {"verdict": "real"}, headers=HX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith(f'<div class="label-box" id="label-{finding.pk}">')
    assert "Real loop" in html and "alice" in html and 'aria-pressed="true"' in html
    label = Label.objects.get()
    assert (label.finding, label.user, label.verdict) == (finding, user, "real")


def test_a_plain_post_labels_a_false_alarm_and_goes_back_to_the_finding(client_in, stuck):
    finding = alarm(stuck)
    response = client_in.post(label_url(stuck, finding), {"verdict": "false", "reason": "paging"})
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{stuck.pk}/?focus={finding.pk}#finding-{finding.pk}"
    html = client_in.get(response["Location"]).content.decode()
    assert "False alarm: paging" in html
    assert Label.objects.get().reason == "paging"


def test_other_without_words_is_refused_and_nothing_is_stored(client_in, stuck):
    finding = alarm(stuck)
    data = {"verdict": "false", "reason": "other", "text": " "}
    response = client_in.post(label_url(stuck, finding), data, headers=HX)
    assert response.status_code == 400
    assert "in a few words" in response.content.decode()
    assert client_in.post(label_url(stuck, finding), data).status_code == 400
    assert not Label.objects.exists()


def test_label_text_is_escaped(client_in, stuck):
    finding = alarm(stuck)
    data = {"verdict": "false", "reason": "other", "text": "<script>alert(1)</script>"}
    html = client_in.post(label_url(stuck, finding), data, headers=HX).content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_another_projects_finding_is_404_and_not_labeled(client_in, stuck, theirs):
    theirs_finding = alarm(theirs)
    assert client_in.post(label_url(theirs, theirs_finding), {"verdict": "real"}).status_code == 404
    # nor through one of alice's runs in the URL
    url = reverse("runs:label_finding", args=[stuck.pk, theirs_finding.pk])
    assert client_in.post(url, {"verdict": "real"}, headers=HX).status_code == 404
    assert not Label.objects.exists()


def test_a_non_member_gets_404(client, stuck):
    from django.contrib.auth import get_user_model

    outsider = get_user_model().objects.create_user("oscar", password="pw-oscar-123")
    client.force_login(outsider)
    assert client.post(label_url(stuck, alarm(stuck)), {"verdict": "real"}).status_code == 404
    assert not Label.objects.exists()


def test_anonymous_posts_go_to_login(client, stuck):
    response = client.post(label_url(stuck, alarm(stuck)), {"verdict": "real"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not Label.objects.exists()


def test_labeling_takes_only_posts(client_in, stuck):
    assert client_in.get(label_url(stuck, alarm(stuck))).status_code == 405


def test_the_label_is_shown_again_after_re_analysis(client_in, stuck):
    finding = alarm(stuck)
    client_in.post(label_url(stuck, finding), {"verdict": "false", "reason": "polling"})
    analysis.analyze_run(stuck.pk)
    again = alarm(stuck)
    assert again.pk != finding.pk
    html = client_in.get(reverse("runs:detail", args=[stuck.pk])).content.decode()
    box = html.split(f'id="label-{again.pk}"', 1)[1].split("</p>", 1)[0]
    assert "False alarm: polling" in box


def test_the_admin_lists_labels_of_the_staff_members_projects_only(client, user, stuck, theirs):
    from django.contrib.auth import get_user_model

    from runs.models import Membership
    from runs.services import labels

    mine = labels.label_finding(user, alarm(stuck), "false", "other", "a health probe")
    labels.label_finding(None, alarm(theirs), "false", "other", "their secret words")
    staff = get_user_model().objects.create_user("sam", password="pw-sam-12345", is_staff=True)
    Membership.objects.create(project=stuck.project, user=staff)
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="_label"))
    client.force_login(staff)
    html = client.get("/admin/runs/label/").content.decode()
    assert "stuck.jsonl" in html and "secret.jsonl" not in html
    assert client.get(f"/admin/runs/label/{mine.pk}/change/").status_code == 200
    assert client.get("/admin/runs/label/add/").status_code == 403


def test_an_issue_is_labeled_as_a_whole_and_another_projects_is_404(
    client_in, project, process, stuck, theirs
):
    from runs.models import LoopIssue

    again = process(project, looping_trace(6) + b"\n", name="again.jsonl").runs.get()
    issue = LoopIssue.objects.get(findings=alarm(stuck))
    assert issue.findings.filter(run=again).exists()
    url = reverse("runs:label_issue", args=[issue.pk])
    page = client_in.get(reverse("runs:issue", args=[issue.pk])).content.decode()
    assert f'id="label-issue-{issue.pk}"' in page and f'action="{url}"' in page
    response = client_in.post(url, {"verdict": "false", "reason": "batch"}, headers=HX)
    assert response.status_code == 200
    count = issue.findings.count()
    assert f"Labeled {count} findings." in response.content.decode()
    assert Label.objects.filter(reason="batch").count() == count >= 2
    assert client_in.post(url, {"verdict": "real"}).status_code == 302  # back to the issue
    refused = client_in.post(url, {"verdict": "false"}, headers=HX)
    assert refused.status_code == 400 and "why it is a false alarm" in refused.content.decode()
    their_issue = LoopIssue.objects.get(findings=alarm(theirs))
    their_url = reverse("runs:label_issue", args=[their_issue.pk])
    assert client_in.post(their_url, {"verdict": "real"}).status_code == 404
    assert not Label.objects.filter(run=theirs).exists()


def test_label_forms_swap_their_own_box(client_in, stuck):
    html = client_in.get(reverse("runs:detail", args=[stuck.pk])).content.decode()
    assert html.count('hx-target="closest .label-box"') == 3 * stuck.findings.count()
