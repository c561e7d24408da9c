"""`loopboard hook install/uninstall` on settings files that already hold other hooks, the
uncommitted default and the portable `--shared` install, the config file outside the
repository, and the hook commands failing open with no server (or a slow one)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

LOOPBOARD = [sys.executable, "-m", "loopboard.cli"]
VENV_BIN = str(Path(sys.executable).parent)  # where this environment's `loopboard` script is

CLAUDE_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
    },
}


def loopboard(*args: str, env: dict[str, str], cwd: Path, stdin: str = "", timeout: float = 30):
    return subprocess.run(
        [*LOOPBOARD, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def home(tmp_path) -> dict[str, str]:
    """An environment whose home and config folders are temporary."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPBOARD_")}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env["PATH"] = VENV_BIN + os.pathsep + "/usr/bin:/bin"  # loopboard is on PATH, as installed
    return env


def machine_paths(home: dict[str, str]) -> list[str]:
    """Paths of this machine a committed settings file must not hold."""
    return [VENV_BIN, sys.prefix, str(Path(sys.executable).resolve().parent), home["HOME"]]


def assert_portable(path: Path, home: dict[str, str]) -> None:
    """Every loopboard command in the file is the bare `loopboard hook ...`."""
    text = path.read_text()
    for machine in machine_paths(home):
        assert machine not in text, (machine, text)
    assert "python" not in text and "/loopboard " not in text


@pytest.fixture
def project(tmp_path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


def commands(settings: dict, event: str) -> list[str]:
    return [h["command"] for group in settings["hooks"][event] for h in group["hooks"]]


def test_install_merges_with_other_hooks_and_uninstall_restores_the_file(home, project):
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CLAUDE_SETTINGS, indent=2) + "\n")

    done = loopboard(
        "hook", "install", "claude-code", "--shared", "--key", "lb_x", env=home, cwd=project
    )
    assert done.returncode == 0, done.stderr
    assert_portable(path, home)
    assert not (project / ".claude" / "settings.local.json").exists()
    installed = json.loads(path.read_text())
    assert installed["model"] == "opus" and installed["permissions"] == {
        "allow": ["Bash(git status)"]
    }
    pre = commands(installed, "PreToolUse")
    assert pre == ["./guard.sh", "loopboard hook claude-code pre"]
    assert commands(installed, "Stop")[0] == "say done"
    assert commands(installed, "Stop")[1].endswith("hook claude-code stop")
    for event in ("PostToolUse", "PostToolUseFailure", "SessionEnd"):
        assert commands(installed, event)[-1].split()[-3:-1] == ["hook", "claude-code"]
    assert "lb_x" not in path.read_text()  # the key stays out of the repository

    again = loopboard("hook", "install", "claude-code", "--shared", env=home, cwd=project)
    assert again.returncode == 0 and json.loads(path.read_text()) == installed  # idempotent

    gone = loopboard("hook", "uninstall", "claude-code", "--shared", env=home, cwd=project)
    assert gone.returncode == 0 and "removed 5 loopboard hooks" in gone.stdout
    assert json.loads(path.read_text()) == CLAUDE_SETTINGS
    assert loopboard("hook", "uninstall", "claude-code", env=home, cwd=project).returncode == 0
    assert json.loads(path.read_text()) == CLAUDE_SETTINGS


