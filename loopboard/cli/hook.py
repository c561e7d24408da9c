"""`loopboard hook`: guard a coding agent (Claude Code, Gemini CLI, Cursor) through its hooks.

    loopboard hook install AGENT [--user] [--dir DIR] [--url URL] [--key KEY] [--legacy]
    loopboard hook uninstall AGENT [--user] [--dir DIR]
    loopboard hook status [AGENT] [--dir DIR]   (where the hooks are, and whether they reach loopboard)
    loopboard hook AGENT pre|post|stop        (what the agent runs, hook JSON on stdin)

`install` merges loopboard's entries into the agent's settings file (the project's, or the
user's with --user), keeping every other hook and key; installing twice changes nothing and
`uninstall` removes exactly those entries. The URL and key go to a config file outside the
repository (see `live_client.config_path`), never into the settings file.

The hook commands check each call against the session's live run before it runs (`pre`),
record its result after (`post`) and end the run (`stop`). They fail open: when loopboard
is unreachable, slow or answers an error, the hook prints no decision, exits 0 and says so
on stderr once per session.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopboard.cli.live_client import (
    DEFAULT_URL,
    LiveClient,
    LiveError,
    config_dir,
    config_path,
    read_config,
)

PHASES = ("pre", "post", "stop")


@dataclass(frozen=True)
class Agent:
    """Where an agent keeps its hooks and which of its events run which phase."""

    settings: str  # relative to the project (or the home folder with --user)
    events: dict[str, tuple[str, str | None]]  # event -> (phase, matcher or None)
    flat: bool = False  # Cursor: {event: [{command, matcher?}]}, no nested "hooks" groups
    legacy_events: dict[str, tuple[str, str | None]] | None = None
    timeout: int = 10  # how long the agent waits for the hook, in the agent's own unit


AGENTS = {
    "claude-code": Agent(
        settings=".claude/settings.json",
        events={
            "PreToolUse": ("pre", "*"),
            "PostToolUse": ("post", "*"),
            "PostToolUseFailure": ("post", "*"),
            "Stop": ("stop", None),
            "SessionEnd": ("stop", None),
        },
    ),
    "gemini-cli": Agent(
        settings=".gemini/settings.json",
        events={
            "BeforeTool": ("pre", ".*"),
            "AfterTool": ("post", ".*"),
            "SessionEnd": ("stop", None),
        },
        timeout=10_000,  # Gemini CLI counts milliseconds
    ),
    "cursor": Agent(
        settings=".cursor/hooks.json",
        events={
            "preToolUse": ("pre", None),
            "postToolUse": ("post", None),
            "postToolUseFailure": ("post", None),
            "sessionEnd": ("stop", None),
        },
        flat=True,
        # Cursor before 2.x has only the shell/MCP/edit family (`--legacy`)
        legacy_events={
            "beforeShellExecution": ("pre", None),
            "beforeMCPExecution": ("pre", None),
            "afterShellExecution": ("post", None),
            "afterMCPExecution": ("post", None),
            "afterFileEdit": ("post", None),
            "stop": ("stop", None),
        },
    ),
}


# ---------------------------------------------------------------- install / uninstall


def loopboard_command() -> list[str]:
    """Return how the agent should start loopboard: this environment's `loopboard` script,
    or this Python with `-m loopboard.cli` when there is no script."""
    script = Path(sys.executable).with_name("loopboard")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "loopboard.cli"]


def hook_command(agent: str, phase: str) -> str:
    return shlex.join([*loopboard_command(), "hook", agent, phase])


def is_ours(command: object, agent: str) -> bool:
    """Whether a settings entry's command is one `install` wrote: loopboard (its script or
    `-m loopboard.cli`) followed by `hook AGENT PHASE`, whichever environment it points to."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if len(words) < 4 or words[-3:-1] != ["hook", agent] or words[-1] not in PHASES:
        return False
    return any(Path(w).name == "loopboard" or w == "loopboard.cli" for w in words[:-3])


def settings_file(agent: Agent, *, user: bool, directory: Path) -> Path:
    return (Path.home() if user else directory) / agent.settings


def read_settings(path: Path) -> dict[str, Any]:
    """Return the settings file's object ({} when absent); refuse a file that is not one."""
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise SystemExit(f"loopboard hook: {path} is not JSON ({exc}); left as it is") from None
    if not isinstance(value, dict):
        raise SystemExit(f"loopboard hook: {path} holds no JSON object; left as it is")
    return value


