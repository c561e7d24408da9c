"""One loop, one finding group: detectors that fire over the same calls are one loop, one
loop issue, and its waste counts once."""

from __future__ import annotations

import pytest

from tests.helpers import call, native_jsonl

pytestmark = pytest.mark.django_db


def _failing_write(times: int = 6) -> bytes:
    """A real shape: `write_file` failing the same way every time (mutating_failure and
    repeat both see it)."""
    return native_jsonl(
        *(
            call(
                "write_file",
                {"path": "a.py", "content": "x"},
                "PermissionError: a.py",
                status="error",
            )
            for _ in range(times)
        )
    )


def test_a_loop_seen_by_two_detectors_is_one_issue_and_counts_its_waste_once(project, process):
    from runs.models import Finding, IssueRun, LoopIssue

    trace = process(project, _failing_write())
    run = trace.runs.get()
    findings = list(Finding.objects.filter(run=run).exclude(severity="info"))
    assert {f.detector for f in findings} >= {"repeat", "mutating_failure"}
    leads = [f for f in findings if f.lead]
    assert len(leads) == 1
    assert {f.issue_id for f in findings} == {leads[0].issue_id}
    assert LoopIssue.objects.filter(project=project, finding_count__gt=0).count() == 1
    share = IssueRun.objects.get(run=run)
    assert share.findings == 1
    assert share.waste_steps == leads[0].waste_steps == run.waste_steps


def test_regroup_joins_findings_stored_before_loops_were_grouped(project, process):
    from django.core.management import call_command

    from runs.models import Finding, LoopIssue

    trace = process(project, _failing_write())
    run = trace.runs.get()
    Finding.objects.filter(run=run).update(loop=-1, lead=True)  # as stored before
    call_command("regroup", verbosity=0)
    assert LoopIssue.objects.filter(project=project, finding_count__gt=0).count() == 1
    flagged = Finding.objects.filter(run=run).exclude(severity="info")
    assert sum(f.lead for f in flagged) == 1
    assert len({f.issue_id for f in flagged}) == 1


def test_the_run_page_shows_one_loop_naming_the_detectors_that_saw_it(project, process, client_in):
    trace = process(project, _failing_write())
    run = trace.runs.get()
    page = client_in.get(f"/runs/{run.pk}/").content.decode()
    assert "One loop, also seen by" in page
    assert "The same loop as" in page
