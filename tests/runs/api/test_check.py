"""The live check `POST /api/check`: would the next call be a loop?"""

from __future__ import annotations

import time

import pytest

from tests.helpers import call, looping_trace, message


@pytest.mark.django_db
def test_check_with_the_calls_so_far(api):
    calls = [message("user", "find it")] + [call("web_search", {"q": "x"}, []) for _ in range(4)]
    for c in calls:
        c.pop("type")
        if "content" in c:
            c["text"] = c.pop("content")
    body = {"calls": calls, "tool": "web_search", "args": {"q": "x"}}
    response = api.post("/api/check", body, content_type="application/json")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["verdict"] == "stop" and answer["findings"]
    assert "web_search" in answer["message"]
    fresh = api.post("/api/check", {**body, "args": {"q": "new"}}, content_type="application/json")
    assert fresh.json()["verdict"] == "ok" and fresh.json()["message"] == ""


@pytest.mark.django_db
def test_check_against_a_stored_run_is_fast(api, project, process):
    run = process(project, looping_trace(2)).runs.get()
    body = {"run_id": run.pk, "tool": "web_search", "args": {"query": "same thing"}}
    started = time.perf_counter()
    answers = [api.post("/api/check", body, content_type="application/json") for _ in range(20)]
    per_call_ms = (time.perf_counter() - started) * 1000 / 20
    assert all(a.status_code == 200 for a in answers)
    assert answers[0].json()["verdict"] == "warn"
    print(f"live check round trip: {per_call_ms:.1f} ms per call (test client)")
    assert api.post("/api/check", {"tool": ""}, content_type="application/json").status_code == 422
    missing = api.post(
        "/api/check", {"run_id": 10**9, "tool": "x"}, content_type="application/json"
    )
    assert missing.status_code == 404


def test_check_with_an_invalid_stored_policy_is_a_clear_409(api, project):
    from runs.models import ToolPolicy

    ToolPolicy.objects.create(project=project, tool="", warn=5, stop=2)
    response = api.post("/api/check", {"tool": "search"}, content_type="application/json")
    assert response.status_code == 409
    assert "warn <= stop" in response.json()["detail"]
    assert "Tuning" in response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("calls", [[[None, None]], [{}], [{"args": {"q": 1}}], ["web_search"]])
def test_calls_that_are_not_calls_are_a_422_with_a_message(api, calls):
    body = {"tool": "web_search", "calls": calls}
    response = api.post("/api/check", body, content_type="application/json")
    assert response.status_code == 422
    assert "calls" in response.json()["detail"]


@pytest.mark.django_db
def test_the_upload_format_is_an_enum_in_the_schema(client):
    schema = client.get("/api/openapi.json").json()
    params = schema["paths"]["/api/traces"]["post"]["parameters"]
    format_param = next(p for p in params if p["name"] == "format")
    assert "native" in str(format_param["schema"]) and "otlp" in str(format_param["schema"])
