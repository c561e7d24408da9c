"""Lone surrogates anywhere in what a span carries (here an object key of the call's
arguments) are cleaned on the way in, so the trace still becomes its run."""

from __future__ import annotations

import pytest

from runs.models import Run, Trace

from .test_otlp import TRACE_A, eager, post, request, root_span, span, to_proto

__all__ = ["eager"]


@pytest.mark.django_db(transaction=True)
def test_a_lone_surrogate_object_key_in_the_arguments_still_makes_a_run(client, key, project):
    call = span(
        TRACE_A, "1" * 16, "a" * 16, "execute_tool read_file", 1,
        gen_ai__operation__name="execute_tool", gen_ai__tool__name="read_file",
        gen_ai__tool__call__arguments='{"\\ud800path": "a.py", "n": {"\\udfff": 1}}',
        gen_ai__tool__call__result="nothing",
    )  # fmt: skip
    assert post(client, key, to_proto(request(call, root_span(TRACE_A)))).status_code == 200
    run = Run.objects.get(project=project)
    (step,) = run.steps.filter(kind="tool_call")
    assert step.tool == "read_file" and step.result == "nothing"
    # kept as the JSON text it came as (orjson refuses an escaped lone surrogate): no
    # character PostgreSQL cannot hold was stored
    assert "\\ud800path" in str(step.args)
    assert set(Trace.objects.filter(project=project).values_list("status", flat=True)) == {
        "analyzed"
    }
