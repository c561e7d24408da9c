"""Uploads of files the way tools write them: byte-order marks, UTF-16, CRLF, wrapped records
and late evidence go through `POST /api/traces` and the worker's import like plain files."""

from __future__ import annotations

import codecs
import json

import pytest

from runs.models import Run, Trace
from runs.services import ingest
from tests.importers.test_detect_files import COPILOT, ENCODINGS, TAU2, late_tau2

pytestmark = pytest.mark.django_db


def upload(api, data: bytes, name: str) -> Trace:
    """Upload a raw body and run its import inline, as the worker does."""
    response = api.post(f"/api/traces?name={name}", data, content_type="application/octet-stream")
    assert response.status_code == 202, response.content
    trace = Trace.objects.get(pk=response.json()["trace_id"])
    ingest.ingest_trace(trace.pk)
    trace.refresh_from_db()
    return trace


def steps_of(trace: Trace) -> list[tuple]:
    return [
        (run.external_id, [(s.kind, s.tool, s.status) for s in run.steps.order_by("seq")])
        for run in Run.objects.filter(trace=trace).order_by("id")
    ]


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
@pytest.mark.parametrize("path", [COPILOT, TAU2], ids=["jsonl", "json"])
def test_an_uploaded_file_in_each_encoding_imports_like_utf8(api, encode, path):
    plain = upload(api, path.read_bytes(), path.name)
    encoded = upload(api, encode(path.read_bytes()), path.name)
    assert encoded.status == plain.status == Trace.Status.ANALYZING, encoded.error
    assert encoded.format == plain.format and encoded.skipped_lines == 0
    assert steps_of(encoded) == steps_of(plain) != []


def test_an_upload_in_an_encoding_not_read_fails_saying_so(api):
    trace = upload(api, COPILOT.read_text().encode("utf-16-le"), "events.jsonl")
    assert trace.status == Trace.Status.FAILED
    assert "UTF-16 LE without a byte-order mark" in trace.error


def test_wrapped_records_and_late_evidence_upload_and_import(api):
    events = [json.loads(line) for line in COPILOT.read_text().splitlines() if line.strip()]
    wrapped = "".join(json.dumps({"role": "", "content": "", "raw": e}) + "\n" for e in events)
    trace = upload(api, codecs.BOM_UTF8 + wrapped.encode(), "wrapped.jsonl")
    assert trace.status == Trace.Status.ANALYZING and trace.format == "copilot-cli", trace.error
    late = upload(api, late_tau2(), "late.json")
    assert late.status == Trace.Status.ANALYZING and late.format == "tau2", late.error
    assert late.runs.count() == 2
