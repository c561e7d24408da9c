"""What a new user meets first: the README's commands and the setup scripts they call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import background_worker  # noqa: F401 - the uploads' work, in threads

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


# -- the README's shell commands, run as written -------------------------------------------

README = ROOT / "README.md"
SERVER = "http://127.0.0.1:8000"  # where the README's commands reach loopboard
# Blocks not run here, by a piece of their first command, and why. Every other block runs.
NOT_RUN = {
    "make run     #": "sets up and serves until Ctrl-C (tests/cli/test_serve.py runs serve)",
    "export CLAUDE_CODE_ENABLE_TELEMETRY": "starts Claude Code, which is not installed here",
    "export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "starts the reader's own agent (my_agent.py)",
    "examples/otel_agent.py": "a placeholder key (lb_...); tests/runs/api covers OTLP",
    "loopboard hook install": "writes the reader's agent settings (tests/cli/test_hook_install.py)",
    "claude mcp add": "Claude Code is not installed here",
    "examples/guard_openai_loop.py": "calls a model (tests/test_guard.py runs the guard)",
    "LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS=true make run": "serves until Ctrl-C",
    'curl -H "Authorization: Bearer $ADMIN_KEY"': "a placeholder host (loopboard.example.com)",
    "export DATABASE_URL=": "points at the reader's own PostgreSQL and serves until Ctrl-C",
    "chromium --headless": "needs a server on port 8000 (tests/e2e take screenshots)",
    "LOOPBOARD_SCREENSHOTS=shots": "runs browser test files (the suite runs them)",
}


def sh_blocks(text: str) -> list[tuple[int, list[str]]]:
    """Every fenced sh block: (its line in the README, its commands), a command's `\\`
    continuations joined and comment lines dropped."""
    blocks: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```sh":
            start, body = index + 1, []
            index += 1
            while lines[index].strip() != "```":
                body.append(lines[index].strip())
                index += 1
            commands, pending = [], ""
            for line in body:
                if not pending and (not line or line.startswith("#")):
                    continue
                pending += line
                if pending.endswith("\\"):
                    pending = pending[:-1].rstrip() + " "
                    continue
                commands.append(pending)
                pending = ""
            blocks.append((start + 1, commands))
        index += 1
    return blocks


def reason_not_run(commands: list[str]) -> str | None:
    return next((why for head, why in NOT_RUN.items() if head in commands[0]), None)


def script(commands: list[str]) -> str:
    """A bash script that runs the commands in order and stops at the first that fails:
    `loopboard scan` may exit 1 (a run was flagged, as documented), curl fails on an HTTP
    error status."""
    out = ['curl() { command curl --fail-with-body "$@"; }']
    for command in commands:
        allowed = 1 if "loopboard scan" in command else 0
        quoted = command.replace("'", "'\\''")
        out.append(
            f"{command}\nrc=$?; if [ $rc -gt {allowed} ]; then "
            f"echo 'README command failed (exit '$rc'): {quoted}' >&2; exit 1; fi"
        )
    return "\n".join(out) + "\n"


def workspace(tmp_path: Path) -> Path:
    """A folder that looks like the checkout to the commands (the venv, manage.py, the
    samples), so the files they write (upload.json, labels.jsonl) land outside it."""
    for name in (".venv", "manage.py", "runs", "examples", "scripts", "loopboard", "detection"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_every_sh_block_is_run_or_says_why_not():
    blocks = sh_blocks(README.read_text())
    assert len(blocks) > 10
    skipped = {head for _, commands in blocks for head in NOT_RUN if head in commands[0]}
    assert skipped == set(NOT_RUN), set(NOT_RUN) - skipped  # no stale reasons


def test_the_offline_commands_work_as_written(tmp_path):
    blocks = [
        (line, commands)
        for line, commands in sh_blocks(README.read_text())
        if reason_not_run(commands) is None
        and not any(SERVER in c or "manage.py" in c for c in commands)
    ]
    assert blocks, "the README shows commands that need no server"
    cwd = workspace(tmp_path)
    for line, commands in blocks:
        done = subprocess.run(
            ["bash", "-c", script(commands)], cwd=cwd, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"README.md:{line}: {done.stderr[-2000:]}"


@pytest.mark.django_db(transaction=True)
def test_the_commands_against_a_server_work_as_written(
    live_server,
    process,
    background_worker,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    """The README's server commands, in its order, in one shell (as a reader would), against
    a live test server in place of 127.0.0.1:8000 whose demo project has a loop issue."""
    from runs.models import LoopIssue, Project
    from tests.helpers import looping_trace
    from tests.runs.services.test_worker import worker_env

    demo = Project.objects.create(name="demo", slug="demo")
    process(demo, looping_trace(6), name="stuck.jsonl")
    assert LoopIssue.objects.filter(project=demo).exists()
    commands = [
        command.replace(SERVER, live_server.url)
        for _, block in sh_blocks(README.read_text())
        if reason_not_run(block) is None and any(SERVER in c or "manage.py" in c for c in block)
        for command in block
    ]
    assert any("api/issues/$ISSUE" in c for c in commands)
    done = subprocess.run(
        ["bash", "-c", script(commands)], cwd=workspace(tmp_path), env=worker_env(),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    for thread in background_worker:  # what the uploads and the policy change queued
        thread.join(timeout=60)
    issue = LoopIssue.objects.filter(project=demo, state="resolved").get()
    assert issue.resolved_in_version == "1.1"  # the PATCH reached the issue it looked up
