"""The JSON API: upload, traces, runs, steps, analyze, policy, errors."""

from __future__ import annotations

import gzip
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from runs.models import PolicyChange, ToolPolicy, Trace
from runs.services import ingest
from tests.helpers import healthy_trace, looping_trace

pytestmark = pytest.mark.django_db


def test_upload_raw_body_returns_202_with_the_trace_id(
    api, project, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = api.post(
            "/api/traces?name=loop.jsonl", looping_trace(), content_type="application/octet-stream"
        )
    assert response.status_code == 202, response.content
    body = response.json()
    trace = Trace.objects.get(pk=body["trace_id"])
    assert trace.project == project and trace.name == "loop.jsonl" and trace.source == "api"
    assert body["status"] == "received" and body["duplicate"] is False


def test_upload_multipart_and_gzip_and_duplicate(api):
    data = gzip.compress(healthy_trace())
    first = api.post("/api/traces", {"file": SimpleUploadedFile("h.jsonl.gz", data)})
    assert first.status_code == 202, first.content
    again = api.post("/api/traces", {"file": SimpleUploadedFile("h.jsonl.gz", data)})
    assert again.json()["trace_id"] == first.json()["trace_id"]
    assert again.json()["duplicate"] is True


def test_upload_errors_are_json_with_a_message(api, settings):
    assert api.post("/api/traces", b"", content_type="application/octet-stream").status_code == 400
    bad = api.post("/api/traces?format=nope", b"x", content_type="application/octet-stream")
    assert bad.status_code == 422 and "format" in bad.json()["detail"]
    settings.MAX_UPLOAD_BYTES = 10
    big = api.post("/api/traces", b"x" * 100, content_type="application/octet-stream")
    assert big.status_code == 413 and "limit" in big.json()["detail"]


def test_trace_status_and_errors(api, project, process):
    trace = process(project, b"not a trace at all\n", name="junk.txt")
    body = api.get(f"/api/traces/{trace.pk}").json()
    assert body["status"] == "failed" and body["error"]
    good = process(project, looping_trace(), name="loop.jsonl")
    body = api.get(f"/api/traces/{good.pk}").json()
    assert body["status"] == "analyzed" and len(body["run_ids"]) == 1


def test_raw_download_gives_the_bytes_back(api, project):
    data = gzip.compress(looping_trace())
    trace, _ = ingest.store_trace(project, data, name="x.jsonl.gz")
    response = api.get(f"/api/traces/{trace.pk}/raw")
    assert response.status_code == 200 and response.streaming  # never whole in memory
    assert b"".join(response.streaming_content) == data
    assert response["Content-Length"] == str(len(data))
    assert "attachment" in response["Content-Disposition"]


def test_runs_list_filters_and_pagination(api, project, process):
    process(project, looping_trace(6), name="stuck-search.jsonl")
    process(project, healthy_trace(), name="fine.jsonl")
    body = api.get("/api/runs").json()
    assert body["count"] == 2
    item = body["items"][0]
    assert {"id", "name", "verdict", "stall_score", "step_count", "tool_call_count"} <= set(item)
    stopped = api.get("/api/runs?verdict=stop").json()
    assert [r["name"] for r in stopped["items"]] == ["stuck-search"] or stopped["count"] == 1
    assert api.get("/api/runs?detector=repeat").json()["count"] == 1
    assert api.get("/api/runs?tool=edit_file").json()["count"] == 1
    assert api.get("/api/runs?q=web").json()["count"] == 1
    assert api.get("/api/runs?format=native").json()["count"] == 2
    assert api.get("/api/runs?since=2000-01-01&until=2999-01-01").json()["count"] == 2
    assert api.get("/api/runs?until=2000-01-01").json()["count"] == 0
    page = api.get("/api/runs?limit=1&offset=1").json()
    assert page["count"] == 2 and len(page["items"]) == 1
    assert api.get("/api/runs?verdict=flagged").json()["count"] == 1
    assert api.get("/api/runs?verdict=bogus").status_code == 422
    # paging past any real offset is a clear 422, not a database overflow (a 500)
    huge = api.get("/api/runs?offset=10000000000000000000")
    assert huge.status_code == 422 and "offset" in huge.text
    assert api.get("/api/runs?limit=100000").status_code == 422


def test_run_detail_steps_and_reanalyze(api, project, process, django_capture_on_commit_callbacks):
    trace = process(project, looping_trace(6))
    run = trace.runs.get()
    body = api.get(f"/api/runs/{run.pk}").json()
    assert body["verdict"] == "stop"
    assert body["findings"] and body["findings"][0]["message"]
    page = api.get(f"/api/runs/{run.pk}/steps?limit=4").json()
    assert [s["seq"] for s in page["items"]] == [0, 1, 2, 3] and page["next_from"] == 4
    rest = api.get(f"/api/runs/{run.pk}/steps?from=4").json()
    assert [s["seq"] for s in rest["items"]] == [4, 5, 6] and rest["next_from"] is None
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api.post(f"/api/runs/{run.pk}/analyze")
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert len(callbacks) == 1


def test_policy_get_put_records_a_change_and_reanalyzes(api, project, process):
    process(project, looping_trace(3))
    assert api.get("/api/policy").json() == {"defaults": {}, "tools": {}, "reanalyzed": None}
    policy = {"defaults": {"warn": 2, "stop": 4}, "tools": {"web_*": {"polling": True}}}
    response = api.put("/api/policy", policy, content_type="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["defaults"]["warn"] == 2 and body["tools"] == {"web_*": {"polling": True}}
    assert body["reanalyzed"] == 1
    assert ToolPolicy.objects.filter(project=project).count() == 2
    change = PolicyChange.objects.get(project=project)
    assert change.after["tools"] == {"web_*": {"polling": True}}
    assert api.get("/api/policy").json()["defaults"]["stop"] == 4


@pytest.mark.parametrize(
    "policy",
    [
        {"defaults": {"warn": 9, "stop": 2}},
        {"defaults": {"nonsense": 1}},
        {"tools": {"x": {"warn": -1}}},
        {"tools": {"x": {"warn": "three"}}},
        {"other": {}},
    ],
)
def test_bad_policies_are_422_with_a_message(api, policy):
    response = api.put("/api/policy", policy, content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["detail"]


def test_bad_json_and_deep_json_are_400(api):
    response = api.put("/api/policy", "{not json", content_type="application/json")
    assert response.status_code == 400
    deep = "[" * 5000 + "]" * 5000
    assert api.post("/api/check", deep, content_type="application/json").status_code == 400
    nested: dict = {}
    cur = nested
    for _ in range(100):
        cur["a"] = {}
        cur = cur["a"]
    body = {"tool": "x", "args": nested}
    assert api.post("/api/check", body, content_type="application/json").status_code in (400, 422)


def test_openapi_docs_list_every_endpoint(client):
    schema = client.get("/api/openapi.json").json()
    paths = schema["paths"]
    for path, method in [
        ("/api/traces", "post"),
        ("/api/traces/{trace_id}", "get"),
        ("/api/traces/{trace_id}/raw", "get"),
        ("/api/runs", "get"),
        ("/api/runs/{run_id}", "get"),
        ("/api/runs/{run_id}/steps", "get"),
        ("/api/runs/{run_id}/analyze", "post"),
        ("/api/policy", "get"),
        ("/api/policy", "put"),
        ("/api/check", "post"),
    ]:
        assert method in paths[path], (path, method)
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    html = docs.content.decode()
    # Swagger UI comes from our static files: nothing may load from a CDN.
    assert "/static/ninja/swagger-ui-bundle" in html
    assert "cdn." not in html and "unpkg" not in html
    assert json.dumps(schema)


@pytest.mark.parametrize("param", ["q", "tool", "detector", "format"])
def test_a_nul_in_a_query_parameter_is_no_server_error(api, param):
    response = api.get(f"/api/runs?{param}=a%00b")
    assert response.status_code == 200
    assert response.json()["items"] == []


def test_a_nul_in_the_upload_name_is_kept_readable(api):
    response = api.post("/api/traces?name=a%00b.jsonl", b'{"type":"user","text":"hi"}\n',
                        content_type="application/octet-stream")  # fmt: skip
    assert response.status_code == 202
    trace = Trace.objects.get(pk=response.json()["trace_id"])
    assert trace.name == "a\ufffdb.jsonl"
