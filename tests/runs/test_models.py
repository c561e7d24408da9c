"""Rows and their rules."""

from pathlib import Path

import pytest
from django.db import IntegrityError

from runs.models import ApiKey, Project, Trace
from runs.services import ingest

pytestmark = pytest.mark.django_db


def test_a_trace_is_unique_per_project_and_content(project):
    Trace.objects.create(project=project, name="a", sha256="f" * 64, size=1, raw=b"x")
    with pytest.raises(IntegrityError):
        Trace.objects.create(project=project, name="b", sha256="f" * 64, size=1, raw=b"x")


def test_raw_bytes_are_kept_exactly(project):
    data = bytes(range(256))
    trace = Trace.objects.create(project=project, name="a", sha256="a" * 64, size=256, raw=data)
    trace.refresh_from_db()
    assert trace.raw_bytes() == data


def test_api_keys_are_stored_hashed(project):
    row, key = ApiKey.issue(project, "ci")
    assert key.startswith("lb_")
    assert row.key_hash == ApiKey.hash(key)
    assert key not in (row.prefix, row.key_hash)
    assert ApiKey.objects.get(key_hash=ApiKey.hash(key)) == row


def test_project_str(db):
    assert str(Project(name="x", slug="x")) == "x"


SAMPLES = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "data").rglob("*") if p.is_file()
)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_reads_back_byte_identical_from_its_stored_form(project, path):
    """Raw bytes are kept compressed (zstd) where that makes them smaller, as received
    otherwise (a gzipped upload), and read back exactly as received, through the database."""
    data = path.read_bytes()
    trace, _ = ingest.store_trace(project, data, name=path.name)
    trace = Trace.objects.get(pk=trace.pk)
    stored = bytes(trace.raw)
    assert trace.raw_bytes() == data
    assert trace.raw_encoding in ("", "zstd")
    assert len(stored) <= len(data)
    if trace.raw_encoding == "":
        assert stored == data  # nothing to gain: kept as it came
    assert trace.size == len(data)


def test_a_row_stored_before_compression_reads_as_it_was(project):
    """Rows written before raw_encoding existed hold the received bytes (encoding "")."""
    trace = Trace.objects.create(project=project, name="old", sha256="b" * 64, size=3, raw=b"abc")
    assert Trace.objects.get(pk=trace.pk).raw_bytes() == b"abc"


def test_json_traces_shrink_at_rest(project):
    data = b"".join(
        b'{"type": "tool_call", "tool": "read_file", "args": {"path": "src/m%d.py"}}\n' % i
        for i in range(2000)
    )
    trace, _ = ingest.store_trace(project, data, name="calls.jsonl")
    trace.refresh_from_db()
    assert trace.raw_encoding == "zstd" and len(bytes(trace.raw)) * 10 < len(data)
    assert trace.raw_bytes() == data
