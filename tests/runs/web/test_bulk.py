"""Acting on many runs from the runs list: compare two, re-analyze, label and delete, each
allowed by the same rule as its one-run form, all or nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.models import Finding, Label, LoopIssue, Membership, Run
from tests.helpers import healthy_trace, looping_trace

pytestmark = pytest.mark.django_db

BULK = reverse("runs:bulk")


@pytest.fixture
def runs(project, process):
    """Two stuck runs and a healthy one in alice's project (alice owns it)."""
    made = [
        process(project, looping_trace(6), name="stuck-a.jsonl").runs.get(),
        process(project, looping_trace(7, tool="read_file"), name="stuck-b.jsonl").runs.get(),
        process(project, healthy_trace(), name="fine.jsonl").runs.get(),
    ]
    return made


def post(client, action: str, runs, **extra):
    data = {"action": action, "run": [str(run.pk) for run in runs], **extra}
    return client.post(BULK, data, follow=True)


def notices(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_the_runs_list_has_a_check_box_per_run_and_the_actions(client_in, runs):
    html = client_in.get(reverse("runs:list")).content.decode()
    assert f'action="{BULK}"' in html
    for run in runs:
        assert f'name="run" value="{run.pk}" form="bulk-form"' in html
    for action in ("compare", "label-real", "label-false", "reanalyze", "delete"):
        assert f'<option value="{action}">' in html
    assert '<option value="polling">polling</option>' in html  # the false-alarm reasons


def test_compare_two_selected_runs_opens_their_compare_page(client_in, runs):
    response = client_in.post(BULK, {"action": "compare", "run": [runs[1].pk, runs[0].pk]})
    assert response.status_code == 302
    assert response["Location"] == reverse("runs:compare", args=[runs[0].pk, runs[1].pk])


@pytest.mark.parametrize("count", [1, 3])
def test_compare_needs_exactly_two_runs(client_in, runs, count):
    response = post(client_in, "compare", runs[:count])
    assert notices(response) == ["Select exactly two runs to compare them."]
    assert response.redirect_chain[-1][0] == reverse("runs:list")


def test_label_real_labels_every_warn_or_stop_finding_of_the_selection(client_in, user, runs):
    response = post(client_in, "label-real", runs)
    flagged = Finding.objects.filter(run__in=runs, severity__in=["warn", "stop"])
    assert flagged.count() >= 2
    assert notices(response) == [f"{flagged.count()} findings labeled “real loop”."]
    assert set(Label.objects.values_list("finding_id", "verdict", "user_id")) == {
        (finding.pk, "real", user.pk) for finding in flagged
    }


def test_label_false_without_a_reason_writes_nothing_and_says_why(client_in, runs):
    response = post(client_in, "label-false", runs)
    assert notices(response) == ["Say why it is a false alarm: polling, paging, batch work, …"]
    assert not Label.objects.exists()
    response = post(client_in, "label-false", runs, reason="polling")
    assert Label.objects.filter(verdict="false", reason="polling").count() == (
        Finding.objects.filter(run__in=runs, severity__in=["warn", "stop"]).count()
    )


def test_a_healthy_selection_has_nothing_to_label(client_in, runs):
    response = post(client_in, "label-real", runs[2:])
    assert notices(response) == ["The selected runs have no warn or stop findings to label."]


def test_deleting_asks_first_on_a_page_that_lists_the_runs(client_in, runs):
    back = reverse("runs:list") + "?verdict=stop"
    response = post(client_in, "delete", runs[:2], next=back)
    assert response.status_code == 200 and Run.objects.count() == 3  # nothing deleted yet
    html = response.content.decode()
    assert "<h1>Delete 2 runs?</h1>" in html and "cannot be undone" in html
    assert "stuck-a.jsonl" in html and "stuck-b.jsonl" in html and "fine.jsonl" not in html
    assert '<input type="hidden" name="confirmed" value="yes">' in html
    for run in runs[:2]:
        assert f'<input type="hidden" name="run" value="{run.pk}">' in html
    assert f'href="{back}"' in html  # Cancel goes back to the filtered list


def test_an_owner_deletes_the_selected_runs_and_their_issues_forget_them(client_in, runs):
    issue = LoopIssue.objects.filter(project=runs[0].project).order_by("pk").first()
    assert issue is not None
    response = post(client_in, "delete", runs[:2], confirmed="yes")
    assert notices(response) == ["2 runs deleted."]
    assert list(Run.objects.values_list("pk", flat=True)) == [runs[2].pk]
    assert not LoopIssue.objects.filter(pk=issue.pk, run_count__gt=0).exists()


def test_a_member_may_label_but_not_delete_or_reanalyze(client_in, user, runs):
    Membership.objects.filter(user=user).update(role=Membership.Role.MEMBER)
    for action in ("delete", "reanalyze"):
        response = post(client_in, action, runs)
        assert notices(response) == ["You may not do this in Agents; nothing was done."]
    assert Run.objects.count() == 3
    assert notices(post(client_in, "label-real", runs[:1]))[0].endswith("labeled “real loop”.")


def test_reanalyze_is_for_staff_and_queues_every_selected_run(client_in, user, runs, eager):
    user.is_staff = True
    user.save()
    Run.objects.update(verdict="pending")
    with eager():
        response = post(client_in, "reanalyze", runs[:2])
    assert notices(response) == ["2 runs queued for analysis."]
    # The tasks ran inline: both selected runs were analyzed again, and only they.
    verdicts = dict(Run.objects.values_list("pk", "verdict"))
    assert verdicts[runs[0].pk] == "stop" and verdicts[runs[1].pk] == "stop"
    assert verdicts[runs[2].pk] == "pending"


def test_a_run_of_another_project_refuses_the_whole_selection(
    client_in, runs, other_project, process
):
    theirs = process(other_project, looping_trace(6), name="secret.jsonl").runs.get()
    response = post(client_in, "delete", [runs[0], theirs])
    assert notices(response) == ["Some of the selected runs no longer exist; nothing was done."]
    assert Run.objects.count() == 4
    assert "secret" not in response.content.decode()


def test_bad_posts_get_clear_notices_and_go_back_to_the_filtered_list(client_in, runs):
    back = reverse("runs:list") + "?verdict=stop"
    response = client_in.post(BULK, {"action": "explode", "next": back}, follow=True)
    assert notices(response) == ["Choose what to do with the selected runs."]
    assert response.redirect_chain[-1][0] == back
    response = client_in.post(BULK, {"action": "delete", "run": ["x", "-1"]}, follow=True)
    assert notices(response) == ["Select at least one run first."]
    response = client_in.post(
        BULK,
        {"action": "compare", "run": [str(runs[0].pk)], "next": "https://evil.example/"},
        follow=True,
    )
    assert response.redirect_chain == [(reverse("runs:list"), 302)]  # no open redirect
    too_many = [str(i) for i in range(1, 502)]
    response = client_in.post(BULK, {"action": "label-real", "run": too_many}, follow=True)
    assert notices(response) == ["Select at most 500 runs at once."]
    assert Run.objects.count() == 3


def test_bulk_needs_a_login_and_a_post(client, runs):
    assert client.get(BULK).status_code in (302, 405)
    response = client.post(BULK, {"action": "delete", "run": [runs[0].pk]})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert Run.objects.count() == 3