def test_claude_code_installs_into_the_uncommitted_local_settings_by_default(home, project):
    shared = project / ".claude" / "settings.json"
    shared.parent.mkdir()
    shared.write_text(json.dumps(CLAUDE_SETTINGS))
    done = loopboard("hook", "install", "claude-code", env=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "not committed" in done.stdout
    assert json.loads(shared.read_text()) == CLAUDE_SETTINGS  # the committed file: untouched
    local = project / ".claude" / "settings.local.json"
    command = commands(json.loads(local.read_text()), "PreToolUse")[0]
    assert command == f"{VENV_BIN}/loopboard hook claude-code pre"  # this machine's own file
    status = loopboard("hook", "status", "claude-code", env=home, cwd=project)
    assert f"claude-code  {shared}: not installed (shared)" in status.stdout
    assert (
        f"claude-code  {local}: PreToolUse, PostToolUse, PostToolUseFailure, Stop, SessionEnd"
        " (local)" in status.stdout
    )
    gone = loopboard("hook", "uninstall", "claude-code", env=home, cwd=project)
    assert gone.returncode == 0 and f"{local}: removed 5 loopboard hooks" in gone.stdout
    assert json.loads(local.read_text()) == {}
    assert json.loads(shared.read_text()) == CLAUDE_SETTINGS


def test_no_machine_path_reaches_a_committed_file_of_any_agent(home, project):
    for agent, path in (
        ("claude-code", ".claude/settings.json"),
        ("gemini-cli", ".gemini/settings.json"),
        ("cursor", ".cursor/hooks.json"),
    ):
        done = loopboard("hook", "install", agent, "--shared", env=home, cwd=project)
        assert done.returncode == 0, done.stderr
        assert_portable(project / path, home)
    for agent in ("gemini-cli", "cursor"):  # their default is the committed file: portable too
        assert loopboard("hook", "install", agent, env=home, cwd=project).returncode == 0
    assert_portable(project / ".gemini/settings.json", home)
    assert_portable(project / ".cursor/hooks.json", home)


def test_without_loopboard_on_path_the_committed_default_is_refused(home, project):
    bare = home | {"PATH": "/usr/bin:/bin"}
    done = loopboard("hook", "install", "gemini-cli", env=bare, cwd=project)
    assert done.returncode == 1 and "not on PATH" in done.stderr and "--user" in done.stderr
    assert not (project / ".gemini").exists()
    user = loopboard("hook", "install", "gemini-cli", "--user", env=bare, cwd=project)
    assert user.returncode == 0, user.stderr  # the user's own file may name this machine's path
    shared = loopboard("hook", "install", "cursor", "--shared", env=bare, cwd=project)
    assert shared.returncode == 0 and "not on PATH here" in shared.stderr  # asked for: written
    assert_portable(project / ".cursor/hooks.json", home)


def test_install_into_a_project_without_settings_and_uninstall_leaves_no_hooks(home, project):
    assert loopboard("hook", "install", "claude-code", env=home, cwd=project).returncode == 0
    path = project / ".claude" / "settings.local.json"
    assert set(json.loads(path.read_text())["hooks"]) == {
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "SessionEnd",
    }
    assert loopboard("hook", "uninstall", "claude-code", env=home, cwd=project).returncode == 0
    assert json.loads(path.read_text()) == {}


def test_user_install_writes_the_home_settings(home, project):
    done = loopboard("hook", "install", "claude-code", "--user", env=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert not (project / ".claude").exists()
    user = Path(home["HOME"]) / ".claude" / "settings.json"
    assert commands(json.loads(user.read_text()), "PreToolUse")[0].endswith("claude-code pre")


def test_gemini_and_cursor_install_round_trips(home, project):
    gemini = project / ".gemini" / "settings.json"
    gemini.parent.mkdir()
    theirs = {"theme": "dark", "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [
        {"type": "command", "command": "lint.sh", "timeout": 3000}]}]}}  # fmt: skip
    gemini.write_text(json.dumps(theirs))
    assert loopboard("hook", "install", "gemini-cli", env=home, cwd=project).returncode == 0
    installed = json.loads(gemini.read_text())
    assert commands(installed, "BeforeTool")[0] == "lint.sh"
    ours = installed["hooks"]["BeforeTool"][1]
    assert ours["matcher"] == ".*" and ours["hooks"][0]["timeout"] == 10_000  # milliseconds
    assert set(installed["hooks"]) == {"BeforeTool", "AfterTool", "SessionEnd"}
    assert loopboard("hook", "uninstall", "gemini-cli", env=home, cwd=project).returncode == 0
    assert json.loads(gemini.read_text()) == theirs

    cursor = project / ".cursor" / "hooks.json"
    cursor.parent.mkdir()
    theirs = {"version": 1, "hooks": {"afterFileEdit": [{"command": "./format.sh"}]}}
    cursor.write_text(json.dumps(theirs))
    assert loopboard("hook", "install", "cursor", env=home, cwd=project).returncode == 0
    installed = json.loads(cursor.read_text())
    assert installed["hooks"]["afterFileEdit"] == [{"command": "./format.sh"}]
    assert installed["hooks"]["preToolUse"][0]["command"].endswith("hook cursor pre")
    done = loopboard("hook", "install", "cursor", "--legacy", env=home, cwd=project)
    assert done.returncode == 0
    legacy = json.loads(cursor.read_text())["hooks"]
    assert "preToolUse" not in legacy  # the second install replaced the first
    assert [e["command"] for e in legacy["afterFileEdit"]][0] == "./format.sh"
    assert legacy["beforeShellExecution"][0]["command"].endswith("hook cursor pre")
    assert loopboard("hook", "uninstall", "cursor", env=home, cwd=project).returncode == 0
    assert json.loads(cursor.read_text()) == theirs


