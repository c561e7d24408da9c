"""Requests a red team answered with a 500 now get a clear 4xx with `{"detail": ...}` naming
the field, or work; poisoned OTLP values end in a run or a failed trace with a real error."""

from __future__ import annotations

import json

import pytest

from loopboard.celery import app
from runs.models import AlertRule, Run, Trace
from tests.helpers import looping_trace

from .test_otlp import TRACE_A, request, root_span, tool_span

pytestmark = pytest.mark.django_db


def send(api, method: str, url: str, body) -> object:
    return getattr(api, method)(url, json.dumps(body), content_type="application/json")


def test_sort_waste_after_1e400_is_a_page_not_a_500(client_in, project, process):
    process(project, looping_trace(6), name="stuck.jsonl")
    for sort in ("waste", "score", "new"):
        for after in ("1e400~1", "-1e400~1", "nan~1", "1e30~1", "5~99999999999999999999999"):
            response = client_in.get("/", {"sort": sort, "after": after})
            assert response.status_code == 200, (sort, after, response.status_code)
    # a bad cursor is ignored: the first page, with the run on it
    assert b"stuck" in client_in.get("/", {"sort": "waste", "after": "1e400~1"}).content


def test_put_policy_with_a_nul_in_a_tool_key_is_a_422(api):
    response = send(api, "put", "/api/policy", {"tools": {"web\x00search": {"warn": 3}}})
    assert response.status_code == 422, response.content
    assert "tool" in response.json()["detail"]


def test_labels_since_a_zone_offset_postgres_cannot_hold_works(api, project, process):
    response = api.get("/api/labels", {"since": "2026-01-01T00:00:00+20:16"})
    assert response.status_code == 200, response.content
    assert b"".join(response.streaming_content) == b""


def test_labels_since_out_of_range_once_in_utc_is_a_400_before_streaming(api):
    response = api.get("/api/labels", {"since": "0001-01-01T00:00:00+20:16"})
    assert response.status_code in (400, 422), response.status_code
    assert "since" in response.json()["detail"]


def _rule(api, **values) -> dict:
    body = {"name": "digest", "kind": "digest", "hour": 9, **values}
    response = send(api, "post", "/api/alert-rules", body)
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize("field", ["hour", "window_minutes", "max_per_hour", "severity"])
def test_patch_alert_rule_with_a_null_field_is_a_422_naming_it(api, field):
    rule = _rule(api)
    response = send(api, "patch", f"/api/alert-rules/{rule['id']}", {field: None})
    assert response.status_code == 422, response.content
    assert field in response.json()["detail"]
    assert AlertRule.objects.get(pk=rule["id"]).hour == 9


def test_post_alert_rule_with_a_null_hour_is_a_422_naming_it(api):
    body = {"name": "d", "kind": "digest", "hour": None}
    response = send(api, "post", "/api/alert-rules", body)
    assert response.status_code == 422, response.content
    assert "hour" in json.dumps(response.json()["detail"])
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    "url",
    ["http://example.com:99999/x", "http://example.com:port/x", "http://[::1/x", "http://[zz]/x",
     "http://ex]ample.com/x"],
)  # fmt: skip
def test_saving_a_webhook_url_with_a_bad_port_or_bracket_is_a_422(api, url):
    body = {"name": "ops", "kind": "webhook", "url": url}
    response = send(api, "post", "/api/channels", body)
    assert response.status_code == 422, response.content
    assert "URL" in response.json()["detail"]


@pytest.fixture
def otlp_eager(settings):
    settings.LOOPBOARD_OTLP_QUIET_SECONDS = 0
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def _post_logs(client, key, body: bytes):
    return client.post(
        "/v1/logs", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def _logs_body(value_json: str) -> bytes:
    """An OTLP/JSON logs request whose one record's body is `value_json` (raw JSON text)."""
    record = (
        f'{{"timeUnixNano": "1700000000000000000", "traceId": "{TRACE_A}",'
        f' "spanId": "{"b" * 16}", "eventName": "gen_ai.tool.message", "body": {value_json}}}'
    )
    return (
        '{"resourceLogs": [{"resource": {"attributes": []}, "scopeLogs": [{"logRecords": ['
        + record
        + "]}]}]}"
    ).encode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "value",
    ['{"doubleValue": 1e400}', '{"stringValue": "a\\ud800b"}',
     '{"kvlistValue": {"values": [{"key": "\\udc00", "value": {"doubleValue": 1e400}}]}}'],
)  # fmt: skip
def test_v1_logs_with_1e400_or_a_lone_surrogate_is_no_500(client, key, project, otlp_eager, value):
    response = _post_logs(client, key, _logs_body(value))
    assert response.status_code in (200, 400), response.content
    for trace in Trace.objects.filter(project=project):
        assert trace.status != "failed" or trace.error, "a failed trace says why"


