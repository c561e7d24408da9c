"""`loopboard hook install / uninstall / status`: loopboard's entries in an agent's settings.

Where `install` writes, by default, is a file that stays on this machine:

- Claude Code: the project's `.claude/settings.local.json` (Claude Code's own uncommitted,
  git-ignored settings), with this environment's loopboard by its absolute path;
- Gemini CLI and Cursor have no uncommitted project file (Gemini CLI reads `~/.gemini/` and
  the project's `.gemini/settings.json`, Cursor `~/.cursor/` and `.cursor/hooks.json`), so
  their project file gets the portable command `loopboard hook AGENT PHASE`, and only when
  `loopboard` is found on PATH (else install asks for `--user` or PATH);
- `--shared` writes the committed project file (`.claude/settings.json`,
  `.gemini/settings.json`, `.cursor/hooks.json`) with the portable command, never a path of
  this machine, for every teammate whose PATH has `loopboard`;
- `--user` writes the user's own settings under the home folder (absolute path).

`install` merges loopboard's entries with every other hook and key; installing twice changes
nothing, and `uninstall` removes exactly those entries (without a flag, from the project's
files, shared and local alike). `status` reads every file. The URL and key go to a config
file outside the repository (`live_client.config_path`), never into a settings file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopboard.cli.hook import AGENT_NAMES, PHASES
from loopboard.cli.live_client import (
    DEFAULT_URL,
    LiveClient,
    LiveError,
    config_path,
    read_config,
)


@dataclass(frozen=True)
class Agent:
    """Where an agent keeps its hooks and which of its events run which phase."""

    settings: str  # relative to the project (or the home folder with --user): committed
    events: dict[str, tuple[str, str | None]]  # event -> (phase, matcher or None)
    flat: bool = False  # Cursor: {event: [{command, matcher?}]}, no nested "hooks" groups
    legacy_events: dict[str, tuple[str, str | None]] | None = None
    timeout: int = 10  # how long the agent waits for the hook, in the agent's own unit
    local: str | None = None  # the project's uncommitted settings file, if the agent has one


AGENTS = {
    "claude-code": Agent(
        settings=".claude/settings.json",
        local=".claude/settings.local.json",
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


assert set(AGENTS) == set(AGENT_NAMES), "the lean hook entry point knows every agent"


# ---------------------------------------------------------------- install / uninstall


PORTABLE = ["loopboard"]  # the command a committed file holds: found on each machine's PATH


def loopboard_command() -> list[str]:
    """Return how this machine's agent should start loopboard: this environment's
    `loopboard` script by its absolute path, or this Python with `-m loopboard.cli`."""
    script = Path(sys.executable).with_name("loopboard")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "loopboard.cli"]


def hook_command(agent: str, phase: str, *, portable: bool = False) -> str:
    """The command of one hook entry: portable (`loopboard hook ...`) for a committed file,
    else this machine's own path to loopboard."""
    return shlex.join([*(PORTABLE if portable else loopboard_command()), "hook", agent, phase])


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


@dataclass(frozen=True)
class Target:
    """One settings file loopboard's hooks may be written to, and which command it gets."""

    path: Path
    kind: str  # "shared" (committed with the project), "local" (the project's, uncommitted), "user"

    @property
    def portable(self) -> bool:
        return self.kind == "shared"


def targets(agent_name: str, directory: Path) -> list[Target]:
    """Every settings file of an agent: the project's committed one, its uncommitted one
    (when the agent has one) and the user's."""
    agent = AGENTS[agent_name]
    found = [Target(directory / agent.settings, "shared")]
    if agent.local:
        found.append(Target(directory / agent.local, "local"))
    return [*found, Target(Path.home() / agent.settings, "user")]


