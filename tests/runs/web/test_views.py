"""Pages: login required, upload, list, detail, htmx partials, escaping."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from runs.models import Trace
from runs.services import ingest
from runs.web import timeline
from tests.helpers import call, looping_trace, message, native_jsonl

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["runs:list", "runs:upload"])
def test_pages_need_a_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_run_detail_needs_a_login(client, project, process):
    run = process(project, looping_trace()).runs.get()
    response = client.get(run.get_absolute_url())
    assert response.status_code == 302


def test_runs_list_shows_the_runs_with_their_verdicts(client_in, project, process):
    process(project, looping_trace(5), name="stuck.jsonl")
    response = client_in.get(reverse("runs:list"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "stuck.jsonl" in html
    assert "badge--stop" in html


def test_runs_list_hides_other_projects(client_in, project, other_project, process):
    process(other_project, looping_trace(5), name="secret-run.jsonl")
    html = client_in.get(reverse("runs:list")).content.decode()
    assert "secret-run.jsonl" not in html


def test_another_projects_run_is_not_found(client_in, other_project, process):
    run = process(other_project, looping_trace()).runs.get()
    assert client_in.get(run.get_absolute_url()).status_code == 404


def test_run_page_folds_repeated_calls_into_one_band_with_their_count(client_in, project, process):
    run = process(project, looping_trace(4)).runs.get()
    html = client_in.get(run.get_absolute_url()).content.decode()
    assert 'class="fold fold--repeat' in html
    assert "×4" in html
    assert 'id="step-2"' not in html  # the middle of the band stays folded
    assert "Same call, nothing new" in html  # the finding is listed in plain words


def test_unfolding_a_band_returns_only_its_steps(client_in, project, process):
    run = process(project, looping_trace(4)).runs.get()
    response = client_in.get(
        run.get_absolute_url() + "?from=1&to=4&flat=1", headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert "<html" not in html
    assert html.count("step__tool--repeat") == 4
    assert 'id="step-0"' not in html and 'id="step-5"' not in html


def test_upload_stores_each_file_and_shows_its_status(client_in, project):
    files = [
        SimpleUploadedFile("one.jsonl", looping_trace(3)),
        SimpleUploadedFile("two.jsonl", native_jsonl(call("x", {}, 1))),
    ]
    response = client_in.post(
        reverse("runs:upload"),
        {"files": files, "project": project.slug},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html  # only the partial came back
    assert "one.jsonl" in html and "two.jsonl" in html
    assert Trace.objects.filter(project=project).count() == 2
    assert 'hx-trigger="every 1s"' in html  # polls until done


def test_upload_into_a_foreign_project_is_refused(client_in, project, other_project):
    response = client_in.post(
        reverse("runs:upload"),
        {"files": [SimpleUploadedFile("x.jsonl", looping_trace())], "project": other_project.slug},
    )
    assert response.status_code == 400
    assert not Trace.objects.filter(project=other_project).exists()


def test_trace_status_polling_stops_when_done(client_in, project, process):
    trace = process(project, looping_trace(3))
    response = client_in.get(
        reverse("runs:trace_status", args=[trace.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 286  # htmx: stop polling
    assert "analyzed" in response.content.decode()


def test_trace_status_keeps_polling_while_working(client_in, project):
    trace, _ = ingest.store_trace(project, looping_trace(3), name="w.jsonl")
    response = client_in.get(reverse("runs:trace_status", args=[trace.pk]))
    assert response.status_code == 200
    assert "received" in response.content.decode()


def test_failed_trace_shows_the_error_in_words(client_in, project, process):
    trace = process(project, b"{not json\n", name="bad.jsonl", format="native")
    html = client_in.get(reverse("runs:trace_status", args=[trace.pk])).content.decode()
    assert "failed" in html and "bad.jsonl:1" in html


def test_steps_are_paged_with_an_htmx_partial(client_in, project, process):
    events = [call("tool", {"i": i}, i) for i in range(350)]
    run = process(project, native_jsonl(*events)).runs.get()
    rows = timeline.ROWS_PER_PAGE
    first = client_in.get(run.get_absolute_url()).content.decode()
    assert f'id="step-{rows - 1}"' in first and f'id="step-{rows}"' not in first
    assert f"?from={rows}" in first
    more = client_in.get(run.get_absolute_url() + "?from=300", headers={"HX-Request": "true"})
    html = more.content.decode()
    assert 'id="step-300"' in html and 'id="step-349"' in html and "<html" not in html


def test_trace_content_is_escaped_everywhere(client_in, project, process):
    evil = "<script>alert('x')</script>"
    data = native_jsonl(
        message("user", evil),
        *[call(evil, {"q": evil}, evil) for _ in range(3)],
    )
    trace = process(project, data, name=f"{evil}.jsonl")
    run = trace.runs.get()
    pages = [
        client_in.get(reverse("runs:list")),
        client_in.get(run.get_absolute_url()),
        client_in.get(reverse("runs:upload")),
        client_in.get(reverse("runs:trace_status", args=[trace.pk])),
    ]
    for response in pages:
        html = response.content.decode()
        assert "<script>alert" not in html
    assert "&lt;script&gt;alert" in pages[1].content.decode()


def test_healthz_checks_the_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_timeline_marks_where_each_threshold_was_crossed(client_in, project, process):
    run = process(project, looping_trace(6)).runs.get()  # calls at steps 1..6
    finding = run.findings.get(detector="repeat")
    assert (finding.fired_at, finding.stop_at) == (3, 5)
    folded = client_in.get(run.get_absolute_url()).content.decode()
    assert "warn at #3" in folded and "stop at #5" in folded
    flat = client_in.get(run.get_absolute_url() + "?from=0&to=6&flat=1").content.decode()
    assert "crossed the warn threshold at step #3" in flat
    assert "crossed the stop threshold (5) at step #5" in flat


def test_invalid_turns_are_shown_as_failed_calls(client_in, project, process):
    """A turn with no valid action (status invalid) is marked on the run, tree, ledger and
    step pages, not shown as an ok call."""
    lines = [call("bash", {"cmd": "ls"}, "a.py")]
    lines += [
        call("(format error)", {"actions": n}, "found 2 actions", status="invalid")
        for n in (0, 2, 3)
    ]
    run = process(project, native_jsonl(*lines), name="invalid.jsonl").runs.get()
    # stored as invalid and analyzed so: three invalid turns in a row are one blocker
    assert list(run.steps.values_list("status", flat=True)) == ["ok"] + ["invalid"] * 3
    assert run.verdict == "warn" and run.findings.get().detector == "blocker"
    pages = [run.get_absolute_url(), reverse("runs:tree", args=[run.pk])]
    pages += [reverse("runs:ledger", args=[run.pk]), reverse("runs:step", args=[run.pk, 1])]
    for url in pages:
        html = client_in.get(url).content.decode()
        assert "invalid</span>" in html, url