def test_install_refuses_a_settings_file_that_is_not_json(home, project):
    path = project / ".claude" / "settings.local.json"
    path.parent.mkdir()
    path.write_text("{ not json")
    done = loopboard("hook", "install", "claude-code", env=home, cwd=project)
    assert done.returncode == 1 and "is not JSON" in done.stderr
    assert path.read_text() == "{ not json"


def test_the_url_and_key_go_to_a_private_config_file(home, project):
    done = loopboard(
        "hook", "install", "claude-code", "--url", "http://lb:9/", "--key", "lb_k",
        env=home, cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = Path(home["XDG_CONFIG_HOME"]) / "loopboard" / "hook.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    import tomllib

    assert tomllib.loads(config.read_text()) == {"url": "http://lb:9", "key": "lb_k"}
    # a later install without --key keeps the key
    assert loopboard("hook", "install", "gemini-cli", env=home, cwd=project).returncode == 0
    assert tomllib.loads(config.read_text())["key"] == "lb_k"
    config.unlink()
    no_key = loopboard("hook", "install", "cursor", env=home, cwd=project)
    assert no_key.returncode == 0 and "no API key yet" in no_key.stderr
    assert tomllib.loads(config.read_text()) == {"url": "http://127.0.0.1:8000"}


PRE = {
    "session_id": "sess-fail-open",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "make"},
    "tool_use_id": "toolu_1",
    "cwd": "/tmp",
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hooks_fail_open_when_the_server_is_down_and_say_so_once(home, project):
    env = home | {"LOOPBOARD_URL": f"http://127.0.0.1:{closed_port()}", "LOOPBOARD_API_KEY": "lb_x"}
    first = loopboard("hook", "claude-code", "pre", env=env, cwd=project, stdin=json.dumps(PRE))
    assert first.returncode == 0 and first.stdout == ""
    assert "not guarding this session" in first.stderr and "unreachable" in first.stderr
    for phase in ("pre", "post", "stop"):
        again = loopboard("hook", "claude-code", phase, env=env, cwd=project, stdin=json.dumps(PRE))
        assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    other = loopboard(
        "hook", "claude-code", "pre", env=env, cwd=project,
        stdin=json.dumps(PRE | {"session_id": "another"}),
    )  # fmt: skip
    assert other.returncode == 0 and "not guarding" in other.stderr  # once per session


def test_hooks_fail_open_without_a_key_or_with_bad_input(home, project):
    env = home | {"LOOPBOARD_URL": f"http://127.0.0.1:{closed_port()}"}
    done = loopboard("hook", "gemini-cli", "pre", env=env, cwd=project, stdin=json.dumps(PRE))
    assert (done.returncode, done.stdout) == (0, "") and "no API key" in done.stderr
    for raw in ("not json", "[1, 2]", "{}"):
        done = loopboard("hook", "cursor", "pre", env=env, cwd=project, stdin=raw)
        assert (done.returncode, done.stdout) == (0, "")


def fails_open_timed_out(env: dict[str, str], project: Path) -> float:
    """Run a `pre` hook that must fail open on a timeout; return its wall time."""
    started = time.monotonic()
    done = loopboard("hook", "claude-code", "pre", env=env, cwd=project, stdin=json.dumps(PRE))
    elapsed = time.monotonic() - started
    assert (done.returncode, done.stdout) == (0, "")
    assert "not guarding" in done.stderr and "timed out" in done.stderr
    return elapsed


def test_hooks_fail_open_on_a_server_that_never_answers(home, project):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:  # accept every connection and never answer
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    env = home | {
        "LOOPBOARD_URL": f"http://127.0.0.1:{server.getsockname()[1]}",
        "LOOPBOARD_API_KEY": "lb_x",
        "LOOPBOARD_HOOK_TIMEOUT": "0.5",
    }
    try:
        elapsed = fails_open_timed_out(env, project)
        assert 0.5 <= elapsed < 5, elapsed
        env.pop("LOOPBOARD_HOOK_TIMEOUT")  # the default: 1.5 s
        started = time.monotonic()
        done = loopboard("hook", "claude-code", "post", env=env, cwd=project, stdin=json.dumps(PRE | {"session_id": "s2", "tool_response": "x"}))  # fmt: skip
        elapsed = time.monotonic() - started
        assert (done.returncode, done.stdout) == (0, "") and 1.5 <= elapsed < 6, elapsed
    finally:
        server.close()
        for sock in accepted:
            sock.close()


def test_status_shows_where_the_hooks_are_and_that_the_server_is_down(home, project):
    assert loopboard("hook", "install", "gemini-cli", env=home, cwd=project).returncode == 0
    env = home | {"LOOPBOARD_URL": f"http://127.0.0.1:{closed_port()}", "LOOPBOARD_API_KEY": "lb_x"}
    done = loopboard("hook", "status", env=env, cwd=project)
    assert done.returncode == 1, done.stdout  # installed, but nothing to reach
    lines = done.stdout.splitlines()
    assert lines[0].startswith("server  http://127.0.0.1:") and "(from LOOPBOARD_URL)" in lines[0]
    assert "unreachable" in lines[0]
    assert (
        f"gemini-cli   {project / '.gemini/settings.json'}: BeforeTool, AfterTool, SessionEnd"
        " (shared)" in lines
    )
    assert f"claude-code  {project / '.claude/settings.json'}: not installed (shared)" in lines
    assert f"claude-code  {project / '.claude/settings.local.json'}: not installed (local)" in lines
    only = loopboard("hook", "status", "cursor", env=home, cwd=project)
    assert only.returncode == 1 and "no API key" in only.stdout
    assert [line.split()[0] for line in only.stdout.splitlines()[1:]] == ["cursor", "cursor"]


class Trickle:
    """A real local HTTP server that answers one byte a second, forever (what a slow or
    hostile peer does to a per-read timeout)."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.open: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                conn = self.server.accept()[0]
            except OSError:
                return
            self.open.append(conn)
            threading.Thread(target=self.trickle, args=(conn,), daemon=True).start()

    def trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X: " + b"y" * 10_000
        try:
            conn.recv(65536)
            for byte in answer:
                conn.sendall(bytes([byte]))
                time.sleep(1)
        except OSError:
            return

    def close(self) -> None:
        self.server.close()
        for conn in self.open:
            conn.close()


def test_the_hook_gives_up_at_its_overall_deadline_on_a_server_that_trickles():
    from loopboard.cli.live_client import LiveClient, LiveError

    trickle = Trickle()
    try:
        client = LiveClient(trickle.url, "lb_x", timeout=1.0)
        started = time.monotonic()
        with pytest.raises(LiveError, match="timed out"):
            client.check("s", "Bash", {"command": "make"})
        assert 0.9 <= time.monotonic() - started < 1.8  # not one timeout per byte read
    finally:
        trickle.close()


def test_a_hook_process_fails_open_at_its_deadline_on_a_trickling_server(home, project):
    trickle = Trickle()
    env = home | {"LOOPBOARD_URL": trickle.url, "LOOPBOARD_API_KEY": "lb_x"}
    env["LOOPBOARD_HOOK_TIMEOUT"] = "1"
    try:
        elapsed = fails_open_timed_out(env, project)
        assert 1 <= elapsed < 4, elapsed  # the deadline, plus starting Python on a busy machine
    finally:
        trickle.close()
