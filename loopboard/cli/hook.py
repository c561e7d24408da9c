"""`loopboard hook`: guard a coding agent (Claude Code, Gemini CLI, Cursor) through its hooks.

    loopboard hook install AGENT [--shared | --user] [--dir DIR] [--url URL] [--key KEY]
    loopboard hook uninstall AGENT [--shared | --user] [--dir DIR]
    loopboard hook status [AGENT] [--dir DIR]   (where the hooks are, and whether they reach loopboard)
    loopboard hook AGENT pre|post|stop        (what the agent runs, hook JSON on stdin)

The hook commands check each call against the session's live run before it runs (`pre`),
record its result after (`post`) and end the run (`stop`). They fail open: when loopboard
is unreachable, slow or answers an error, the hook prints no decision, exits 0 and says so
on stderr once per session. Each request has an overall deadline (LOOPBOARD_HOOK_TIMEOUT,
1.5 s by default).

The agent runs a hook twice per tool call, so this module is the lean entry point: it
imports only `json`, `os`, `sys` and the standard-library live client (not even `typing`). `install`,
`uninstall` and `status` live in `hook_install`, which `loopboard.cli` loads only when one of
them is asked for.

A recorded step's identity is the agent's own call id (`tool_use_id`) when the payload has
one, so a retried hook is stored once; without one the step has no id and the live run's
own sequence numbers it: identical payloads are separate steps, never folded into one.
"""

from __future__ import annotations

import json
import os
import sys

from loopboard.cli.live_client import LiveClient, LiveError, config_folder

TYPE_CHECKING = False  # `typing` itself is not imported on the hook's path
if TYPE_CHECKING:
    from typing import Any

PHASES = ("pre", "post", "stop")
AGENT_NAMES = ("claude-code", "gemini-cli", "cursor")


class Event:
    """One hook call, read into what loopboard needs: which run, and the call or step."""

    __slots__ = ("session", "phase", "name", "tool", "args", "step")

    def __init__(self, session: str, phase: str, name: Any = "") -> None:
        self.session = session
        self.phase = phase
        self.name = str(name or "")  # the agent's event name (one command serves several)
        self.tool = ""
        self.args: Any = None
        self.step: dict[str, Any] | None = None


def own_id(payload: dict[str, Any]) -> str | None:
    """The agent's own id of the call (`tool_use_id`), or None when the payload has none."""
    value = payload.get("tool_use_id")
    return str(value) if isinstance(value, str | int) and value != "" else None


def make_step(payload: dict[str, Any], event: Event, result: Any, status: str) -> dict[str, Any]:
    """The step to append for a finished call; `id` only when the agent gave one."""
    step: dict[str, Any] = {
        "tool": event.tool,
        "args": event.args,
        "result": result,
        "status": status,
    }
    call_id = own_id(payload)
    if call_id is not None:
        step["id"] = call_id
    return step


def _text(value: Any) -> Any:
    """Parse a JSON document kept in a string (Cursor's tool_input, tool_output)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def read_claude_code(payload: dict[str, Any], phase: str) -> Event:
    event = Event(str(payload.get("session_id") or ""), phase, payload.get("hook_event_name"))
    event.tool, event.args = str(payload.get("tool_name") or ""), payload.get("tool_input")
    if phase == "post" and event.tool:
        failed = event.name == "PostToolUseFailure" or "error" in payload
        result = payload.get("error") if failed else payload.get("tool_response")
        event.step = make_step(payload, event, result, "error" if failed else "ok")
    return event


def read_gemini_cli(payload: dict[str, Any], phase: str) -> Event:
    event = Event(str(payload.get("session_id") or ""), phase, payload.get("hook_event_name"))
    event.tool, event.args = str(payload.get("tool_name") or ""), payload.get("tool_input")
    if phase == "post" and event.tool:
        response = payload.get("tool_response")
        error = response.get("error") if isinstance(response, dict) else None
        result = response.get("llmContent", response) if isinstance(response, dict) else response
        event.step = make_step(payload, event, error or result, "error" if error else "ok")
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
        event.step = make_step(payload, event, result, status)
    return event


READERS = {
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
    import hashlib  # only on the way out of a failure: not on the hook's usual path

    digest = hashlib.sha256(f"{agent}\0{session}".encode()).hexdigest()[:24]
    folder = os.path.join(config_folder(), "hook-state")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(os.path.join(folder, digest), "x", encoding="utf-8") as handle:
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
        note_once(agent, session_of(raw), str(exc))
        return 0
    if output is not None:
        print(json.dumps(output))
    return 0


def session_of(raw: str) -> str:
    """The session id of a hook input that could not be used (for the once-per-session note)."""
    try:
        payload = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    return str(payload.get("session_id") or payload.get("conversation_id") or "")


def is_hook_call(args: list[str]) -> bool:
    """Whether `loopboard hook ARGS` is an agent running a hook (`AGENT PHASE`), not
    install, uninstall or status (which `loopboard.cli` sends to `hook_install`)."""
    return len(args) >= 2 and args[0] in AGENT_NAMES and args[1] in PHASES


def main(argv: list[str] | None = None) -> int:
    """`loopboard hook AGENT PHASE`: run the hook."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not is_hook_call(args):
        agents, phases = "|".join(AGENT_NAMES), "|".join(PHASES)
        print(f"usage: loopboard hook {{{agents}}} {{{phases}}}", file=sys.stderr)
        return 2
    return hook(args[0], args[1])


if __name__ == "__main__":
    raise SystemExit(main())
