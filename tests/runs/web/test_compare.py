"""The compare pages: picker, side by side, folds and pages, no-JS links, 404 across
projects, and hostile trace content escaped."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from runs.models import CompareJob, Membership
from runs.services import compare as compare_service
from runs.services.compare import Row
from runs.web import comparison
from tests.helpers import call, message
from tests.runs.services.test_compare import stored
from tests.runs.web.conftest import work

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


def opened(client, url, data=None, **kwargs):
    """GET a comparison whose job the worker has done: the first visit queues the job, which
    runs here as the task would (`compare.run_job`), then the page is asked again."""
    first = client.get(url, data, **kwargs)
    if first.status_code != 200:
        return first
    for job_id in CompareJob.objects.filter(status="queued").values_list("pk", flat=True):
        compare_service.run_job(job_id)
    return client.get(url, data, **kwargs)


def html_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_the_run_page_links_to_compare_without_javascript(client_in, pair):
    looping, _ = pair
    html = html_of(client_in.get(looping.get_absolute_url()))
    assert f'href="{reverse("runs:compare_pick", args=[looping.pk])}"' in html


def test_the_picker_preselects_the_previous_run_of_the_same_task(client_in, pair):
    looping, fixed = pair
    html = html_of(client_in.get(reverse("runs:compare_pick", args=[fixed.pk])))
    assert re.search(rf'<option value="{looping.pk}" selected>', html)
    assert f'<option value="{fixed.pk}"' not in html  # not itself
    response = client_in.get(reverse("runs:compare_pick", args=[fixed.pk]), {"other": looping.pk})
    assert response.status_code == 302
    assert response["Location"] == reverse("runs:compare", args=[fixed.pk, looping.pk])


def test_the_picker_searches_the_projects_runs(client_in, pair, project, process):
    looping, fixed = pair
    stored(process, project, work(2), "unrelated")
    html = html_of(client_in.get(reverse("runs:compare_pick", args=[fixed.pk]), {"q": "unrel"}))
    assert ">#" in html and "unrelated" in html and "task-7" not in html


def test_the_comparison_shows_both_runs_aligned_with_the_loop_start(client_in, pair):
    looping, fixed = pair
    html = html_of(opened(client_in, reverse("runs:compare", args=[looping.pk, fixed.pk])))
    kinds = re.findall(r'data-kind="(\w+)"', html)
    assert kinds == ["equal"] * 5 + ["removed"] * 7 + ["inserted"]
    assert "loop starts here" in html
    assert "7 only left" in html and "1 only right" in html and "5 equal" in html
    finding = looping.findings.filter(severity__in=["warn", "stop"]).order_by("fired_at").first()
    start = finding.started_at if finding.started_at is not None else finding.fired_at
    assert f"at step #{start}" in html
    row = re.search(r'id="row-(\d+)"[^>]*>\s*<div class="cmp-step[^"]*cmp-step--loop', html)
    assert row is not None  # the jump link lands on the row where the left run's loop starts
    jump = max(int(row.group(1)) - 2, 0)
    url = reverse("runs:compare", args=[looping.pk, fixed.pk])
    assert f'href="{url}?from={jump}#row-{row.group(1)}"' in html
    # each side links to its own run's steps
    assert reverse("runs:step", args=[looping.pk, 4]) in html
    assert reverse("runs:step", args=[fixed.pk, 4]) in html
    # swapped: the loop is on the right now
    html = html_of(opened(client_in, reverse("runs:compare", args=[fixed.pk, looping.pk])))
    kinds = re.findall(r'data-kind="(\w+)"', html)
    assert kinds == ["equal"] * 5 + ["removed"] + ["inserted"] * 7  # a gap lists removals first


def test_a_changed_call_shows_what_changed(client_in, project, process):
    left = stored(process, project, [*work(3), call("bash", {"cmd": "make a"}, "ok")], "c-1")
    right = stored(process, project, [*work(3), call("bash", {"cmd": "make b"}, "ok")], "c-2")
    html = html_of(opened(client_in, reverse("runs:compare", args=[left.pk, right.pk])))
    assert re.findall(r'data-kind="(\w+)"', html) == ["equal"] * 3 + ["changed"]
    assert "args changed" in html
    assert re.search(r'class="diff__del">-\s*&quot;cmd&quot;: &quot;make a&quot;', html)
    assert re.search(r'class="diff__add">\+\s*&quot;cmd&quot;: &quot;make b&quot;', html)


def test_a_result_differing_only_in_volatile_values_is_equal_with_a_quiet_note(
    client_in, project, process
):
    evil = "<script>alert(1)</script>"
    left = stored(process, project, [
        *work(2),
        call("fetch", {"k": 1}, f"{evil} request req_8f3a2b1c9d0e4f77 at 2026-01-01T10:00:00Z"),
        call("bash", {"cmd": "pytest"}, "3 tests passed"),
    ], "v-1")  # fmt: skip
    right = stored(process, project, [
        *work(2),
        call("fetch", {"k": 1}, f"{evil} request req_1b2c3d4e5f6a7b88 at 2026-01-02T11:30:07Z"),
        call("bash", {"cmd": "pytest"}, "3 tests failed"),
    ], "v-2")  # fmt: skip
    html = html_of(opened(client_in, reverse("runs:compare", args=[left.pk, right.pk])))
    assert re.findall(r'data-kind="(\w+)"', html) == ["equal"] * 3 + ["changed"]
    assert html.count("result differs only in volatile values") == 1
    assert "3 equal" in html and "(1 of them differ only in volatile values)" in html
    assert "1 changed" in html and "result changed" in html
    row = re.search(r'id="row-2".*?(?=id="row-3")', html, re.S).group(0)
    assert "≈" in row and "result differs only in volatile values" in row
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "too many changed results" not in html


def test_the_page_says_when_changed_results_were_left_unchecked(
    client_in, project, process, monkeypatch
):
    left = stored(process, project, [call("fetch", {"k": 1}, "at 2026-01-01T10:00:00Z")], "b-1")
    right = stored(process, project, [call("fetch", {"k": 1}, "at 2026-01-02T11:30:07Z")], "b-2")
    monkeypatch.setattr(compare_service, "VOLATILE_BUDGET", 10)
    html = html_of(opened(client_in, reverse("runs:compare", args=[left.pk, right.pk])))
    assert re.findall(r'data-kind="(\w+)"', html) == ["changed"]
    assert "too many changed results" in html


def test_long_equal_stretches_fold_and_unfold_with_or_without_htmx(client_in, project, process):
    left = stored(process, project, [*work(300), call("bash", {"cmd": "a"}, "x")], "long-1")
    right = stored(process, project, [*work(300), call("bash", {"cmd": "b"}, "x")], "long-2")
    url = reverse("runs:compare", args=[left.pk, right.pk])
    html = html_of(opened(client_in, url))
    assert "Show 296 equal steps" in html
    assert len(re.findall(r'data-kind="', html)) == 5  # 2 + 2 context rows, the change
    unfold = f"{url}?from=2&amp;to=297&amp;flat=1"
    assert f'href="{unfold}"' in html and f'hx-get="{unfold}"' in html
    # without JavaScript: the whole page, that stretch unfolded, paged
    page = html_of(opened(client_in, url, {"from": 2, "to": 297, "flat": 1}))
    assert "<html" in page and len(re.findall(r'data-kind="equal"', page)) == 200
    assert f'href="{url}?from=202&amp;flat=1&amp;to=297"' in page
    # with htmx: only the rows
    part = html_of(opened(client_in, url, {"from": 202, "to": 297, "flat": 1}, headers=HX))
    assert "<html" not in part and len(re.findall(r'data-kind="equal"', part)) == 96


def test_a_big_comparison_is_paged(client_in, project, process):
    left = stored(process, project, [call("grep", {"q": k}, "a") for k in range(400)], "big-1")
    right = stored(process, project, [call("grep", {"q": k}, "b") for k in range(400)], "big-2")
    url = reverse("runs:compare", args=[left.pk, right.pk])
    html = html_of(opened(client_in, url))
    assert len(re.findall(r'data-kind="changed"', html)) == 100
    assert f'hx-get="{url}?from=100"' in html and f'href="{url}?from=100"' in html
    part = html_of(opened(client_in, url, {"from": 300}, headers=HX))
    assert len(re.findall(r'data-kind="changed"', part)) == 100 and "More rows" not in part


def test_another_projects_run_is_a_404(client_in, pair, other_project, process):
    looping, _ = pair
    theirs = stored(process, other_project, work(3), "task-9")
    assert client_in.get(reverse("runs:compare", args=[looping.pk, theirs.pk])).status_code == 404
    assert client_in.get(reverse("runs:compare", args=[theirs.pk, looping.pk])).status_code == 404
    assert client_in.get(reverse("runs:compare_pick", args=[theirs.pk])).status_code == 404
    pick = reverse("runs:compare_pick", args=[looping.pk])
    assert client_in.get(pick, {"other": theirs.pk}).status_code == 404
    assert "task-9" not in html_of(client_in.get(pick, {"q": "task"}))


def test_anonymous_users_are_sent_to_log_in(client, pair):
    looping, fixed = pair
    response = client.get(reverse("runs:compare", args=[looping.pk, fixed.pk]))
    assert response.status_code == 302 and "login" in response["Location"]


def test_hostile_trace_content_is_escaped(client_in, project, process):
    evil = "<script>alert(1)</script>"
    left_events = [message("user", evil), call(f"tool{evil}", {"q": evil}, evil)]
    right_events = [message("user", evil + "!"), call(f"tool{evil}", {"q": evil + "?"}, evil)]
    left = stored(process, project, left_events, f"run{evil}1")
    right = stored(process, project, right_events, f"run{evil}2")
    for url in (
        reverse("runs:compare", args=[left.pk, right.pk]),
        reverse("runs:compare_pick", args=[left.pk]),
    ):
        html = html_of(opened(client_in, url))
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_totals_and_deltas_so_far_read_right_minus_left(client_in, project, process):
    def timed(tool, k, at, tokens):
        return call(tool, {"k": k}, "ok", ts=1_767_225_600 + at, tokens_in=tokens, tokens_out=0,
                    cost=tokens / 1000)  # fmt: skip

    left = stored(process, project, [timed("a", 0, 0, 100), timed("b", 1, 10, 100)], "t-1")
    events = [timed("a", 0, 0, 100), timed("x", 9, 5, 250), timed("b", 1, 40, 100)]
    right = stored(process, project, events, "t-2")
    html = html_of(opened(client_in, reverse("runs:compare", args=[left.pk, right.pk])))
    cells = re.findall(r'<td class="num">([^<]*)</td>', html)
    assert cells[:6] == ["2", "3", "+1", "2", "3", "+1"]  # steps, tool calls
    assert cells[6:9] == ["200", "450", "+250"]  # tokens
    assert cells[9:12] == ["$0.2000", "$0.4500", "+$0.2500"]  # cost
    assert cells[12:15] == ["10.0s", "40.0s", "+30.0s"]  # duration
    deltas = re.findall(r'<span class="cmp-row__delta">([^<]*)</span>', html)
    # a: level; x only on the right: +250 tokens, 5 s later; b: +250 tokens, 30 s later
    assert deltas == ["", "+250 tok · +$0.2500 · +5.0s", "+250 tok · +$0.2500 · +30.0s"]


def test_runs_of_two_projects_of_the_user_compare(client_in, pair, other_project, user, process):
    looping, _ = pair
    Membership.objects.create(project=other_project, user=user)
    theirs = stored(process, other_project, work(3), "task-9")
    html = html_of(opened(client_in, reverse("runs:compare", args=[looping.pk, theirs.pk])))
    assert "task-9" in html and 'data-kind="equal"' in html


def test_a_live_runs_new_steps_show_up_in_its_comparison(client_in, api, project, process):
    fixed = stored(process, project, work(3), "agent-1")
    session = api.post(
        "/api/live/runs", {"external_id": "agent-2"}, content_type="application/json"
    )
    live_id = session.json()["run_id"]
    url = reverse("runs:compare", args=[live_id, fixed.pk])

    def append(k):
        step = {"tool": "read_file", "args": {"path": f"src/m{k}.py"}, "result": f"text {k}"}
        answer = api.post("/api/live/runs/agent-2/steps", {"steps": [step]},
                          content_type="application/json")  # fmt: skip
        assert answer.status_code == 200, answer.content

    append(0)
    assert re.findall(r'data-kind="(\w+)"', html_of(opened(client_in, url))) == [
        "equal",
        "inserted",
        "inserted",
    ]
    append(1)  # the comparison kept for the page is not reused once the run has changed
    assert re.findall(r'data-kind="(\w+)"', html_of(opened(client_in, url))) == [
        "equal",
        "equal",
        "inserted",
    ]


@given(
    st.lists(st.sampled_from(["equal"] * 6 + ["changed", "removed"]), min_size=1, max_size=300),
    st.data(),
)
def test_a_window_covers_its_rows_once_in_order_and_folds_only_long_equal_stretches(kinds, data):
    rows = [Row(kind, n, n) for n, kind in enumerate(kinds)]
    start = data.draw(st.integers(0, len(rows) - 1))
    keep = set(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=5)))
    segments, more_from = comparison.plan(rows, start, len(rows) - 1, 40, keep, False)
    covered = [n for _, a, b in segments for n in range(a, b + 1)]
    assert covered == list(range(start, more_from if more_from is not None else len(rows)))
    for kind, a, b in segments:
        if kind == "fold":
            assert b - a + 1 >= comparison.FOLD_MIN - 2 * comparison.CONTEXT + 1
            assert all(rows[n].kind == "equal" and n not in keep for n in range(a, b + 1))
    shown = sum(1 if kind == "fold" else b - a + 1 for kind, a, b in segments)
    assert shown <= 40 + 2 * comparison.CONTEXT  # a page, give or take a fold's context
