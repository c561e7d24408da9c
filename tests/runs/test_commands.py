"""Management commands: demo data (idempotent, login only on the embedded default), ingest."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Project, Trace

pytestmark = pytest.mark.django_db


def test_seed_demo_loads_the_samples_once(settings):
    settings.EMBEDDED = True
    call_command("seed_demo", "--user", stdout=StringIO())
    count = Trace.objects.filter(project__slug="demo").count()
    assert count >= 5
    call_command("seed_demo", "--user", stdout=StringIO())
    assert Trace.objects.filter(project__slug="demo").count() == count
    demo = get_user_model().objects.get(username="demo")
    assert demo.check_password("demo")
    assert Project.objects.get(slug="demo").memberships.filter(user=demo).exists()


def test_seed_demo_never_creates_the_demo_login_on_a_real_database(settings):
    settings.EMBEDDED = False
    err = StringIO()
    call_command("seed_demo", "--user", stdout=StringIO(), stderr=err)
    assert not get_user_model().objects.filter(username="demo").exists()
    assert "Refusing" in err.getvalue()


def test_ingest_command_stores_files(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"type": "tool_call", "tool": "t", "args": {}, "result": 1}\n')
    out = StringIO()
    call_command("ingest", str(path), "--project", "cli", stdout=out)
    assert Trace.objects.get(project__slug="cli").name == "a.jsonl"
    assert "queued" in out.getvalue()
