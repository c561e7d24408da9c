"""Policy services: drafts from the Tuning forms, affected runs, the change summary."""

import pytest

from loopboard.celery import app
from runs import task_names
from runs.models import ToolPolicy
from runs.services import policy
from runs.web import forms
from tests.helpers import looping_trace

pytestmark = pytest.mark.django_db


def test_a_draft_keeps_the_fields_the_form_does_not_edit(project):
    ToolPolicy.objects.create(project=project, tool="bash", warn=4, volatile=["cursor"])
    defaults, rows = forms.forms_for(
        project,
        {
            "t-TOTAL_FORMS": "1",
            "t-INITIAL_FORMS": "0",
            "t-0-tool": "bash",
            "t-0-warn": "6",
            "t-0-polling": "yes",
        },
    )
    draft, errors = forms.draft_policy(project, defaults, rows)
    assert errors == []
    assert draft["tools"]["bash"] == {"volatile": ["cursor"], "warn": 6, "polling": True}


def test_affected_runs_follow_the_changed_tool_rows(project, process):
    a = process(project, looping_trace(3, tool="mcp__x__bash"), name="a.jsonl").runs.get()
    process(project, looping_trace(3, tool="search"), name="b.jsonl")
    before = {"defaults": {}, "tools": {}}
    after = {"defaults": {}, "tools": {"mcp__*__bash": {"mutating": True}}}
    assert list(policy.affected_runs(project, before, after)) == [a]
    assert (
        policy.affected_runs(project, before, {"defaults": {"warn": 4}, "tools": {}}).count() == 2
    )
    assert not policy.affected_runs(project, before, before).exists()


def test_describe_lists_each_change():
    text = policy.describe(
        {"defaults": {"warn": 3}, "tools": {"a": {"warn": 2}}},
        {"defaults": {"warn": 4}, "tools": {"b": {"stop": 9}}},
    )
    assert "defaults.warn: 3 → 4" in text and "removed tool row a" in text
    assert "added tool row b" in text


def test_policy_rows_make_the_project_policy(project):
    ToolPolicy.objects.create(project=project, tool="", warn=4, stop=7, scope="run")
    ToolPolicy.objects.create(project=project, tool="mcp__*__bash", mutating=True, max_repeats=2)
    assert policy.current(project) == {
        "defaults": {"scope": "run", "warn": 4, "stop": 7},
        "tools": {"mcp__*__bash": {"mutating": True, "max_repeats": 2}},
    }
    engine = policy.engine_policy(project)
    assert engine.to_dict()["tools"]["mcp__*__bash"]["max_repeats"] == 2


def test_a_policy_change_queues_its_reanalyses_on_the_bulk_queue(
    project, process, django_capture_on_commit_callbacks
):
    process(project, looping_trace(3))
    with django_capture_on_commit_callbacks() as callbacks:
        policy.save_policy(project, {"defaults": {"warn": 2}, "tools": {}}, None)
    [callback] = callbacks  # one message for all the runs: a batch, then the rest
    name = callback.func.__self__.task
    assert name == task_names.REANALYZE_RUNS
    assert app.amqp.router.route({}, name)["queue"].name == "bulk"