def write_settings(path: Path, settings: dict[str, Any]) -> None:
    """Write the file whole or not at all (a half-written settings file breaks the agent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".loopboard-tmp")
    temporary.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", "utf-8")
    os.replace(temporary, path)


def remove_ours(settings: dict[str, Any], agent_name: str) -> int:
    """Take loopboard's entries out of `settings` (in place); return how many there were.
    A group, an event or the `hooks` object that only held loopboard's entries goes too."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return 0
    agent, removed = AGENTS[agent_name], 0
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            if agent.flat or not isinstance(entry, dict):
                ours = isinstance(entry, dict) and is_ours(entry.get("command"), agent_name)
                removed += ours
                if not ours:
                    kept.append(entry)
                continue
            inner = entry.get("hooks")
            if not isinstance(inner, list):
                kept.append(entry)
                continue
            others = [
                h
                for h in inner
                if not (isinstance(h, dict) and is_ours(h.get("command"), agent_name))
            ]
            removed += len(inner) - len(others)
            if others or not inner:
                kept.append({**entry, "hooks": others} if len(others) != len(inner) else entry)
        if len(kept) != len(entries):
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if removed and not hooks:
        del settings["hooks"]
    return removed


def add_ours(settings: dict[str, Any], agent_name: str, *, legacy: bool) -> list[str]:
    """Add loopboard's entries (after any others, so the user's own hooks run first)."""
    agent = AGENTS[agent_name]
    events = agent.legacy_events if legacy and agent.legacy_events else agent.events
    if agent.flat:
        settings.setdefault("version", 1)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SystemExit("loopboard hook: the settings file's 'hooks' is not an object")
    for event, (phase, matcher) in events.items():
        command = hook_command(agent_name, phase)
        if agent.flat:
            entry: dict[str, Any] = {"command": command}
        else:
            handler: dict[str, Any] = {"type": "command", "command": command}
            if agent_name == "gemini-cli":
                handler["name"] = f"loopboard-{phase}"
            handler["timeout"] = agent.timeout
            entry = {"hooks": [handler]}
        if matcher is not None:
            entry = {"matcher": matcher, **entry}
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise SystemExit(f"loopboard hook: the settings file's hooks.{event} is not a list")
        entries.append(entry)
    return list(events)


def write_config(url: str | None, key: str | None) -> Path:
    """Save the URL and key for the hooks (mode 0600), keeping what was there before."""
    path = config_path()
    config = read_config()
    if url:
        config["url"] = url.rstrip("/")
    config.setdefault("url", DEFAULT_URL)
    if key:
        config["key"] = key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = [f"{name} = {json.dumps(str(value))}" for name, value in config.items()]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("# written by `loopboard hook install`; LOOPBOARD_URL and\n")
        handle.write("# LOOPBOARD_API_KEY in the environment win over it\n")
        handle.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def install(args: argparse.Namespace) -> int:
    agent = AGENTS[args.agent]
    path = settings_file(agent, user=args.user, directory=args.dir)
    settings = read_settings(path)
    remove_ours(settings, args.agent)  # so a second install replaces, never duplicates
    events = add_ours(settings, args.agent, legacy=args.legacy)
    write_settings(path, settings)
    config = write_config(args.url, args.key)
    print(f"{path}: loopboard hooks on {', '.join(events)}")
    print(f"{config}: the server URL and key (mode 0600, outside the repository)")
    client = LiveClient.from_config()
    if not client.key:
        print(
            "no API key yet: run again with --key, or set LOOPBOARD_API_KEY; until then the "
            "hooks let every call through",
            file=sys.stderr,
        )
    return 0


def uninstall(args: argparse.Namespace) -> int:
    path = settings_file(AGENTS[args.agent], user=args.user, directory=args.dir)
    settings = read_settings(path)
    removed = remove_ours(settings, args.agent)
    if removed:
        write_settings(path, settings)
    print(f"{path}: removed {removed} loopboard hook{'s' * (removed != 1)}")
    return 0


