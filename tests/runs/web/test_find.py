"""Find in a run: the steps whose tool, arguments, result or text hold the query."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.models import Step
from runs.web import find
from tests.helpers import call, message, native_jsonl


def _run(process, project):
    trace = native_jsonl(
        message("user", "Fix the flaky <script>alert(1)</script> test"),
        call("read_file", {"path": "src/Payments.py"}, "def charge(): ..."),
        call("bash", {"command": "pytest -k payments"}, "FAILED test_charge", status="error"),
        call("read_file", {"path": "README.md"}, "nothing about it"),
        message("assistant", "The PAYMENTS module needs a retry."),
    )
    return process(project, trace).runs.get()


def test_finds_a_query_in_arguments_results_and_text_whatever_its_case(client_in, project, process):
    run = _run(process, project)
    html = client_in.get(reverse("runs:find", args=[run.pk]), {"q": "payments"}).content.decode()
    assert "3 steps" in html  # two arguments and a message say it; the user did not
    for seq in (1, 2, 4):
        assert reverse("runs:step", args=[run.pk, seq]) in html
    assert "<mark>Payments</mark>" in html and "<mark>PAYMENTS</mark>" in html
    assert reverse("runs:step", args=[run.pk, 3]) not in html


def test_finds_a_tool_name_and_says_when_nothing_matches(client_in, project, process):
    run = _run(process, project)
    url = reverse("runs:find", args=[run.pk])
    html = client_in.get(url, {"q": "READ_FILE"}).content.decode()
    assert "2 steps" in html and "· tool" in html
    assert "<mark>read_file</mark> {&quot;path&quot;: &quot;README.md&quot;}" in html
    html = client_in.get(url, {"q": "charge"}).content.decode()
    assert "2 steps" in html and html.count("· result") == 2
    assert "No step of this run holds that text" in client_in.get(url, {"q": "zebra"}).text


def test_trace_text_and_the_query_are_escaped(client_in, project, process):
    run = _run(process, project)
    url = reverse("runs:find", args=[run.pk])
    html = client_in.get(url, {"q": "<script>"}).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<mark>&lt;script&gt;</mark>alert(1)" in html


def test_like_wildcards_and_nul_are_searched_as_text(client_in, project, process):
    run = _run(process, project)
    url = reverse("runs:find", args=[run.pk])
    assert "No step of this run holds that text" in client_in.get(url, {"q": "%"}).text
    response = client_in.get(url, {"q": "pay\x00ments"})
    assert response.status_code == 200 and "3 steps" in response.text


def test_lists_at_most_the_first_matches_and_says_there_are_more(
    client_in, project, process, monkeypatch
):
    monkeypatch.setattr(find, "MAX_MATCHES", 2)
    run = _run(process, project)
    html = client_in.get(reverse("runs:find", args=[run.pk]), {"q": "a"}).content.decode()
    assert "the first 2; narrow the search" in html
    assert html.count('class="find-list__item') == 2


def test_another_project_s_run_is_not_found(client_in, other_project, process):
    run = _run(process, other_project)
    response = client_in.get(reverse("runs:find", args=[run.pk]), {"q": "payments"})
    assert response.status_code == 404


def test_every_run_page_has_the_find_box(client_in, project, process):
    run = _run(process, project)
    html = client_in.get(run.get_absolute_url()).content.decode()
    assert f'action="{reverse("runs:find", args=[run.pk])}"' in html
    assert Step.objects.filter(run=run).count() == 5


def _big_run(process, project, steps=20_000):
    """A run of `steps` more messages (written by PostgreSQL itself: quick), none holding
    'zebra', so a search for it reads them all."""
    from django.db import connection

    run = _run(process, project)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {Step._meta.db_table}
                  (run_id, seq, kind, source_id, parent_id, tool, status, batch_id, text,
                   call_sig, lane)
                SELECT %s, 5 + g, 'message', '', '', '', 'ok', '', repeat('lorem ipsum ', 20),
                       '', ''
                FROM generate_series(1, %s) AS g""",
            [run.pk, steps],
        )
    return run


def _statement_timeout():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def test_a_search_past_its_statement_timeout_is_cut_off_and_says_so(
    client_in, project, process, settings
):
    """A search over a huge run is cancelled by PostgreSQL after LOOPBOARD_FIND_TIMEOUT_MS
    (here 1 ms, where reading 20,000 steps' text takes far longer), and the page says so
    instead of failing or holding the web worker."""
    run = _big_run(process, project)
    before = _statement_timeout()
    settings.LOOPBOARD_FIND_TIMEOUT_MS = 1
    response = client_in.get(reverse("runs:find", args=[run.pk]), {"q": "zebra"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "The search was stopped after 0.001 s, before it finished" in html
    assert "No step of this run holds that text" not in html and "0 steps" not in html
    assert _statement_timeout() == before  # the bound was for that query only
    settings.LOOPBOARD_FIND_TIMEOUT_MS = 0  # no bound: the same search runs to its end
    html = client_in.get(reverse("runs:find", args=[run.pk]), {"q": "zebra"}).content.decode()
    assert "No step of this run holds that text" in html and "stopped after" not in html


def test_the_timeout_is_in_force_for_the_search_query_alone(project, process, settings):
    """The statement the search sends runs under the bound (a pg_sleep put in front of it is
    cancelled), and a cancel raises find.CutOff; the statements after it are unbounded."""
    from django.db import connection

    run = _run(process, project)

    def slow(execute, sql, params, many, context):
        if "LIKE" in sql:
            execute("SELECT pg_sleep(2)", None, many, context)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(slow), pytest.raises(find.CutOff):
        find.find(run, "payments", timeout_ms=50)
    found, more = find.find(run, "payments", timeout_ms=5000)
    assert [m.step.seq for m in found] == [1, 2, 4] and not more
    assert _statement_timeout() == "0"


def test_another_database_error_is_not_taken_for_a_timeout(project, process):
    from django.db import OperationalError, connection

    run = _run(process, project)

    def lost(execute, sql, params, many, context):
        if "LIKE" in sql:
            raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(lost), pytest.raises(OperationalError):
        find.find(run, "payments")
