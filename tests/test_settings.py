"""Settings come from the environment; a real deployment without SECRET_KEY refuses to start."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_settings(**env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "SECRET_KEY", "DEBUG", "LOOPBOARD_EMBEDDED")
    }
    return subprocess.run(
        [sys.executable, "-c", "import loopboard.settings as s; print(s.EMBEDDED, s.DEBUG)"],
        cwd=ROOT, env=clean | env, capture_output=True, text=True,
    )  # fmt: skip


def test_a_real_deployment_without_secret_key_refuses_to_start():
    out = load_settings(DATABASE_URL="postgres://u@db.example:5432/x", DEBUG="false")
    assert out.returncode != 0
    assert "SECRET_KEY is not set" in out.stderr


def test_a_real_deployment_with_a_secret_key_starts():
    out = load_settings(DATABASE_URL="postgres://u@db.example:5432/x", SECRET_KEY="s" * 50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_debug_must_be_a_boolean():
    out = load_settings(DATABASE_URL="postgres://u@h/x", SECRET_KEY="k", DEBUG="maybe")
    assert out.returncode != 0
    assert "DEBUG='maybe'" in out.stderr


def test_only_postgresql_is_accepted():
    out = load_settings(DATABASE_URL="sqlite:///x.db", SECRET_KEY="k")
    assert out.returncode != 0
    assert "PostgreSQL" in out.stderr


def base_url(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("LOOPBOARD_BASE_URL", "PORT")}
    out = subprocess.run(
        [sys.executable, "-c", "import loopboard.settings as s; print(s.LOOPBOARD_BASE_URL)"],
        cwd=ROOT, env=clean | {"SECRET_KEY": "k", "DATABASE_URL": "postgres://u@h/x"} | env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_base_url_follows_the_port_the_server_listens_on():
    assert base_url() == "http://127.0.0.1:8000"
    assert base_url(PORT="18940") == "http://127.0.0.1:18940"


def test_loopboard_base_url_wins_over_the_port():
    url = base_url(PORT="18940", LOOPBOARD_BASE_URL="https://loops.example.com/")
    assert url == "https://loops.example.com"