def install_target(agent_name: str, *, user: bool, shared: bool, directory: Path) -> Target:
    """Where `install` writes (see the module's docstring); SystemExit when the default
    would put a command that cannot run for teammates into a committed file."""
    kinds = {t.kind: t for t in targets(agent_name, directory)}
    if user:
        return kinds["user"]
    if shared or "local" not in kinds:
        if not shared and shutil.which("loopboard") is None:
            raise SystemExit(
                f"loopboard hook: {kinds['shared'].path} is committed with the project, and "
                "`loopboard` is not on PATH here, so the hooks could not start it: put "
                "loopboard on PATH (e.g. pipx install) and run install again, or use --user "
                "(your own settings, with this machine's path)"
            )
        return kinds["shared"]
    return kinds["local"]


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


def add_ours(
    settings: dict[str, Any], agent_name: str, *, legacy: bool, portable: bool
) -> list[str]:
    """Add loopboard's entries (after any others, so the user's own hooks run first)."""
    agent = AGENTS[agent_name]
    events = agent.legacy_events if legacy and agent.legacy_events else agent.events
    if agent.flat:
        settings.setdefault("version", 1)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SystemExit("loopboard hook: the settings file's 'hooks' is not an object")
    for event, (phase, matcher) in events.items():
        command = hook_command(agent_name, phase, portable=portable)
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
    target = install_target(args.agent, user=args.user, shared=args.shared, directory=args.dir)
    settings = read_settings(target.path)
    remove_ours(settings, args.agent)  # so a second install replaces, never duplicates
    events = add_ours(settings, args.agent, legacy=args.legacy, portable=target.portable)
    write_settings(target.path, settings)
    config = write_config(args.url, args.key)
    print(f"{target.path}: loopboard hooks on {', '.join(events)} ({DESCRIBED[target.kind]})")
    print(f"{config}: the server URL and key (mode 0600, outside the repository)")
    if target.portable and shutil.which("loopboard") is None:
        print(
            "loopboard is not on PATH here: the hooks run `loopboard`, so put it on PATH "
            "(each teammate too)",
            file=sys.stderr,
        )
    client = LiveClient.from_config()
    if not client.key:
        print(
            "no API key yet: run again with --key, or set LOOPBOARD_API_KEY; until then the "
            "hooks let every call through",
            file=sys.stderr,
        )
    return 0


DESCRIBED = {
    "shared": "committed with the project: the command is `loopboard`, found on PATH",
    "local": "this machine's project settings, not committed",
    "user": "your own settings",
}


def uninstall(args: argparse.Namespace) -> int:
    """Remove loopboard's entries: from the user's file (--user), the committed file
    (--shared), or else every project file of the agent."""
    found = targets(args.agent, args.dir)
    wanted = "user" if args.user else "shared" if args.shared else None
    chosen = [t for t in found if t.kind == wanted or (wanted is None and t.kind != "user")]
    for target in chosen:
        if not target.path.exists() and wanted is None and target.kind == "local":
            continue
        settings = read_settings(target.path)
        removed = remove_ours(settings, args.agent)
        if removed:
            write_settings(target.path, settings)
        print(f"{target.path}: removed {removed} loopboard hook{'s' * (removed != 1)}")
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
        for target in targets(name, args.dir):
            path = target.path
            events = installed_events(read_settings(path), name) if path.exists() else []
            installed = installed or bool(events)
            where = ", ".join(events) if events else "not installed"
            print(f"{name:<12} {path}: {where} ({target.kind})")
    return 0 if reached and installed else 1


# ---------------------------------------------------------------- the command line


def main(argv: list[str]) -> int:
    """install / uninstall / status (`loopboard hook AGENT PHASE` is `hook.main`'s; the
    dispatcher in `loopboard.cli` picks which)."""
    parser = argparse.ArgumentParser(
        prog="loopboard hook", description="guard a coding agent through its hooks"
    )
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
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--user", action="store_true", help="the user's settings (~/...)")
        where.add_argument(
            "--shared",
            action="store_true",
            help="the project's committed settings, with the portable command `loopboard`",
        )
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
    parsed = parser.parse_args(argv)
    return parsed.run(parsed)
