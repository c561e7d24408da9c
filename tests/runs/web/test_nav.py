"""The top bar marks the section a page is in: every tab of a run page is under Runs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db


def test_every_run_tab_marks_runs_in_the_top_bar(client_in, project, process):
    run = process(project, looping_trace(6)).runs.get()
    pages = [
        reverse(name, args=[run.pk]) for name in
        ("runs:detail", "runs:tree", "runs:ledger", "runs:latency", "runs:find", "runs:compare_pick")
    ] + [reverse("runs:step", args=[run.pk, 1])]  # fmt: skip
    for url in pages:
        html = client_in.get(url).content.decode()
        assert 'aria-current="page">Runs</a>' in html, url
