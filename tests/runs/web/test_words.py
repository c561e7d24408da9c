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


def test_the_step_diff_says_the_previous_call_was_the_step_just_before(client_in, project, process):
    from tests.helpers import call, native_jsonl

    same = call("web_search", {"q": "x"}, {"hits": []})
    run = process(project, native_jsonl(same, same)).runs.get()
    html = client_in.get(f"/runs/{run.pk}/steps/1/").content.decode()
    assert "What changed since #0" in html
    assert "the step just before" in html and "0 steps" not in html

    apart = [same, call("read", {"p": 1}, "a"), call("read", {"p": 2}, "b"), same]
    run = process(project, native_jsonl(*apart), name="apart.jsonl").runs.get()
    html = client_in.get(f"/runs/{run.pk}/steps/3/").content.decode()
    assert "2 steps in between" in html


def test_a_json_box_counts_one_key_and_one_item_in_the_singular():
    from runs.web.stepview import json_html

    html = str(json_html({"only": [1]}))
    assert "1 key<" in html and "1 item<" in html and "1 keys" not in html
    assert "2 keys<" in str(json_html({"a": 1, "b": 2}))


def test_a_label_made_a_moment_ago_says_just_now():
    from datetime import timedelta

    from django.utils import timezone

    from runs.templatetags.loopboard import ago

    assert ago(timezone.now()) == "just now"
    assert ago(timezone.now() - timedelta(minutes=3)) == "3\xa0minutes ago"


def test_an_error_message_ends_with_one_period(client_in, project):
    response = client_in.post(
        f"/projects/{project.slug}/settings/channels/",
        {"channel-name": "x", "channel-kind": "webhook", "channel-url": "ftp://nowhere"},
        follow=True,
    )
    text = [str(m) for m in response.context["messages"]]
    assert len(text) == 1 and text[0].startswith("Channel not added"), text
    assert text[0].endswith(".") and not text[0].endswith(".."), text


def test_a_policy_change_is_summed_up_in_words_not_python():
    from runs.services import policy

    text = policy.describe(
        {"defaults": {"warn": 3}, "tools": {"a": {"warn": 2}}},
        {"defaults": {"warn": 4}, "tools": {"a": {"polling": True}, "b": {"stop": 9, "warn": 7}}},
    )
    assert text.splitlines() == [
        "defaults.warn: 3 → 4",
        "a: warn 2 → polling yes",
        "added tool row b: warn 7, stop 9",
    ]


def test_backticked_names_in_a_title_are_code_not_backticks():
    from runs.templatetags.loopboard import code_spans

    assert str(code_spans("`read_file` goes <back>")) == "<code>read_file</code> goes &lt;back&gt;"


def test_a_finding_message_says_at_which_step_it_was_true(client_in, project, process):
    """A band of six calls (×6) and a message written at the stop, five calls in."""
    from tests.helpers import looping_trace

    run = process(project, looping_trace(6)).runs.get()
    finding = run.findings.get(severity="stop")
    html = client_in.get(f"/runs/{run.pk}/").content.decode()
    assert f"At #{finding.stop_at}:</span> {finding.message[:40]}" in html
    assert "×6" in html and "5 times" in finding.message
