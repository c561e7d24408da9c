"""The `loopboard` command: `scan` (no database), `push` (to a running server), `serve`,
`hook` (guard a coding agent through its hooks), `mcp` (an MCP server for agents) and
`labels export` (people's judgements of findings, as JSON lines for `scan --labels`).

Each subcommand lives in its own module and is imported only when used, so
`loopboard scan` never loads Django.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "scan": ("loopboard.cli.scan", "find loops in trace files, no database needed"),
    "push": ("loopboard.cli.push", "send trace files to a running loopboard"),
    "serve": ("loopboard.cli.serve", "set up and start web server + worker (what `make run` does)"),
    "mcp": ("loopboard.cli.mcp", "an MCP server (stdio) with loopboard's tools for an agent"),
    "hook": ("loopboard.cli.hook", "guard Claude Code, Gemini CLI or Cursor through their hooks"),
    "labels": ("loopboard.cli.labels", "export a project's labels (real loop / false alarm)"),
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand's `main(argv)` and return its exit status."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
        print("usage: loopboard COMMAND [options]\n\ncommands:\n" + "\n".join(lines))
        return 0 if args and args[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    if args[0] == "hook" and not module.is_hook_call(args[1:]):
        # install / uninstall / status: argparse and the settings files, which the hook an
        # agent runs twice per tool call never loads
        module = importlib.import_module("loopboard.cli.hook_install")
    try:
        return module.main(args[1:])
    except BrokenPipeError:  # the reader went away (`loopboard scan … | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