def installed_events(settings: dict[str, Any], agent_name: str) -> list[str]:
    """The events of a settings object that hold one of loopboard's entries for this agent."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return []
    found = []
    for event, entries in hooks.items():
        groups = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        commands = [e.get("command") for e in groups]
        for group in groups:
            inner = group.get("hooks")
            commands += [h.get("command") for h in inner or () if isinstance(h, dict)]
        if any(is_ours(command, agent_name) for command in commands):
            found.append(event)
    return found


def server_status(client: LiveClient) -> tuple[bool, str]:
    """Whether the hooks would reach loopboard with their key, and what to say about it: a
    read of a session that does not exist answers 404 to an accepted key."""
    head = f"{client.url} (from {client.url_from})"
    if not client.key:
        return False, f"{head}: no API key (run install with --key, or set LOOPBOARD_API_KEY)"
    shown = client.key[:7] + "…"
    try:
        client.get("loopboard-hook-status")
    except LiveError as exc:
        if exc.status == 404:
            return True, f"{head}: reachable, key {shown} accepted"
        reason = str(exc).removeprefix(f"{client.url} ")
        if exc.status in (401, 403):
            return False, f"{head}: key {shown} refused ({reason})"
        return False, f"{head}: {reason}"
    return True, f"{head}: reachable, key {shown} accepted"


def status(args: argparse.Namespace) -> int:
    """Say where loopboard's hooks are installed and whether they reach loopboard; exit 0
    when they are installed somewhere and the server accepts their key, else 1."""
    reached, said = server_status(LiveClient.from_config())
    print(f"server  {said}")
    installed = False
    for name in [args.agent] if args.agent else sorted(AGENTS):
        for user in (False, True):
            path = settings_file(AGENTS[name], user=user, directory=args.dir)
            events = installed_events(read_settings(path), name) if path.exists() else []
            installed = installed or bool(events)
            print(f"{name:<12} {path}: {', '.join(events) if events else 'not installed'}")
    return 0 if reached and installed else 1


# ---------------------------------------------------------------- the hook commands


@dataclass
class Event:
    """One hook call, read into what loopboard needs: which run, and the call or step."""

    session: str
    phase: str
    name: str = ""  # the agent's event name (Cursor and Gemini share one command per phase)
    tool: str = ""
    args: Any = None
    step: dict[str, Any] | None = None


def _payload_id(payload: dict[str, Any]) -> str:
    """A stable step id for agents that give none: the same hook payload, the same id."""
    raw = json.dumps(payload, sort_keys=True, default=str).encode()
    return "h-" + hashlib.sha256(raw).hexdigest()[:24]


def _text(value: Any) -> Any:
    """Parse a JSON document kept in a string (Cursor's tool_input, tool_output)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def read_claude_code(payload: dict[str, Any], phase: str) -> Event:
    event = Event(str(payload.get("session_id") or ""), phase, payload.get("hook_event_name", ""))
    event.tool, event.args = str(payload.get("tool_name") or ""), payload.get("tool_input")
    if phase == "post" and event.tool:
        failed = event.name == "PostToolUseFailure" or "error" in payload
        event.step = {
            "id": str(payload.get("tool_use_id") or _payload_id(payload)),
            "tool": event.tool,
            "args": event.args,
            "result": payload.get("error") if failed else payload.get("tool_response"),
            "status": "error" if failed else "ok",
        }
    return event


def read_gemini_cli(payload: dict[str, Any], phase: str) -> Event:
    event = Event(str(payload.get("session_id") or ""), phase, payload.get("hook_event_name", ""))
    event.tool, event.args = str(payload.get("tool_name") or ""), payload.get("tool_input")
    if phase == "post" and event.tool:
        response = payload.get("tool_response")
        error = response.get("error") if isinstance(response, dict) else None
        result = response.get("llmContent", response) if isinstance(response, dict) else response
        event.step = {
            "id": _payload_id(payload),
            "tool": event.tool,
            "args": event.args,
            "result": error or result,
            "status": "error" if error else "ok",
        }
    return event


def read_cursor(payload: dict[str, Any], phase: str) -> Event:
    name = str(payload.get("hook_event_name") or "")
    session = str(payload.get("conversation_id") or payload.get("session_id") or "")
    event = Event(session, phase, name)
    status, result = "ok", None
    if name in ("beforeShellExecution", "afterShellExecution"):
        event.tool, event.args = "Shell", {"command": payload.get("command")}
        result = payload.get("output")
        if payload.get("exit_code") not in (None, 0):
            status = "error"
    elif name == "afterFileEdit":
        event.tool = "Edit"
        event.args = {"file_path": payload.get("file_path"), "edits": payload.get("edits")}
    else:  # preToolUse, postToolUse(Failure), before/afterMCPExecution
        event.tool = str(payload.get("tool_name") or "")
        event.args = _text(payload.get("tool_input"))
        result = _text(payload.get("tool_output", payload.get("result_json")))
        if name == "postToolUseFailure":
            status, result = "error", payload.get("error_message") or payload.get("failure_type")
    if phase == "post" and event.tool:
        event.step = {
            "id": str(payload.get("tool_use_id") or _payload_id(payload)),
            "tool": event.tool,
            "args": event.args,
            "result": result,
            "status": status,
        }
    return event


READERS: dict[str, Callable[[dict[str, Any], str], Event]] = {
    "claude-code": read_claude_code,
    "gemini-cli": read_gemini_cli,
    "cursor": read_cursor,
}


def answer_pre(agent: str, event: Event, verdict: str, message: str) -> dict[str, Any] | None:
    """What to print before a call, in the agent's own protocol; None prints nothing.

    A warning never says "allow": in Claude Code and Cursor that would skip the user's own
    approval prompt, so a warning only adds context where the agent has a field for it."""
    if verdict not in ("warn", "stop") or not message:
        return None
    stop = verdict == "stop"
    if agent == "claude-code":
        output: dict[str, Any] = {"hookEventName": "PreToolUse"}
        if stop:
            output |= {"permissionDecision": "deny", "permissionDecisionReason": message}
        else:
            output["additionalContext"] = message
        return {"hookSpecificOutput": output}
    if agent == "gemini-cli":
        # BeforeTool has no context field; a warning reaches the model after the call (post)
        return {"decision": "deny", "reason": message} if stop else {"systemMessage": message}
    if not stop:  # Cursor: no context field before a call either
        return None
    if event.name in ("beforeShellExecution", "beforeMCPExecution"):
        return {"permission": "deny", "user_message": message, "agent_message": message}
    return {"decision": "deny", "reason": message}


def answer_post(agent: str, appended: dict[str, Any]) -> dict[str, Any] | None:
    """After a call: agents that cannot hear a warning before a call hear it with the result."""
    messages = [f.get("message", "") for f in appended.get("findings") or []]
    message = "\n".join(m for m in messages if m)
    if not message or appended.get("verdict") not in ("warn", "stop"):
        return None
    if agent == "gemini-cli":
        return {"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": message}}
    if agent == "cursor":
        return {"additional_context": message}
    return None  # Claude Code hears it before the next call


