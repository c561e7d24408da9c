"""The hook commands as the agents run them (a subprocess, the hook JSON on stdin) against a
live test server: Claude Code, Gemini CLI and Cursor payloads, and the looping session that
ends with the fourth identical failing call denied."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

LOOPBOARD = [sys.executable, "-m", "loopboard.cli"]
MAKE = {"command": "make test"}
MAKE_FAILS = "Error: Exit code 2\nmake: *** No rule to make target 'test'.  Stop."


@pytest.fixture
def env(tmp_path, live_server, key) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPBOARD_")}
    return env | {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "LOOPBOARD_URL": live_server.url,
        "LOOPBOARD_API_KEY": key,
        "LOOPBOARD_HOOK_TIMEOUT": "10",  # the test server is one thread, and cold at first
    }


def run(command: str, payload: dict, env: dict[str, str], cwd: Path | None = None):
    """Run a settings file's hook command the way the agent does: through a shell."""
    done = subprocess.run(
        command,
        shell=True,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def hook(agent: str, phase: str) -> str:
    return " ".join([*LOOPBOARD, "hook", agent, phase])


def claude(event: str, session: str, n: int, **fields) -> dict:
    return {
        "session_id": session,
        "transcript_path": f"/tmp/{session}.jsonl",
        "cwd": "/work/app",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": MAKE,
        "tool_use_id": f"toolu_{n:02d}",
        **fields,
    }


def test_install_then_a_looping_session_is_denied_at_the_fourth_failing_call(
    env, tmp_path, live_server, key, project, client, user
):
    from runs.models import Run, StoppedCall

    app = tmp_path / "app"
    app.mkdir()
    install_env = {k: v for k, v in env.items() if k not in ("LOOPBOARD_URL", "LOOPBOARD_API_KEY")}
    install = subprocess.run(
        [*LOOPBOARD, "hook", "install", "claude-code", "--url", live_server.url, "--key", key],
        capture_output=True, text=True, env=install_env, cwd=app, timeout=30,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    settings = json.loads((app / ".claude" / "settings.local.json").read_text())
    command = {e: settings["hooks"][e][0]["hooks"][0]["command"] for e in settings["hooks"]}
    assert key not in json.dumps(settings)
    hook_env = install_env | {"LOOPBOARD_HOOK_TIMEOUT": "10"}  # URL and key: the config file

    answers = []
    for n in range(1, 5):
        answer, stderr = run(command["PreToolUse"], claude("PreToolUse", "sess-loop", n), hook_env)
        assert stderr == ""
        answers.append(answer)
        if answer and answer["hookSpecificOutput"].get("permissionDecision") == "deny":
            break
        failure = claude("PostToolUseFailure", "sess-loop", n, error=MAKE_FAILS, is_interrupt=False)
        assert run(command["PostToolUseFailure"], failure, hook_env) == (None, "")

    assert answers[0] is None  # nothing seen yet: silence
    for warned in answers[1:3]:  # the second and third identical failure: allowed, told
        output = warned["hookSpecificOutput"]
        assert output["hookEventName"] == "PreToolUse" and "permissionDecision" not in output
        assert "Bash" in output["additionalContext"]
    denied = answers[3]["hookSpecificOutput"]
    assert len(answers) == 4 and denied["hookEventName"] == "PreToolUse"
    assert denied["permissionDecision"] == "deny"
    assert "Bash" in denied["permissionDecisionReason"]

    live = Run.objects.get(project=project, external_id="sess-loop")
    assert live.live and live.step_count == 3 and live.verdict in ("warn", "stop")
    steps = list(live.steps.order_by("seq").values_list("tool", "status"))
    assert steps == [("Bash", "error")] * 3
    page = live_server.url + live.get_absolute_url()
    assert page.endswith(f"/runs/{live.pk}/")
    [stopped] = StoppedCall.objects.filter(run=live)  # the denied call, shown on the page
    assert (stopped.tool, stopped.before_seq) == ("Bash", 3)
    assert stopped.message == denied["permissionDecisionReason"]
    client.force_login(user)
    html = client.get(live.get_absolute_url()).content.decode()
    assert "Stopped by the guard" in html and "make test" in html

    assert run(command["Stop"], claude("Stop", "sess-loop", 0, stop_hook_active=False), hook_env) == (None, "")  # fmt: skip
    live.refresh_from_db()
    assert not live.live


def test_claude_code_post_is_safe_to_retry_and_stop_without_calls_is_quiet(env):
    from runs.models import Run

    ok = claude("PostToolUse", "sess-retry", 1, tool_response={"stdout": "ok", "stderr": ""})
    for _ in range(2):  # the same tool_use_id twice is one step
        assert run(hook("claude-code", "post"), ok, env) == (None, "")
    assert Run.objects.get(external_id="sess-retry").step_count == 1
    step = Run.objects.get(external_id="sess-retry").steps.get()
    assert step.status == "ok" and step.tool == "Bash"
    # a session that never called a tool has no run: ending it is not an outage
    nothing = {"session_id": "sess-empty", "hook_event_name": "SessionEnd", "reason": "exit"}
    assert run(hook("claude-code", "stop"), nothing, env) == (None, "")


@pytest.mark.parametrize(
    ("agent", "payload"),
    [
        (
            "gemini-cli",  # no call id and no timestamp: only the run's sequence tells them apart
            {"session_id": "same-7", "hook_event_name": "AfterTool", "tool_name": "run_shell",
             "tool_input": MAKE, "tool_response": {"llmContent": "", "error": MAKE_FAILS}},
        ),
        (
            "cursor",
            {"conversation_id": "same-7", "hook_event_name": "postToolUseFailure",
             "tool_name": "Shell", "tool_input": MAKE, "error_message": MAKE_FAILS},
        ),
    ],
)  # fmt: skip
def test_seven_identical_hook_payloads_are_seven_steps_and_the_loop_is_caught(env, agent, payload):
    from runs.models import Run

    answers = [run(hook(agent, "post"), payload, env)[0] for _ in range(7)]
    live = Run.objects.get(external_id="same-7")
    assert live.step_count == 7  # none folded into another
    assert list(live.steps.values_list("status", flat=True)) == ["error"] * 7
    assert live.verdict == "stop"
    assert answers[0] is None  # nothing fired on the first failure
    assert any(answers[1:])  # the loop told with a result
    pre = {k: v for k, v in payload.items() if k not in ("tool_response", "error_message")}
    pre["hook_event_name"] = "BeforeTool" if agent == "gemini-cli" else "preToolUse"
    denied, _ = run(hook(agent, "pre"), pre, env)
    assert denied["decision"] == "deny"


def test_gemini_cli_hooks_deny_with_a_reason_and_warn_with_the_result(env):
    from runs.models import Run

    def before(n: int) -> dict:
        return {
            "session_id": "gem-1",
            "transcript_path": "/tmp/gem-1.json",
            "cwd": "/work/app",
            "hook_event_name": "BeforeTool",
            "timestamp": f"2026-05-01T10:00:0{n}.000Z",
            "tool_name": "run_shell_command",
            "tool_input": MAKE,
        }

    def after(n: int) -> dict:
        response = {"llmContent": MAKE_FAILS, "returnDisplay": MAKE_FAILS, "error": MAKE_FAILS}
        return before(n) | {"hook_event_name": "AfterTool", "tool_response": response}

    outputs = []
    for n in range(1, 5):
        answer, _ = run(hook("gemini-cli", "pre"), before(n), env)
        if answer and answer.get("decision") == "deny":
            outputs.append(answer)
            break
        post, _ = run(hook("gemini-cli", "post"), after(n), env)
        outputs.append(post)
    assert outputs[0] is None
    context = outputs[1]["hookSpecificOutput"]
    assert (
        context["hookEventName"] == "AfterTool"
        and "run_shell_command" in context["additionalContext"]
    )
    assert outputs[-1]["decision"] == "deny" and "run_shell_command" in outputs[-1]["reason"]
    run_row = Run.objects.get(external_id="gem-1")
    assert run_row.step_count == 3 and set(run_row.steps.values_list("status", flat=True)) == {
        "error"
    }
    end = {"session_id": "gem-1", "hook_event_name": "SessionEnd", "reason": "exit"}
    assert run(hook("gemini-cli", "stop"), end, env) == (None, "")
    run_row.refresh_from_db()
    assert not run_row.live


def cursor_base(event: str) -> dict:
    return {
        "hook_event_name": event,
        "conversation_id": "cur-1",
        "generation_id": "gen-1",
        "model": "claude-4-sonnet",
        "cursor_version": "2.1.0",
        "workspace_roots": ["/work/app"],
        "user_email": "dev@example.com",
        "transcript_path": None,
    }


def test_cursor_tool_hooks_deny_the_loop(env):
    from runs.models import Run

    outputs = []
    for n in range(1, 5):
        pre = cursor_base("preToolUse") | {
            "tool_name": "Shell", "tool_input": MAKE, "tool_use_id": f"tc_{n}", "cwd": "/work/app",
        }  # fmt: skip
        answer, _ = run(hook("cursor", "pre"), pre, env)
        if answer and answer.get("decision") == "deny":
            outputs.append(answer)
            break
        failure = cursor_base("postToolUseFailure") | {
            "tool_name": "Shell", "tool_input": MAKE, "tool_use_id": f"tc_{n}",
            "error_message": MAKE_FAILS, "failure_type": "error", "is_interrupt": False,
        }  # fmt: skip
        outputs.append(run(hook("cursor", "post"), failure, env)[0])
    assert outputs[0] is None and "Shell" in outputs[1]["additional_context"]
    assert outputs[-1]["decision"] == "deny" and "Shell" in outputs[-1]["reason"]
    assert Run.objects.get(external_id="cur-1").step_count == 3


def test_cursor_legacy_shell_hooks_deny_and_file_edits_are_recorded(env):
    from runs.models import Run

    answers = []
    for n in range(1, 5):
        before = cursor_base("beforeShellExecution") | {"command": "make test", "cwd": "/work/app"}
        answer, _ = run(hook("cursor", "pre"), before, env)
        answers.append(answer)
        if answer and answer.get("permission") == "deny":
            break
        after = cursor_base("afterShellExecution") | {
            "generation_id": f"gen-{n}", "command": "make test", "output": MAKE_FAILS,
            "duration": 120, "exit_code": 2, "sandbox": False,
        }  # fmt: skip
        run(hook("cursor", "post"), after, env)
    assert answers[-1]["permission"] == "deny" and "Shell" in answers[-1]["agent_message"]
    assert len(answers) == 4
    edit = cursor_base("afterFileEdit") | {
        "file_path": "/work/app/Makefile",
        "edits": [{"old_string": "", "new_string": "test:\n\tpytest\n"}],
    }
    assert run(hook("cursor", "post"), edit, env) == (None, "")
    tools = list(
        Run.objects.get(external_id="cur-1").steps.order_by("seq").values_list("tool", flat=True)
    )
    assert tools == ["Shell"] * 3 + ["Edit"]
    stop = cursor_base("stop") | {"status": "completed", "loop_count": 0}
    assert run(hook("cursor", "stop"), stop, env) == (None, "")
    assert not Run.objects.get(external_id="cur-1").live


def test_a_rejected_key_fails_open_and_says_so_once(env):
    env = env | {"LOOPBOARD_API_KEY": "lb_not_a_key"}
    first = run(hook("claude-code", "pre"), claude("PreToolUse", "sess-bad-key", 1), env)
    assert first[0] is None and "answered 401" in first[1]
    assert run(hook("claude-code", "pre"), claude("PreToolUse", "sess-bad-key", 2), env) == (
        None,
        "",
    )


def test_status_says_the_server_accepts_the_key_or_refuses_it(env, tmp_path):
    app = tmp_path / "status-app"
    app.mkdir()
    installed = subprocess.run(
        [*LOOPBOARD, "hook", "install", "claude-code"], capture_output=True, text=True,
        env=env, cwd=app, timeout=30,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    status = [*LOOPBOARD, "hook", "status", "claude-code"]
    done = subprocess.run(status, capture_output=True, text=True, env=env, cwd=app, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reachable, key lb_" in done.stdout and "accepted" in done.stdout
    assert f"{app / '.claude/settings.local.json'}: PreToolUse, PostToolUse" in done.stdout
    assert env["LOOPBOARD_API_KEY"] not in done.stdout  # only its first characters
    bad = env | {"LOOPBOARD_API_KEY": "lb_not_a_key"}
    refused = subprocess.run(status, capture_output=True, text=True, env=bad, cwd=app, timeout=30)
    assert refused.returncode == 1 and "key lb_not_… refused (answered 401" in refused.stdout