SURROGATE_KEYS = {  # gen_ai.tool.call.arguments as JSON text, and as an OTLP key-value list
    "json text": {"stringValue": '{"q\\ud800": "same", "\\udfff": {"\\ud83d": 1}}'},
    "kvlist": {"kvlistValue": {"values": [
        {"key": "q\ud800", "value": {"stringValue": "same"}},
        {"key": "\udfff", "value": {"kvlistValue": {"values": [
            {"key": "\ud83d", "value": {"intValue": "1"}}]}}}]}},
}  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("form", SURROGATE_KEYS)
def test_a_lone_surrogate_key_in_tool_call_arguments_still_makes_its_run(
    client, key, project, otlp_eager, form
):
    calls = [tool_span(TRACE_A, n) for n in range(6)]
    for call in calls:
        for item in call["attributes"]:
            if item["key"] == "gen_ai.tool.call.arguments":
                item["value"] = SURROGATE_KEYS[form]
    body = json.dumps(request(root_span(TRACE_A), *calls))  # the keys as \ud800 escapes
    response = client.post(
        "/v1/traces", body.encode(), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )  # fmt: skip
    assert response.status_code == 200, response.content
    trace = Trace.objects.get(project=project, source="otlp")
    assert trace.status == "analyzed", trace.error
    run = Run.objects.get(project=project, external_id=TRACE_A)
    assert run.verdict == "stop"  # six identical calls: a loop, found through the bad keys
    args = run.steps.filter(kind="tool_call").order_by("seq").last().args
    if form == "kvlist":
        assert args == {"q\ufffd": "same", "\ufffd": {"\ufffd": 1}}
    else:  # JSON text holding a lone surrogate is not JSON to the engine: kept as text
        assert args == SURROGATE_KEYS[form]["stringValue"]


def test_a_labels_stream_that_fails_partway_ends_with_an_error_line_and_is_logged(
    api, monkeypatch, caplog
):
    """A fault injected after the first row (a real one is a lost connection mid-stream)."""
    from runs.services import labels

    def export(project, since=None, until=None):
        yield {"id": 1, "verdict": "real"}
        raise RuntimeError("connection lost mid-export")

    monkeypatch.setattr(labels, "export", export)
    response = api.get("/api/labels")
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).splitlines()
    assert json.loads(lines[0]) == {"id": 1, "verdict": "real"}
    assert "error" in json.loads(lines[-1]) and len(lines) == 2
    assert any("labels export failed partway" in r.getMessage() for r in caplog.records)


def test_a_labels_query_that_fails_answers_json_not_the_html_500_page(api, monkeypatch):
    from django.db import DataError

    from runs.services import labels

    def export(project, since=None, until=None):
        raise DataError("time zone displacement out of range")
        yield  # a generator, as the real one

    monkeypatch.setattr(labels, "export", export)
    response = api.get("/api/labels")
    assert response.status_code == 500 and not response.streaming
    assert response["Content-Type"].startswith("application/json") and response.json()["detail"]


@pytest.mark.parametrize(
    "host",
    ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::7f00:1]", "[64:ff9b::a00:1]",
     "[2002:7f00:1::]", "[2002:c0a8:101::1]", "[64:ff9b:1::7f00:1]", "[::127.0.0.1]"],
)  # fmt: skip
def test_ipv4_in_ipv6_forms_of_private_addresses_are_refused_for_webhooks(api, settings, host):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    body = {"name": "x", "kind": "webhook", "url": f"http://{host}/hook"}
    response = send(api, "post", "/api/channels", body)
    assert response.status_code == 422, response.content
    assert "private address" in response.json()["detail"]


def test_a_public_nat64_address_is_still_accepted_for_webhooks(api, settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = False
    body = {"name": "x", "kind": "webhook", "url": "http://[64:ff9b::808:808]/hook"}  # 8.8.8.8
    assert send(api, "post", "/api/channels", body).status_code == 201


LOG_RECORDS = {  # whole records: a time of 1e400, a session id with a lone surrogate
    "time 1e400": '{"timeUnixNano": 1e400, "eventName": "x", "body": {"stringValue": "ok"}}',
    "surrogate session": (
        '{"timeUnixNano": "1700000000000000000", "eventName": "claude_code.tool_result",'
        ' "attributes": [{"key": "session.id", "value": {"stringValue": "s\\ud800"}},'
        ' {"key": "tool_name", "value": {"stringValue": "Bash\\ud800"}}],'
        ' "body": {"stringValue": "ok\\ud800"}}'
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", LOG_RECORDS)
def test_v1_logs_records_with_1e400_or_a_lone_surrogate_are_taken_not_a_500(
    client, key, project, otlp_eager, case
):
    body = (
        '{"resourceLogs": [{"resource": {"attributes": []}, "scopeLogs": [{"logRecords": ['
        + LOG_RECORDS[case]
        + "]}]}]}"
    ).encode()
    response = _post_logs(client, key, body)
    assert response.status_code == 200, response.content
    trace = Trace.objects.get(project=project, source="otlp")
    if case == "surrogate session":  # a run, its names cleaned
        assert trace.status == "analyzed", trace.error
        run = Run.objects.get(project=project)
        assert run.external_id == "s\ufffd" and run.tools == ["Bash\ufffd"]
    else:  # no step in it: failed, saying so
        assert trace.status == "failed" and "hold no agent step" in trace.error


def test_a_nul_in_an_alert_rule_or_channel_name_is_stored_cleaned_not_a_500(api):
    rule = send(api, "post", "/api/alert-rules",
                {"name": "d\x00", "kind": "run", "tools": ["web\x00*"]})  # fmt: skip
    assert rule.status_code == 201, rule.content
    assert rule.json()["name"] == "d\ufffd" and rule.json()["tools"] == ["web\ufffd*"]
    channel = send(api, "post", "/api/channels",
                   {"name": "ops\x00", "kind": "email", "recipients": ["a@example.com"]})  # fmt: skip
    assert channel.status_code == 201, channel.content
    assert channel.json()["name"] == "ops\ufffd"
