"""What a new user meets first: the README's commands and the setup scripts they call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_python(python: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(ROOT / "scripts" / "find-python")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": python},
        capture_output=True, text=True,
    )  # fmt: skip


def test_find_python_says_when_the_given_python_does_not_exist(tmp_path):
    out = find_python(str(tmp_path / "python3.12"))
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"PYTHON={tmp_path / 'python3.12'} does not exist (no such file or command)"
    )


def test_find_python_says_when_the_given_program_is_not_python():
    out = find_python("/bin/true")
    assert out.returncode == 1
    assert out.stderr.strip() == "PYTHON=/bin/true is not a Python interpreter"


def test_find_python_names_the_version_that_is_too_old(tmp_path):
    old = tmp_path / "python3"
    old.write_text("#!/bin/sh\necho 3.11\n")  # what `python3.11 -c ...version...` prints
    old.chmod(0o755)
    out = find_python(str(old))
    assert out.returncode == 1
    assert out.stderr.strip() == f"PYTHON={old} is Python 3.11; loopboard needs 3.12 or newer"


def test_find_python_accepts_a_new_enough_python():
    out = find_python(sys.executable)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sys.executable
