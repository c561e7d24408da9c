"""One session is one run whatever order its spans come in: the spans an exporter sends
before the span that names the session (often the root, sent last) join the session's run."""

from __future__ import annotations

import pytest

from runs.models import OtlpSpanGroup, Run
from tests.helpers import at_once

from .test_otlp import TRACE_A, TRACE_B, attr, eager, post, request, root_span, to_proto, tool_span

__all__ = ["eager"]  # the autouse fixture: tasks run inline

SESSION = "conversation-42"


def session_root(trace_id: str) -> dict:
    span = root_span(trace_id)
    span["attributes"].append(attr("session.id", SESSION))
    return span


def send(client, key, *spans: dict) -> None:
    assert post(client, key, to_proto(request(*spans))).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_calls_sent_before_the_root_that_names_the_session_join_its_run(client, key, project):
    send(client, key, *[tool_span(TRACE_A, n) for n in range(4)])
    early = Run.objects.get(project=project)  # assembled alone: no root came within the quiet
    assert early.external_id == TRACE_A and early.tool_call_count == 4
    send(client, key, *[tool_span(TRACE_A, n) for n in range(4, 7)], session_root(TRACE_A))
    (run,) = Run.objects.filter(project=project)
    assert run.pk == early.pk  # rebuilt in place
    assert run.external_id == SESSION and run.tool_call_count == 7 and run.verdict == "stop"
    rows = OtlpSpanGroup.objects.filter(project=project)
    assert {(row.trace_id == rows[1].trace_id, row.run_id) for row in rows} == {(True, run.pk)}
    assert not rows.filter(assembled=False).exists()


@pytest.mark.django_db(transaction=True)
def test_spans_of_a_trace_the_session_took_that_come_later_still_join_it(client, key, project):
    send(client, key, tool_span(TRACE_A, 0))
    send(client, key, session_root(TRACE_A))
    send(client, key, tool_span(TRACE_A, 1, query="other"))  # late, without the session
    (run,) = Run.objects.filter(project=project)
    assert run.external_id == SESSION and run.tool_call_count == 2


@pytest.mark.django_db(transaction=True)
def test_two_traces_of_one_session_built_apart_become_one_run(client, key, project):
    send(client, key, session_root(TRACE_A), tool_span(TRACE_A, 0))
    send(client, key, *[tool_span(TRACE_B, n, query="b") for n in range(2)])
    assert Run.objects.filter(project=project).count() == 2
    send(client, key, session_root(TRACE_B))
    (run,) = Run.objects.filter(project=project)  # the run of TRACE_B alone is gone
    assert run.external_id == SESSION and run.tool_call_count == 3
    assert set(OtlpSpanGroup.objects.values_list("run_id", flat=True)) == {run.pk}


@pytest.mark.django_db(transaction=True)
def test_other_traces_in_the_project_stay_their_own_runs(client, key, project):
    send(client, key, tool_span(TRACE_B, 0), root_span(TRACE_B))
    send(client, key, tool_span(TRACE_A, 0))
    send(client, key, session_root(TRACE_A))
    runs = dict(Run.objects.filter(project=project).values_list("external_id", "tool_call_count"))
    assert runs == {TRACE_B: 1, SESSION: 1}


@pytest.mark.django_db(transaction=True)
def test_a_root_that_names_the_session_first_still_takes_the_later_spans(client, key, project):
    send(client, key, session_root(TRACE_A), tool_span(TRACE_A, 0))
    send(client, key, tool_span(TRACE_A, 1, query="other"))
    (run,) = Run.objects.filter(project=project)
    assert run.external_id == SESSION and run.tool_call_count == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_the_calls_and_the_root_that_names_the_session_at_once_make_one_run(key, project, attempt):
    """The calls of a trace and its session-naming root arrive on two connections at the same
    moment; each request is filed and assembled inline (eager tasks): one run, every call."""
    from django.test import Client

    trace_id = f"{attempt + 1:032x}"
    bodies = [
        to_proto(request(*[tool_span(trace_id, n) for n in range(5)])),
        to_proto(request(tool_span(trace_id, 5), session_root(trace_id))),
    ]
    statuses = at_once(lambda body: post(Client(), key, body).status_code, bodies)
    assert statuses == [200, 200]
    (run,) = Run.objects.filter(project=project)
    assert run.external_id == SESSION and run.tool_call_count == 6
    assert not OtlpSpanGroup.objects.filter(assembled=False).exists()
