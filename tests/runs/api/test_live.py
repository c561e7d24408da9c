"""The live-run API (`/api/live/runs/...`): open, append, check, end, read."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

SEARCH = {"tool": "web_search", "args": {"q": "same"}, "result": {"hits": []}}


def post(api, path: str, body: dict):
    return api.post(f"/api/live/runs{path}", body, content_type="application/json")


def test_open_is_idempotent_and_answers_the_run(api):
    first = post(api, "", {"external_id": "sess-1", "name": "fix the bug", "metadata": {"a": 1}})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["external_id"] == "sess-1" and body["live"] is True
    assert body["steps"] == 0 and body["verdict"] == "ok" and body["stopped_calls"] == 0
    assert body["url"] == f"/runs/{body['run_id']}/"
    again = post(api, "", {"external_id": "sess-1"})
    assert again.json()["run_id"] == body["run_id"]
    got = api.get("/api/live/runs/sess-1")
    assert got.status_code == 200 and got.json() == body


def test_unknown_run_is_404_to_read_and_end_but_ok_to_check(api):
    assert api.get("/api/live/runs/nobody").status_code == 404
    assert post(api, "/nobody/end", {}).status_code == 404
    check = post(api, "/nobody/check", {"tool": "web_search", "args": {"q": "x"}})
    assert check.status_code == 200
    assert check.json()["verdict"] == "ok" and check.json()["findings"] == []
    assert check.json()["message"] == ""


def test_append_opens_the_run_and_answers_seqs_and_what_fires(api):
    user = {"role": "user", "text": "find it", "id": "u1"}
    answer = post(api, "/s2/steps", {"steps": [user, {**SEARCH, "id": "c1"}]})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["seqs"] == [0, 1] and body["findings"] == [] and body["verdict"] == "ok"
    assert "app;dur=" in answer["Server-Timing"]
    second = post(api, "/s2/steps", {"steps": [{**SEARCH, "id": "c2"}, {**SEARCH, "id": "c3"}]})
    body = second.json()
    assert body["seqs"] == [2, 3] and body["verdict"] == "warn"
    [finding] = [f for f in body["findings"] if f["severity"] == "warn"]
    assert finding["detector"] == "repeat" and finding["fired_at"] == 3
    assert finding["seqs"] == [1, 2, 3] and "web_search" in finding["message"]
    assert api.get("/api/live/runs/s2").json()["steps"] == 4


def test_check_answers_like_the_stateless_check(api):
    calls = [{"role": "user", "text": "find it"}, *[SEARCH] * 4]
    post(api, "/s3/steps", {"steps": calls})
    live = post(api, "/s3/check", {"tool": "web_search", "args": {"q": "same"}}).json()
    stateless = api.post(
        "/api/check",
        {"calls": calls, "tool": "web_search", "args": {"q": "same"}},
        content_type="application/json",
    ).json()
    assert live["verdict"] == "stop"
    assert {k: live[k] for k in ("verdict", "findings", "message")} == {
        k: stateless[k] for k in ("verdict", "findings", "message")
    }
    fresh = post(api, "/s3/check", {"tool": "web_search", "args": {"q": "other"}}).json()
    assert fresh["verdict"] == "ok"


def test_a_retried_step_is_stored_once_and_answers_where_it_is(api):
    post(api, "/s4/steps", {"steps": [{**SEARCH, "id": "a"}, {**SEARCH, "id": "b"}]})
    retry = post(api, "/s4/steps", {"steps": [{**SEARCH, "id": "b"}, {**SEARCH, "id": "c"}]})
    assert retry.json()["seqs"] == [1, 2]
    only_retries = post(api, "/s4/steps", {"steps": [{**SEARCH, "id": "a"}]})
    assert only_retries.json()["seqs"] == [0] and only_retries.json()["findings"] == []
    twice_in_one = post(api, "/s4/steps", {"steps": [{**SEARCH, "id": "d"}, {**SEARCH, "id": "d"}]})
    assert twice_in_one.json()["seqs"] == [3, 3]
    assert api.get("/api/live/runs/s4").json()["steps"] == 4


def test_end_queues_analysis_and_an_append_reopens(api, project):
    from runs.models import Run

    post(api, "/s5/steps", {"steps": [SEARCH] * 3})
    ended = post(api, "/s5/end", {})
    assert ended.status_code == 200
    assert ended.json()["live"] is False and ended.json()["verdict"] == "warn"
    run = Run.objects.get(pk=ended.json()["run_id"])
    assert run.live is False and run.verdict == "pending"
    assert post(api, "/s5/end", {}).json()["live"] is False  # idempotent
    reopened = post(api, "/s5/steps", {"steps": [SEARCH]})
    assert reopened.json()["seqs"] == [3] and reopened.json()["verdict"] == "warn"
    assert run.findings.filter(severity="warn").exists()  # the live findings are kept
    assert api.get("/api/live/runs/s5").json()["live"] is True


def test_bad_bodies_are_422(api):
    assert post(api, "/s6/steps", {"steps": []}).status_code == 422
    assert post(api, "/s6/steps", {"steps": [{"args": {"q": 1}}]}).status_code == 422
    assert post(api, "/s6/steps", {"steps": [SEARCH] * 501}).status_code == 422
    assert post(api, "", {"external_id": ""}).status_code == 422
    assert post(api, "/s6/check", {"tool": ""}).status_code == 422


def test_another_projects_key_neither_sees_nor_appends(api, client, key, other_key, project):
    from runs.models import Run

    post(api, "/mine/steps", {"steps": [SEARCH] * 3})
    theirs = {"HTTP_AUTHORIZATION": f"Bearer {other_key}"}
    assert client.get("/api/live/runs/mine", **theirs).status_code == 404
    assert client.post("/api/live/runs/mine/end", **theirs).status_code == 404
    check = client.post(
        "/api/live/runs/mine/check",
        {"tool": "web_search", "args": {"q": "same"}},
        content_type="application/json",
        **theirs,
    )
    assert check.json()["verdict"] == "ok"  # their project has no such run
    client.post(
        "/api/live/runs/mine/steps",
        {"steps": [SEARCH]},
        content_type="application/json",
        **theirs,
    )
    mine = Run.objects.get(project=project, external_id="mine")
    assert mine.step_count == 3 and mine.live is True
    assert Run.objects.filter(external_id="mine").exclude(project=project).get().step_count == 1


def test_a_read_key_may_check_but_not_append(client, project):
    from runs.models import ApiKey

    reader = ApiKey.issue(project, "reader", scope=ApiKey.Scope.READ)[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {reader}"}
    appended = client.post(
        "/api/live/runs/r/steps", {"steps": [SEARCH]}, content_type="application/json", **headers
    )
    assert appended.status_code == 403
    checked = client.post(
        "/api/live/runs/r/check", {"tool": "x"}, content_type="application/json", **headers
    )
    assert checked.status_code == 200


def test_openapi_lists_the_live_endpoints(client):
    paths = client.get("/api/openapi.json").json()["paths"]
    assert "post" in paths["/api/live/runs"]
    assert "get" in paths["/api/live/runs/{external_id}"]
    for action in ("steps", "check", "end"):
        assert "post" in paths[f"/api/live/runs/{{external_id}}/{action}"]


def test_a_live_body_over_its_own_limit_is_refused_before_it_is_parsed(api, settings):
    """Issue 25: a 100 MB append was parsed whole and got a web worker killed. Live appends
    and checks are held to LOOPBOARD_MAX_LIVE_BYTES (16 MiB), far below the upload limit."""
    settings.LOOPBOARD_MAX_LIVE_BYTES = 2000
    big = {"steps": [{**SEARCH, "id": "c1", "result": "x" * 3000}]}
    answer = post(api, "/s-big/steps", big)
    assert answer.status_code == 413
    detail = answer.json()["detail"]
    assert detail.startswith("request body of 30") and detail.endswith("the limit of 2000 bytes")
    assert api.get("/api/live/runs/s-big").status_code == 404  # nothing was opened
    check = api.post(
        "/api/check", {"tool": "t", "args": {"q": "y" * 3000}}, content_type="application/json"
    )
    assert check.status_code == 413
    assert post(api, "/s-big/steps", {"steps": [{**SEARCH, "id": "c1"}]}).status_code == 200
