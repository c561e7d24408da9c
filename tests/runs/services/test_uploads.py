"""Upload acceptance: the upload page, `POST /api/traces` and `manage.py ingest` refuse the
same bad file with the same words and status, and store the same good file as one trace."""

from __future__ import annotations

import io
from io import StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from runs.models import ApiKey, Trace
from runs.services import uploads

pytestmark = pytest.mark.django_db

LIMIT = 64
GOOD = b'{"type": "tool_call", "tool": "t", "args": {}, "result": 1}\n'


@pytest.fixture
def small_limit(settings):
    settings.MAX_UPLOAD_BYTES = LIMIT


def page(client_in, project, data: bytes, name: str = "bad.jsonl", fmt: str = ""):
    files = SimpleUploadedFile(name, data)
    answer = client_in.post(
        reverse("runs:upload"), {"project": project.slug, "files": files, "format": fmt}
    )
    return answer.status_code, answer.content.decode()


def api(client, project, data: bytes, name: str = "bad.jsonl"):
    key = ApiKey.issue(project, "ci", scope=ApiKey.Scope.INGEST)[1]
    answer = client.post(
        f"/api/traces?name={name}", data, "application/octet-stream",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )  # fmt: skip
    return answer.status_code, answer.json()


def command(tmp_path, project, data: bytes, name: str = "bad.jsonl"):
    path = tmp_path / name
    path.write_bytes(data)
    out, err = StringIO(), StringIO()
    try:
        call_command("ingest", str(path), "--project", project.slug, stdout=out, stderr=err)
    except CommandError as exc:
        return exc, err.getvalue()
    return None, out.getvalue()


def refusal(data: bytes, name: str = "bad.jsonl", **kwargs) -> uploads.UploadRefused:
    with pytest.raises(uploads.UploadRefused) as refused:
        uploads.accept(None, data, name=name, **kwargs)  # type: ignore[arg-type]
    return refused.value


def test_an_empty_file_is_refused_alike_by_the_page_the_api_and_the_command(
    client_in, project, tmp_path
):
    expected = refusal(b"")
    assert (expected.status, expected.message) == (400, "bad.jsonl: empty file; nothing to import")
    status, html = page(client_in, project, b"")
    assert status == 400 and expected.message in html
    status, body = api(client_in, project, b"")
    assert (status, body["detail"]) == (400, expected.message)
    failed, err = command(tmp_path, project, b"")
    assert failed is not None and expected.message in err
    assert not Trace.objects.exists()


def test_a_file_over_the_limit_is_a_413_alike_by_the_page_the_api_and_the_command(
    client_in, project, tmp_path, small_limit
):
    data = b"x" * (LIMIT + 1)
    expected = refusal(data)
    assert expected.status == 413
    assert expected.message == f"bad.jsonl: {LIMIT + 1} bytes is over the limit of {LIMIT} bytes"
    status, html = page(client_in, project, data)
    assert status == 400 and expected.message in html  # the page's form answers 400
    # The API's middleware refuses the body before the view reads it, in the same terms.
    status, body = api(client_in, project, data)
    assert status == 413 and body["detail"].endswith(f"is over the limit of {LIMIT} bytes")
    failed, err = command(tmp_path, project, data)
    assert failed is not None and expected.message in err
    assert not Trace.objects.exists()


def test_a_stream_of_unknown_size_is_read_one_byte_past_the_limit_at_most(small_limit):
    stream = io.BytesIO(b"x" * (LIMIT * 10))
    refused = refusal(stream)  # type: ignore[arg-type]
    assert refused.status == 413 and stream.tell() == LIMIT + 1
    assert refused.message == f"bad.jsonl is over the limit of {LIMIT} bytes"


def test_a_known_size_over_the_limit_is_refused_before_reading(small_limit):
    stream = io.BytesIO(b"x" * (LIMIT * 10))
    assert refusal(stream, size=LIMIT * 10).status == 413  # type: ignore[arg-type]
    assert stream.tell() == 0


def test_an_unknown_format_is_refused_by_the_page_as_by_the_service(client_in, project):
    expected = refusal(GOOD, format="nope")
    assert expected.status == 400 and "unknown format 'nope'" in expected.message
    status, html = page(client_in, project, GOOD, fmt="nope")
    assert status == 400 and "unknown format &#x27;nope&#x27;" in html


def test_the_same_good_file_through_all_three_is_one_trace(client_in, project, tmp_path):
    status, _ = page(client_in, project, GOOD, name="a.jsonl")
    assert status == 200
    status, body = api(client_in, project, GOOD, name="a.jsonl")
    assert status == 202 and body["duplicate"] is True
    failed, out = command(tmp_path, project, GOOD, name="a.jsonl")
    assert failed is None and "already stored" in out
    [trace] = Trace.objects.all()
    assert (trace.name, trace.source, trace.size) == ("a.jsonl", "upload", len(GOOD))
