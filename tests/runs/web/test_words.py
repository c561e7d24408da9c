"""What the pages say, as a new user reads it: counts that agree, singulars, no tofu icons,
links that lead to steps that exist, and no text shown twice."""

from __future__ import annotations

import re

import pytest

from runs.models import Run
from runs.services import analysis
from tests.runs.api.test_live_page import append

pytestmark = pytest.mark.django_db

FAILING = {"tool": "Bash", "args": {"command": "make"}, "result": "exit 2", "status": "error"}


def stopped_run(api) -> int:
    """A live run of three identical failures, a fourth the guard stopped, ended and folded."""
    run_id = append(api, [FAILING] * 3)["run_id"]
    check = api.post(
        "/api/live/runs/page/check", {"tool": "Bash", "args": {"command": "make"}},
        content_type="application/json",
    )  # fmt: skip
    assert check.json()["verdict"] == "stop"
    api.post("/api/live/runs/page/end", content_type="application/json")
    analysis.analyze_run(run_id)
    return run_id


def test_a_stopped_call_shows_once_after_unfolding_its_band(api, client_in):
    run_id = stopped_run(api)
    page = client_in.get(f"/runs/{run_id}/").content.decode()
    band = re.search(r'<li class="fold.*?</li>', page, re.S).group(0)
    assert band.count("marker--stopped") == 1  # inside the band, which Unfold replaces
    assert page.count("marker--stopped") == 1
    start, end = re.search(r'data-from="(\d+)" data-to="(\d+)"', band).groups()
    fragment = client_in.get(
        f"/runs/{run_id}/?from={start}&to={end}&flat=1", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert fragment.count("marker--stopped") == 1  # what replaces the band has it once
    assert fragment.index('id="step-2"') < fragment.index("marker--stopped")


def test_a_stopped_call_names_and_links_the_step_it_came_after(api, client_in):
    run_id = stopped_run(api)
    page = client_in.get(f"/runs/{run_id}/").content.decode()
    assert "⛔" not in page  # no font on a stock Linux has it: it showed as a box
    assert "✕" in page
    assert "after step #2" in page
    links = re.findall(r'href="/runs/\d+/\?from=(\d+)#step-(\d+)">#(\d+)</a>', page)
    assert links == [("2", "2", "2")]
    steps = set(Run.objects.get(pk=run_id).steps.values_list("seq", flat=True))
    assert {int(seq) for link in links for seq in link} <= steps
