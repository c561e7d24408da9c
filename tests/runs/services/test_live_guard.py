"""Live runs as a hostile or careless client meets them: values cut like imported ones,
session ids a URL cannot carry, a read key asking for checks, and the guard's own refusal
handed back as a tool result (against the real PostgreSQL and the API)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

FAILING = {"tool": "Bash", "args": {"command": "make test"}, "result": "Error: exit 2"}


def _fail(project, session: str, times: int) -> None:
    from runs.services import live

    for i in range(times):
        live.append_steps(project, session, [{**FAILING, "status": "error", "id": f"f{i}"}])


def test_live_appends_store_values_cut_like_imported_ones(project):
    from runs.importers.reading import DEFAULT_LIMITS
    from runs.models import Run
    from runs.services import live

    limit = DEFAULT_LIMITS.max_value_chars
    huge = "x" * (limit + 5000)
    deep: object = "leaf"
    for _ in range(DEFAULT_LIMITS.max_depth + 10):
        deep = [deep]
    live.append_steps(
        project,
        "big-values",
        [
            {"tool": "write", "args": {"content": huge}, "result": {"nested": deep}, "id": "a"},
            {"role": "assistant", "text": huge, "id": "b"},
        ],
    )
    run = Run.objects.get(external_id="big-values")
    call, message = run.steps.order_by("seq")
    content = call.args["content"]
    assert content.startswith("x" * limit) and content.endswith("…[truncated 5000 chars]")
    assert len(content) < limit + 100
    assert "nested deeper than" in json.dumps(call.result)
    assert len(message.text) < limit + 100 and message.text.endswith("…[truncated 5000 chars]")


@pytest.mark.parametrize("session", ["a/b", ".", "..", "x\\y", "tab\there", "", " . "])
def test_a_live_session_id_holding_slash_or_dots_is_refused_at_open(project, session):
    from runs.models import Run
    from runs.services import live

    with pytest.raises(live.UnusableSessionId):
        live.open_run(project, session)
    assert not Run.objects.filter(external_id=session).exists()


def test_the_api_refuses_an_unusable_session_id_with_a_clear_400(project, client, key):
    from runs.models import Run

    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    for session in ("agent/run-1", "..", "."):
        answer = client.post("/api/live/runs", {"external_id": session}, "application/json")
        assert answer.status_code == 400, answer.content
        detail = answer.json()["detail"]
        assert detail.startswith("external_id: ") and repr(session) in detail
    assert not Run.objects.exists()
    # what stays usable: any other character, percent-encoded in the URL by the client
    usable = "sess:2026-12-02 #1 ?x=%41 …"
    opened = client.post("/api/live/runs", {"external_id": usable}, "application/json")
    assert opened.status_code == 200
    from loopboard.cli.live_client import LiveClient

    path = LiveClient.run_path(usable)
    steps = {"steps": [{"tool": "read", "args": {"p": 1}}]}
    assert client.post(f"{path}/steps", steps, "application/json").status_code == 200
    assert client.get(path).json()["steps"] == 1
    assert client.post(f"{path}/end", {}, "application/json").status_code == 200


# Session ids an agent or a hostile client may send: each is usable or refused, none between.
ODD_SESSION_IDS = [
    "a/b", "/", ".", "..", "./x", "x/..", "a\\b", "nul\x00", "del\x7f", "nel\x85", "x" * 256,
    "s\ud800", "a%2Fb", "%2e%2e", "...", ". .", "sp ace", "q?x#y", ";semi", "a+b", "~",
    "uni\u2028x", "zw\u200b", "e\u0301", "\ufffd", "\U0001f600",
]  # fmt: skip


@pytest.mark.parametrize("session", ODD_SESSION_IDS)
def test_a_live_session_id_is_usable_in_every_later_call_or_refused_at_open(
    project, client, key, session
):
    """Opened means every later call (append, read, check, end) finds the run through its
    percent-encoded URL; otherwise the open is a clear 4xx and no run is made."""
    from loopboard.cli.live_client import LiveClient
    from runs.models import Run

    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    body = json.dumps({"external_id": session}).encode()  # a lone surrogate as \\ud800
    opened = client.post("/api/live/runs", body, "application/json")
    if opened.status_code != 200:
        assert opened.status_code in (400, 422), opened.content
        assert opened.json()["detail"].startswith(("external_id: ", "invalid request: "))
        assert not Run.objects.exists()
        return
    path = LiveClient.run_path(session)
    steps = {"steps": [{"tool": "read", "args": {"p": 1}, "id": "s1"}]}
    answers = [
        client.post(f"{path}/steps", steps, "application/json"),
        client.get(path),
        client.post(f"{path}/check", {"tool": "read", "args": {"p": 1}}, "application/json"),
        client.post(f"{path}/end", {}, "application/json"),
    ]
    assert [a.status_code for a in answers] == [200] * 4, [a.content for a in answers]
    assert answers[1].json()["run_id"] == opened.json()["run_id"] == Run.objects.get().pk
    assert answers[1].json()["steps"] == 1


def test_a_live_runs_metadata_is_cut_like_imported_values(project, client, key):
    from runs.importers.reading import DEFAULT_LIMITS
    from runs.models import Run

    limit = DEFAULT_LIMITS.max_value_chars
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    body = {"external_id": "big-meta", "metadata": {"prompt": "p" * (limit + 7), "n": 1}}
    assert client.post("/api/live/runs", body, "application/json").status_code == 200
    metadata = Run.objects.get(external_id="big-meta").metadata
    assert metadata["n"] == 1 and metadata["prompt"].startswith("p" * limit)
    assert (
        metadata["prompt"].endswith("…[truncated 7 chars]")
        and len(metadata["prompt"]) < limit + 100
    )


def test_a_read_key_checks_but_cannot_write_stopped_calls(project, client):
    from runs.models import ApiKey, StoppedCall

    _fail(project, "read-only", 4)
    read_key = ApiKey.issue(project, "reader", scope=ApiKey.Scope.READ)[1]
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {read_key}"
    body = {"tool": "Bash", "args": FAILING["args"]}
    answer = client.post("/api/live/runs/read-only/check", body, "application/json")
    assert answer.status_code == 200 and answer.json()["verdict"] == "stop"
    assert not StoppedCall.objects.exists()  # the answer, and nothing written
    steps = {"steps": [{**FAILING, "status": "error"}]}
    refused = client.post("/api/live/runs/read-only/steps", steps, "application/json")
    assert refused.status_code == 403 and "ingest" in refused.json()["detail"]

    ingest_key = ApiKey.issue(project, "agent", scope=ApiKey.Scope.INGEST)[1]
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {ingest_key}"
    assert (
        client.post("/api/live/runs/read-only/check", body, "application/json").status_code == 200
    )
    assert StoppedCall.objects.count() == 1


def test_the_guards_refusal_handed_back_as_a_result_is_the_guards_step_not_a_repeat(project):
    from runs.models import Run, Step
    from runs.services import live

    _fail(project, "refused", 4)
    answer = live.check_live(project, "refused", "Bash", FAILING["args"])
    assert answer.verdict == "stop" and answer.message.startswith(live.GUARD_MARK)
    run = Run.objects.get(external_id="refused")
    failures_before = run.steps.filter(kind="tool_call", status="error").count()
    # the agent's framework (or a hook) reports the refused call with the refusal as result
    refusal = {**FAILING, "result": answer.message, "status": "error", "id": "refused-1"}
    appended = live.append_steps(project, "refused", [refusal])
    [step] = Step.objects.filter(run=run, seq=appended.seqs[0])
    assert step.kind == "system" and step.tool == "" and step.result is None
    assert step.text.startswith("Bash not run: [loopboard guard]")
    assert run.steps.filter(kind="tool_call", status="error").count() == failures_before
    assert appended.findings == []  # nothing counted, nothing fired on it

    # the same words from a tool the guard never stopped are that tool's result
    echo = {"tool": "echo", "args": {"s": 1}, "result": answer.message, "id": "echo-1"}
    [seq] = live.append_steps(project, "refused", [echo]).seqs
    assert Step.objects.get(run=run, seq=seq).kind == "tool_call"
