"""`loopboard mcp`: an MCP server (stdio) with loopboard's tools, for an agent to call itself.

- `check_next_call(tool, args, session_id)`: would this call be a loop in the session's live run?
- `record_call(tool, args, result, status, session_id, call_id)`: report a call that was made,
  with its result, to the session's live run; answers what fired on it.
- `recent_findings(session_id | run_id, limit)`: what loopboard found in a run, newest first.
- `search_runs(query, verdict, limit)`: the project's runs, newest first, with the runs filters.

It talks to a loopboard server through its JSON API. The URL and the key come from `--url` /
`--key`, else LOOPBOARD_URL / LOOPBOARD_API_KEY, else the config file `loopboard hook install`
writes; the session from the tool's argument, else LOOPBOARD_SESSION_ID. Register it in an MCP
client as the command `loopboard mcp`.

With these two tools the MCP server guards an agent on its own, with no hook and no SDK:
the agent asks `check_next_call` before each call and reports it with `record_call` after,
so the session's live run sees every call, and a call repeated into a loop is answered
`stop` (its message starts with "[loopboard guard]": loopboard's words, not the tool's).
Each request to loopboard has an overall deadline (`--timeout`), not one per read.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Literal
from urllib.parse import quote

import anyio
import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from loopboard.guard import connection

INSTRUCTIONS = (
    "loopboard watches agent runs for loops: the same failing call again, calls that bring "
    "nothing new. Before each tool call, ask check_next_call; on 'stop', do not make the "
    "call and follow the message. After each call you make, report it with record_call "
    "(its result, and status 'error' when it failed), so loopboard sees the run."
)
FINDING_FIELDS = ("detector", "severity", "tool", "count", "threshold", "fired_at", "message")
STOPPED_FIELDS = ("tool", "args", "before_seq", "times", "message")
TIMEOUT = 10.0  # seconds for a whole request: an agent's tool call may wait longer than a hook
RUN_FIELDS = (
    "id", "name", "external_id", "verdict", "stall_score", "step_count", "tool_call_count",
    "detectors", "tools", "created_at",
)  # fmt: skip


class Api:
    """loopboard's JSON API with one project's key; an error becomes the tool's error."""

    def __init__(self, url: str, key: str, timeout: float) -> None:
        self.url, self.key, self.timeout = url, key, timeout

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not self.key:
            raise ToolError("no API key: set LOOPBOARD_API_KEY (or `loopboard mcp --key`)")
        headers = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout) as client:
            try:
                with anyio.fail_after(self.timeout):  # the whole call, not each read
                    response = await client.request(method, path, headers=headers, **kwargs)
            except TimeoutError:
                raise ToolError(
                    f"loopboard at {self.url} did not answer within {self.timeout:g} s"
                ) from None
            except httpx.HTTPError as exc:
                raise ToolError(f"loopboard at {self.url} did not answer: {exc}") from None
        if response.status_code == 404:
            return None
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:200]}
        if response.status_code >= 400:
            detail = body.get("detail", body) if isinstance(body, dict) else body
            raise ToolError(f"loopboard answered {response.status_code}: {detail}")
        return body


def _session(session_id: str) -> str:
    session_id = session_id or os.environ.get("LOOPBOARD_SESSION_ID", "")
    if not session_id:
        raise ToolError("no session: pass session_id or set LOOPBOARD_SESSION_ID")
    return quote(session_id, safe="")


def build_server(url: str, key: str, timeout: float = TIMEOUT) -> MCPServer:
    """Return the MCP server whose tools ask the loopboard at ``url`` with ``key``."""
    api = Api(url, key, timeout)
    server = MCPServer("loopboard", instructions=INSTRUCTIONS)

    @server.tool()
    async def check_next_call(
        tool: str, args: dict[str, Any] | None = None, session_id: str = ""
    ) -> dict[str, Any]:
        """Would making this tool call next be a loop in this session's live run? Answers
        verdict ok / warn / stop, the findings, and a message: on stop, do not make the call."""
        path = f"/api/live/runs/{_session(session_id)}/check"
        answer = await api.request("POST", path, json={"tool": tool, "args": args or {}})
        if answer is None:
            raise ToolError("this loopboard has no live runs API (is it up to date?)")
        return {k: answer.get(k) for k in ("verdict", "message", "findings")}

    @server.tool()
    async def record_call(
        tool: str,
        args: dict[str, Any] | None = None,
        result: Any = None,
        status: Literal["ok", "error"] = "ok",
        session_id: str = "",
        call_id: str = "",
    ) -> dict[str, Any]:
        """Report a tool call you made, with its result (status 'error' when it failed),
        to this session's live run. Give call_id (your own id of the call) to make a retried
        report safe. Answers the run's verdict and what fired on this call."""
        step: dict[str, Any] = {"tool": tool, "args": args or {}, "status": status}
        if result is not None:
            step["result"] = result
        if call_id:
            step["id"] = call_id
        path = f"/api/live/runs/{_session(session_id)}/steps"
        answer = await api.request("POST", path, json={"steps": [step]})
        if answer is None:
            raise ToolError("this loopboard has no live runs API (is it up to date?)")
        findings = answer.get("findings") or []
        message = "\n".join(f["message"] for f in findings if f.get("message"))
        return {"verdict": answer.get("verdict"), "message": message, "findings": findings}

    @server.tool()
    async def recent_findings(
        session_id: str = "", run_id: int = 0, limit: int = 10
    ) -> dict[str, Any]:
        """What loopboard found in a run, newest first: the session's live run (session_id,
        else LOOPBOARD_SESSION_ID), or a stored run by run_id."""
        if not run_id:
            live = await api.request("GET", f"/api/live/runs/{_session(session_id)}")
            if live is None:
                return {"run_id": None, "verdict": "ok", "findings": [], "stopped_calls": []}
            run_id = live["run_id"]
        run = await api.request("GET", f"/api/runs/{run_id}")
        if run is None:
            raise ToolError(f"no run {run_id} in this project")
        findings = sorted(run["findings"], key=lambda f: f["fired_at"], reverse=True)
        stopped = run.get("stopped_calls", [])[:limit]  # latest first
        return {
            "run_id": run["id"],
            "verdict": run["verdict"],
            "url": f"{api.url}/runs/{run['id']}/",
            "findings": [{k: f.get(k) for k in FINDING_FIELDS} for f in findings[:limit]],
            "stopped_calls": [{k: c.get(k) for k in STOPPED_FIELDS} for c in stopped],
        }

    @server.tool()
    async def search_runs(query: str = "", verdict: str = "", limit: int = 10) -> dict[str, Any]:
        """The project's runs, newest first: query matches words of tool names and arguments;
        verdict is ok, warn, stop, pending or flagged (warn or stop)."""
        params = {"q": query, "verdict": verdict, "limit": max(1, min(limit, 100))}
        page = await api.request("GET", "/api/runs", params=params)
        runs = [{k: run.get(k) for k in RUN_FIELDS} for run in page["items"]]
        for run in runs:
            run["url"] = f"{api.url}/runs/{run['id']}/"
        return {"count": page["count"], "runs": runs}

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopboard mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="loopboard base URL (env LOOPBOARD_URL)")
    parser.add_argument("--key", help="a project API key (env LOOPBOARD_API_KEY)")
    parser.add_argument(
        "--timeout", type=float, default=TIMEOUT, help="seconds a whole request may take"
    )
    args = parser.parse_args(argv)
    url, key = connection(args.url, args.key)
    build_server(url, key, args.timeout).run("stdio")
    return 0
