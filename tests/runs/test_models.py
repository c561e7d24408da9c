"""Rows and their rules."""

import pytest
from django.db import IntegrityError

from runs.models import ApiKey, Project, Trace

pytestmark = pytest.mark.django_db


def test_a_trace_is_unique_per_project_and_content(project):
    Trace.objects.create(project=project, name="a", sha256="f" * 64, size=1, raw=b"x")
    with pytest.raises(IntegrityError):
        Trace.objects.create(project=project, name="b", sha256="f" * 64, size=1, raw=b"x")


def test_raw_bytes_are_kept_exactly(project):
    data = bytes(range(256))
    trace = Trace.objects.create(project=project, name="a", sha256="a" * 64, size=256, raw=data)
    trace.refresh_from_db()
    assert bytes(trace.raw) == data


def test_api_keys_are_stored_hashed(project):
    row, key = ApiKey.issue(project, "ci")
    assert key.startswith("lb_")
    assert row.key_hash == ApiKey.hash(key)
    assert key not in (row.prefix, row.key_hash)
    assert ApiKey.objects.get(key_hash=ApiKey.hash(key)) == row


def test_project_str(db):
    assert str(Project(name="x", slug="x")) == "x"
