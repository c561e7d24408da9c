"""Issue 23 part 7: `manage.py regroup` keeps labels attached. A finding labeled before its
loop was grouped (stored as its own loop, as before migration 0024) is judged by the same
label after the regroup, and its loop issue is the lead's."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.runs.services.test_loops import _failing_write

pytestmark = pytest.mark.django_db


def test_regroup_keeps_each_label_on_its_finding_and_the_loop_in_one_issue(project, process, user):
    from runs.models import Finding, Label
    from runs.services import labels

    run = process(project, _failing_write()).runs.get()
    Finding.objects.filter(run=run).update(loop=-1, lead=True)  # as stored before grouping
    flagged = list(Finding.objects.filter(run=run).exclude(severity="info").order_by("pk"))
    assert len(flagged) >= 2
    made = [labels.label_finding(user, finding, "real") for finding in flagged]

    call_command("regroup", verbosity=0)

    after = list(Finding.objects.filter(run=run).exclude(severity="info").order_by("pk"))
    assert [f.pk for f in after] == [f.pk for f in flagged]  # regrouped in place
    assert len({f.issue_id for f in after}) == 1 and sum(f.lead for f in after) == 1
    assert [Label.objects.get(pk=label.pk).finding_id for label in made] == [f.pk for f in after]
    judged = labels.for_findings(run, after)
    assert {finding.pk: label.verdict for finding, label in zip(after, made, strict=True)} == {
        pk: label.verdict for pk, label in judged.items()
    }
