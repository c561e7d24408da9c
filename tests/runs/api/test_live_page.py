"""A live run's page: it polls while the run is live, and each poll brings the new steps,
the verdict and the findings (htmx, no reload); polling stops once the run has ended."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

SEARCH = {"tool": "web_search", "args": {"q": "same"}, "result": {"hits": []}}


def append(api, steps: list[dict]) -> dict:
    response = api.post(
        "/api/live/runs/page/steps", {"steps": steps}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_the_page_of_a_live_run_polls_for_new_steps_and_findings(api, client_in, project):
    run_id = append(api, [{"role": "user", "text": "find it"}, SEARCH])["run_id"]
    page = client_in.get(f"/runs/{run_id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'hx-get="/runs/{run_id}/live/?after=2"' in html and 'hx-trigger="every 2s"' in html

    append(api, [SEARCH, SEARCH])  # the third identical search: a warning at #3
    poll = client_in.get(f"/runs/{run_id}/live/?after=2", HTTP_HX_REQUEST="true")
    assert poll.status_code == 200
    html = poll.content.decode()
    assert 'hx-swap-oob="beforeend:#timeline"' in html
    assert 'id="step-2"' in html and 'id="step-3"' in html and 'id="step-1"' not in html
    assert f'hx-get="/runs/{run_id}/live/?after=4"' in html  # the next poll goes on from #4
    assert 'id="findings-panel" aria-label="Findings" hx-swap-oob="true"' in html
    assert "Repeat" in html or "repeat" in html
    assert 'id="run-facts"' in html and "badge--warn" in html

    nothing_new = client_in.get(f"/runs/{run_id}/live/?after=4", HTTP_HX_REQUEST="true")
    assert "beforeend:#timeline" not in nothing_new.content.decode()


def test_polling_stops_once_the_run_has_ended(api, client_in):
    run_id = append(api, [SEARCH])["run_id"]
    api.post("/api/live/runs/page/end", content_type="application/json")
    poll = client_in.get(f"/runs/{run_id}/live/?after=1", HTTP_HX_REQUEST="true")
    assert poll.status_code == 286
    assert "hx-trigger" not in poll.content.decode()
    assert "hx-trigger" not in client_in.get(f"/runs/{run_id}/").content.decode()


def test_another_users_live_run_page_is_404(api, client, other_project):
    from django.contrib.auth import get_user_model

    run_id = append(api, [SEARCH])["run_id"]
    client.force_login(get_user_model().objects.get(username="mallory"))
    assert client.get(f"/runs/{run_id}/live/?after=0").status_code == 404


def test_a_call_the_guard_stopped_shows_on_the_live_page_escaped(api, client_in):
    script = {"command": "<script>alert(1)</script> && make"}
    failing = {"tool": "Bash", "args": script, "result": "Error: exit 2", "status": "error"}
    run_id = append(api, [failing, failing, failing])["run_id"]
    poll = client_in.get(f"/runs/{run_id}/live/?after=3", HTTP_HX_REQUEST="true")
    assert "Stopped by the guard" not in poll.content.decode()

    check = api.post(
        "/api/live/runs/page/check", {"tool": "Bash", "args": script},
        content_type="application/json",
    )  # fmt: skip
    assert check.json()["verdict"] == "stop"
    poll = client_in.get(f"/runs/{run_id}/live/?after=3", HTTP_HX_REQUEST="true")
    html = poll.content.decode()
    assert "Stopped by the guard" in html and "after step" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert f'href="/runs/{run_id}/?from=2#step-2">#2</a>' in html  # the step it came after
    assert api.get("/api/live/runs/page").json()["stopped_calls"] == 1
    page = client_in.get(f"/runs/{run_id}/").content.decode()  # and in the timeline, after #2
    marker = page.index('class="marker marker--stop marker--stopped" data-seq="3"')
    assert page.index('id="step-2"') < marker and "was not made" in page[marker:]
    assert "&lt;script&gt;" in page[marker : marker + 600]


def test_a_stopped_call_inside_a_folded_band_shows_after_the_band(api, client_in):
    from runs.models import Run
    from runs.services import analysis

    failing = {"tool": "Bash", "args": {"command": "make"}, "result": "exit 2", "status": "error"}
    run_id = append(api, [failing] * 3)["run_id"]
    check = {"tool": "Bash", "args": {"command": "make"}}
    assert (
        api.post("/api/live/runs/page/check", check, content_type="application/json").json()[
            "verdict"
        ]
        == "stop"
    )
    api.post("/api/live/runs/page/end", content_type="application/json")
    analysis.analyze_run(run_id)  # analysis folds the three repeats into one band
    assert not Run.objects.get(pk=run_id).live
    page = client_in.get(f"/runs/{run_id}/").content.decode()
    band, marker = page.find('class="fold'), page.find("marker--stopped")
    assert 0 < band < marker
    assert "1 steps" not in page  # the cost after the warning: one step, said so