def note_once(agent: str, session: str, reason: str) -> None:
    """Say on stderr that the guard is off for this session, the first time only."""
    digest = hashlib.sha256(f"{agent}\0{session}".encode()).hexdigest()[:24]
    marker = config_dir() / "hook-state" / digest
    try:
        marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(marker, "x", encoding="utf-8") as handle:
            handle.write(reason + "\n")
    except FileExistsError:
        return
    except OSError:
        pass  # no state folder: better said every time than never
    print(f"loopboard: not guarding this session ({reason}); the agent goes on", file=sys.stderr)


def run_hook(agent: str, phase: str, raw: str) -> dict[str, Any] | None:
    """Handle one hook call; return the JSON to print (None: nothing). Raises LiveError."""
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise LiveError(f"the hook input is not JSON ({exc})") from exc
    if not isinstance(payload, dict):
        raise LiveError("the hook input is not a JSON object")
    event = READERS[agent](payload, phase)
    if not event.session:
        raise LiveError("the hook input names no session")
    client = LiveClient.from_config()
    if phase == "pre":
        if not event.tool:
            return None
        answer = client.check(event.session, event.tool, event.args)
        return answer_pre(agent, event, answer.get("verdict", "ok"), answer.get("message", ""))
    if phase == "post":
        if event.step is None:
            return None
        return answer_post(agent, client.append(event.session, [event.step]))
    try:
        client.end(event.session)
    except LiveError as exc:
        if exc.status != 404:  # a session that made no call has no run to end
            raise
    return None


def hook(agent: str, phase: str) -> int:
    """The command an agent runs: always exit 0, print a decision only when there is one."""
    raw = sys.stdin.read()
    try:
        output = run_hook(agent, phase, raw)
    except LiveError as exc:
        note_once(agent, _session_of(raw), str(exc))
        return 0
    if output is not None:
        print(json.dumps(output))
    return 0


def _session_of(raw: str) -> str:
    match = re.search(r'"(?:session_id|conversation_id)"\s*:\s*"([^"]*)"', raw)
    return match.group(1) if match else ""


# ---------------------------------------------------------------- the command line


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] in AGENTS and args[1] in PHASES:
        return hook(args[0], args[1])
    parser = argparse.ArgumentParser(prog="loopboard hook", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    install_ = actions.add_parser(
        "install", help="write loopboard's hooks into the agent's settings"
    )
    uninstall_ = actions.add_parser("uninstall", help="remove exactly the hooks install wrote")
    status_ = actions.add_parser(
        "status", help="where the hooks are installed, and whether they reach loopboard"
    )
    for sub, run in ((install_, install), (uninstall_, uninstall)):
        sub.add_argument("agent", choices=sorted(AGENTS))
        sub.add_argument("--user", action="store_true", help="the user's settings (~/...)")
        sub.set_defaults(run=run)
    status_.add_argument("agent", nargs="?", choices=sorted(AGENTS), help="default: every agent")
    status_.set_defaults(run=status)  # the project's settings and the user's, both
    for sub in (install_, uninstall_, status_):
        sub.add_argument("--dir", type=Path, default=Path.cwd(), help="the project (default: .)")
    install_.add_argument("--url", help=f"loopboard's base URL (default {DEFAULT_URL})")
    install_.add_argument("--key", help="a project API key with the ingest scope")
    install_.add_argument(
        "--legacy",
        action="store_true",
        help="Cursor before 2.x: beforeShellExecution / beforeMCPExecution / afterFileEdit",
    )
    parsed = parser.parse_args(args)
    return parsed.run(parsed)


if __name__ == "__main__":
    raise SystemExit(main())
