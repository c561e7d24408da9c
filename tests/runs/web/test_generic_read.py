"""`format=generic` on the upload page and `POST /api/traces`, and the run page's notice that
a run was read heuristically. The trace is built here (issue 12 part 4), not a real file."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from runs.models import Run, Trace

pytestmark = pytest.mark.django_db

UNKNOWN = json.dumps(
    {
        "data": {
            "conversation": [
                {"role": "user", "content": "list the files"},
                {"toolCallId": "a1", "tool": "shell", "parameters": {"cmd": "ls"}},
                {"toolCallId": "a1", "output": "README.md"},
                {"toolCallId": "zz", "output": "an answer to nothing"},
            ]
        }
    }
).encode()


def test_the_api_accepts_format_generic(api, project, process):
    response = api.post(
        "/api/traces?format=generic&name=acme.json",
        UNKNOWN,
        content_type="application/octet-stream",
    )
    assert response.status_code == 202, response.content
    trace = Trace.objects.get(pk=response.json()["trace_id"])
    assert trace.declared_format == "generic"  # `format` is set once it is imported


def test_the_upload_page_offers_and_accepts_generic(client_in, project):
    page = client_in.get(reverse("runs:upload")).content.decode()
    assert '<option value="generic">' in page
    response = client_in.post(
        reverse("runs:upload"),
        {"files": [SimpleUploadedFile("acme.json", UNKNOWN)], "project": project.slug,
         "format": "generic"},
    )  # fmt: skip
    assert response.status_code in (200, 302)
    assert Trace.objects.get(project=project, name="acme.json").declared_format == "generic"


def test_the_run_page_says_it_was_read_heuristically(client_in, project, process):
    trace = process(project, UNKNOWN, name="acme.json", format="generic")
    assert trace.status == "analyzed", trace.error
    run = Run.objects.get(trace=trace)
    assert run.metadata["read_by"]["unplaced"] == 1  # the result for "zz"
    html = client_in.get(run.get_absolute_url()).content.decode()
    assert (
        "Read heuristically: calls from tool+parameters, results linked by toolCallId; "
        "1 object could not be placed."
    ) in html
