"""Labels: scoring on a hand-made labeled set, labels that outlive re-analysis, the latest
judgement per finding, the export, and labeling a loop issue as a whole."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

import detection
from runs.models import Finding, Label, LoopIssue
from runs.services import analysis, labels, policy
from runs.services.scoring import Judged, Score, score
from tests.helpers import call, healthy_trace, hold_and_race, looping_trace, message, native_jsonl


def finding(detector: str, tool: str | None, seqs: tuple[int, ...], severity: str = "warn"):
    return detection.Finding(
        detector, severity, tool, "sig", seqs, len(seqs), 3, seqs[0] if seqs else 0, "m", "r"
    )


def judged(run: str, detector: str, tool: str, first: int | None, last: int | None, real: bool):
    return Judged(run, detector, tool, first, last, real)


# ---- scoring: pure, a hand-made labeled set with known precision and recall ---------------


def test_score_on_a_hand_made_labeled_set():
    findings = [
        ("a", finding("repeat", "web_search", (3, 4, 5, 6))),  # matches real label 1: tp
        ("a", finding("oscillation", "read", (10, 12, 14), "stop")),  # real label 2: tp
        ("b", finding("repeat", "bash", (0, 1, 2))),  # real label 3: tp
        ("b", finding("repeat", "poll", (20, 21, 22))),  # false-alarm label: fp
        ("c", finding("repeat", "web_search", (1, 2, 3))),  # unlabeled: does not count
        ("a", finding("repeat", "fetch", (30, 31), "info")),  # info: never a match
        ("d", finding("budget", None, ())),  # run-wide, matches real label 5 wherever it sits
    ]
    labeled = [
        judged("a", "repeat", "web_search", 5, 9, True),  # overlaps 3..6
        judged("a", "oscillation", "read", 14, 14, True),  # touches the last step
        judged("b", "repeat", "bash", 2, 2, True),
        judged("b", "repeat", "poll", 21, 30, False),  # fp
        judged("a", "repeat", "fetch", 30, 31, True),  # only an info finding there: fn
        judged("d", "budget", "", 250, 250, True),  # tp: a run-wide finding spans every step
        judged("a", "repeat", "web_search", 40, 50, True),  # no overlap: fn
        judged("b", "repeat", "bash", 0, 2, False),  # a false alarm still raised: fp
        judged("c", "repeat", "other_tool", 1, 3, False),  # another tool: cleared, tn
        judged("e", "repeat", "web_search", 1, 3, True),  # a run without findings: fn
    ]
    result = score(findings, labeled)
    assert (result.tp, result.fp, result.fn, result.tn) == (4, 2, 3, 1)
    assert result.precision == pytest.approx(4 / 6)
    assert result.recall == pytest.approx(4 / 7)
    assert result.labels == 10
    assert result.to_dict()["precision"] == result.precision


def test_score_counts_a_label_once_however_many_findings_match_it():
    findings = [("a", finding("repeat", "t", (1, 2))), ("a", finding("repeat", "t", (2, 3)))]
    assert score(findings, [judged("a", "repeat", "t", 2, 2, True)]) == Score(tp=1)


def test_score_without_labels_has_no_precision_or_recall():
    result = score([("a", finding("repeat", "t", (1, 2)))], [])
    assert result == Score() and result.precision is None and result.recall is None
    assert Score.of(1, 1, 0).precision == 0.5


def test_an_exported_row_reads_back_keyed_by_external_id():
    row = {"external_id": "run-7", "detector": "repeat", "tool": "t", "seqs": [4, 9]}
    assert Judged.from_export(row | {"verdict": "real"}) == judged(
        "run-7", "repeat", "t", 4, 9, True
    )
    whole = Judged.from_export(row | {"seqs": None, "verdict": "false"})
    assert whole.first is None and not whole.real


# ---- labels in the database ----------------------------------------------------------------


@pytest.fixture
def stuck(project, process):
    """A run stuck on one web_search call, analyzed, with its warn/stop findings."""
    run = process(project, looping_trace(6), name="stuck.jsonl").runs.get()
    assert run.findings.exclude(severity="info").exists()
    return run


def first_alarm(run) -> Finding:
    return run.findings.exclude(severity="info").order_by("fired_at", "pk").first()


pytestmark = pytest.mark.django_db


def test_a_label_keeps_who_when_the_policy_version_and_the_findings_identity(user, stuck):
    change = policy.save_policy(stuck.project, {"defaults": {"warn": 3, "stop": 5}}, user)
    target = first_alarm(stuck)
    label = labels.label_finding(user, target, "false", "polling")
    label.refresh_from_db()
    assert (label.user, label.project, label.run, label.finding) == (
        user,
        stuck.project,
        stuck,
        target,
    )
    assert label.policy_version == change.pk == policy.current_version(stuck.project)
    assert (label.detector, label.tool, label.signature) == (
        target.detector,
        target.tool,
        target.signature,
    )
    assert (label.seq_first, label.seq_last) == (min(target.seqs), max(target.seqs))
    assert label.verdict == "false" and label.reason == "polling" and label.text == ""
    assert timezone.now() - label.created_at < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("verdict", "reason", "text", "message"),
    [
        ("maybe", "", "", "real loop or a false alarm"),
        ("false", "", "", "why it is a false alarm"),
        ("false", "tired", "", "why it is a false alarm"),
        ("false", "other", "   ", "in a few words"),
    ],
)
def test_a_label_needs_a_verdict_and_a_false_alarm_a_reason(
    user, stuck, verdict, reason, text, message
):
    with pytest.raises(labels.LabelInvalid, match=message):
        labels.label_finding(user, first_alarm(stuck), verdict, reason, text)
    assert not Label.objects.exists()


def test_other_keeps_its_words_and_a_real_loop_drops_any_reason(user, stuck):
    other = labels.label_finding(user, first_alarm(stuck), "false", "other", "  waits  for CI ")
    assert (other.reason, other.text) == ("other", "waits for CI")
    real = labels.label_finding(user, first_alarm(stuck), "real", "polling", "x")
    assert (real.reason, real.text) == ("", "")


def test_a_label_survives_re_analysis_and_finds_its_finding_again(user, stuck):
    target = first_alarm(stuck)
    label = labels.label_finding(user, target, "real")
    analysis.analyze_run(stuck.pk)  # deletes and rewrites the run's findings, then reattaches
    assert not Finding.objects.filter(pk=target.pk).exists()
    again = first_alarm(stuck)
    assert again.pk != target.pk
    label.refresh_from_db()
    assert label.finding == again  # analysis.write pointed it at the new row
    assert labels.for_findings(stuck, [again]) == {again.pk: label}
    assert labels.reattach([stuck.pk]) == 0  # nothing left to reattach


def test_a_label_whose_finding_row_goes_is_kept_and_reattached(user, stuck):
    target = first_alarm(stuck)
    label = labels.label_finding(user, target, "real")
    Finding.objects.filter(run=stuck).delete()  # as a re-analysis does, before it rewrites
    label.refresh_from_db()
    assert label.finding_id is None  # PostgreSQL set it NULL; the label stays
    analysis.analyze_run(stuck.pk)
    label.refresh_from_db()
    assert label.finding == first_alarm(stuck)


def test_the_latest_label_per_finding_counts_and_the_history_stays(user, stuck):
    bob = get_user_model().objects.create_user("bob", password="pw-bob-12345")
    target = first_alarm(stuck)
    labels.label_finding(user, target, "real")
    later = labels.label_finding(bob, target, "false", "batch")
    assert Label.objects.filter(run=stuck).count() == 2
    assert list(labels.current(Label.objects.filter(run=stuck))) == [later]
    assert labels.for_findings(stuck, [target])[target.pk] == later
    assert labels.labels_for_runs([stuck.pk]) == {stuck.pk: [Judged.of(later)]}


def test_findings_nobody_labeled_have_no_label(user, project, process, stuck):
    fine = process(project, healthy_trace(), name="fine.jsonl").runs.get()
    labels.label_finding(user, first_alarm(stuck), "real")
    other = process(project, looping_trace(6, tool="fetch"), name="other.jsonl").runs.get()
    assert labels.for_findings(other, list(other.findings.all())) == {}
    assert labels.for_findings(fine, []) == {}


def test_score_of_stored_findings_against_stored_labels(user, project, process, stuck):
    missed = process(project, looping_trace(6, tool="fetch"), name="missed.jsonl").runs.get()
    labels.label_finding(user, first_alarm(stuck), "real")
    labels.label_finding(user, first_alarm(missed), "false", "paging")
    judged_runs = labels.labels_for_runs([stuck.pk, missed.pk])
    stored = Finding.objects.filter(run__in=[stuck, missed])
    result = labels.score(stored, [j for js in judged_runs.values() for j in js])
    assert (result.tp, result.fp, result.fn, result.tn) == (1, 1, 0, 0)
    # the same labels against no findings at all: the loop is missed, the false alarm gone
    assert labels.score([], Label.objects.all()) == Score(fn=1, tn=1)


def test_export_yields_the_labels_that_count_in_the_range(user, project, process, stuck):
    other = process(project, looping_trace(6, tool="fetch"), name="other.jsonl").runs.get()
    old = labels.label_finding(user, first_alarm(other), "real")
    Label.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    labels.label_finding(user, first_alarm(stuck), "real")
    newest = labels.label_finding(user, first_alarm(stuck), "false", "other", "a probe")
    rows = list(labels.export(project))
    assert [row["id"] for row in rows] == [old.pk, newest.pk]  # oldest first, superseded out
    row = rows[1]
    assert row["external_id"] == stuck.external_id and row["run_id"] == stuck.pk
    assert (row["verdict"], row["reason"], row["text"], row["user"]) == (
        "false",
        "other",
        "a probe",
        "alice",
    )
    assert row["seqs"] == [newest.seq_first, newest.seq_last]
    since = timezone.now() - timedelta(days=1)
    assert [r["id"] for r in labels.export(project, since=since)] == [newest.pk]
    assert [r["id"] for r in labels.export(project, until=since)] == [old.pk]


def test_export_keeps_to_its_project(user, project, other_project, process, stuck):
    labels.label_finding(user, first_alarm(stuck), "real")
    assert list(labels.export(other_project)) == []


def test_labeling_an_issue_labels_all_its_findings(user, project, process):
    loop = native_jsonl(
        message("user", "find it"),
        *[call("web_search", {"query": "same thing"}, {"results": []}) for _ in range(6)],
    )
    first = process(project, loop, name="first.jsonl").runs.get()
    second = process(project, loop + b"\n", name="second.jsonl").runs.get()
    issue = LoopIssue.objects.get(project=project, findings__run=first, detector="repeat")
    assert set(issue.findings.values_list("run", flat=True)) == {first.pk, second.pk}
    made = labels.label_issue(user, issue, "false", "batch")
    assert made == issue.findings.count() >= 2
    for run in (first, second):
        judged_run = labels.labels_for_runs([run.pk])[run.pk]
        assert judged_run and not any(j.real for j in judged_run)
    assert set(Label.objects.values_list("reason", flat=True)) == {"batch"}


def test_a_finding_replaced_before_the_label_is_stored_is_labeled_by_its_identity(user, stuck):
    target = first_alarm(stuck)  # read by the page, then re-analysis rewrites the findings
    analysis.analyze_run(stuck.pk)
    label = labels.label_finding(user, target, "real")
    assert label.finding is None and Label.objects.get().finding_id is None
    again = first_alarm(stuck)
    assert labels.for_findings(stuck, [again]) == {again.pk: label}


@pytest.mark.django_db(transaction=True)
def test_labeling_waits_for_a_re_analysis_holding_the_run(user, project, process):
    from runs.models import Run

    run = process(project, looping_trace(6), name="stuck.jsonl").runs.get()
    target = first_alarm(run)

    def reanalysis() -> None:  # what analysis.write does: lock the run, replace the findings
        list(Run.objects.select_for_update().filter(pk=run.pk))
        Finding.objects.filter(run=run).delete()

    # the label waits on the run's row, then finds its finding gone
    errors = hold_and_race(
        reanalysis, lambda: labels.label_finding(user, target, "false", "polling")
    )
    assert errors == []
    label_row = Label.objects.get()
    assert label_row.finding_id is None and label_row.reason == "polling"
