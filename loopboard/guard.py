"""Guard an agent's tool calls with loopboard: check each call before it runs, record it after.

    from loopboard.guard import Guard, LoopDetected

    guard = Guard.local("loopboard.toml")         # the engine in this process, no server
    guard = Guard.remote(session_id="run-42")     # a live run on a loopboard server

    @guard.tool                                   # a tool function, or
    def search(q: str) -> str: ...

    result = guard.call("search", {"q": "x"}, search)   # the agent's dispatch loop

On ``stop`` the tool is not run: the call returns loopboard's message, for the model to read
instead of the result (``on_stop="return"``), or raises ``LoopDetected`` (``on_stop="raise"``).
On ``warn`` the tool runs and the message is appended to its result (``on_warn="append"``),
dropped (``"ignore"``) or given to a callback; ``guard.last`` is always the last answer.

Remote mode fails open: when the server cannot be reached within ``timeout`` seconds (one
deadline for the whole request, however slowly the server answers) the call goes on
unchecked, and the guard says so once on stderr. A guard that stops the agent when the
server is down is worse than none.

A stop message starts with ``GUARD_MARK`` ("[loopboard guard]"), in both modes, so the
refusal the model reads in place of a result is recognisably loopboard's. The guard never
records it as the tool's result; a live run that is handed it back as a result anyway
(another tracer, a hook) stores it as the guard's step, not as one more failed call.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import detection
from loopboard.cli.live_client import LiveClient, LiveError

__all__ = ["GUARD_MARK", "Guard", "LoopDetected", "Verdict", "connection"]

# How a stop message begins (the same words the live API's stop answers begin with)
GUARD_MARK = "[loopboard guard]"


@dataclass(frozen=True, slots=True)
class Verdict:
    """loopboard's answer about one call: ok / warn / stop, what fired, what to tell the model."""

    verdict: str
    message: str = ""
    findings: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_check(cls, check: detection.Check) -> Verdict:
        """The engine's answer, a stop message marked as the guard's (``GUARD_MARK``)."""
        message = check.message
        if check.verdict == "stop" and not message.startswith(GUARD_MARK):
            message = f"{GUARD_MARK} {message}"
        return cls(check.verdict, message, [f.to_dict() for f in check.findings])


OK = Verdict("ok")


class LoopDetected(Exception):
    """Raised instead of making a call loopboard says to stop (with ``on_stop="raise"``)."""

    def __init__(self, tool: str, verdict: Verdict) -> None:
        super().__init__(verdict.message or f"{tool}: loop detected")
        self.tool = tool
        self.verdict = verdict


def connection(url: str | None = None, key: str | None = None) -> tuple[str, str]:
    """Return the server's URL and API key: the arguments, else what `loopboard hook` uses
    (LOOPBOARD_URL and LOOPBOARD_API_KEY, else the config file `loopboard hook install` writes,
    else the local default URL and no key)."""
    default = LiveClient.from_config()
    return (url or default.url).rstrip("/"), key or default.key


def jsonable(value: Any) -> Any:
    """Return ``value`` as JSON can carry it (what is not JSON becomes its ``str``)."""
    return json.loads(json.dumps(value, default=str))


class _Local:
    """The engine's Monitor in this process, with a policy."""

    def __init__(self, policy: detection.Policy) -> None:
        self.monitor = detection.Monitor(policy)
        self.seq = 0

    def check(self, tool: str, args: Any) -> Verdict:
        return Verdict.from_check(self.monitor.check(tool, args))

    def record(self, step: dict[str, Any]) -> None:
        self.monitor.observe(detection.Step(seq=self.seq, **step))
        self.seq += 1

    def end(self) -> None:
        pass


class _Remote:
    """A live run on a loopboard server, addressed by the agent's session id."""

    def __init__(self, client: LiveClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.warned = False

    def _ask(self, send: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        try:
            return send(self.session_id, *args)
        except LiveError as exc:
            self._warn(exc)
            return None

    def _warn(self, exc: LiveError) -> None:
        if not self.warned:
            self.warned = True
            print(f"loopboard: not checked, going on ({exc})", file=sys.stderr)

    def check(self, tool: str, args: Any) -> Verdict:
        answer = self._ask(self.client.check, tool, jsonable(args))
        if not answer:
            return OK
        return Verdict(answer["verdict"], answer.get("message", ""), answer.get("findings", []))

    def record(self, step: dict[str, Any]) -> None:
        step = {k: v for k, v in step.items() if v is not None}
        step["id"] = uuid.uuid4().hex  # an id makes a retried append safe
        self._ask(self.client.append, [jsonable(step)])

    def end(self) -> None:
        try:
            self.client.end(self.session_id)
        except LiveError as exc:
            if exc.status != 404:  # 404: no call was recorded, so there is no run to end
                self._warn(exc)


OnStop = Literal["return", "raise"]
OnWarn = Literal["append", "ignore"] | Callable[[str, Verdict], None]


class Guard:
    """Check each tool call with loopboard before it runs and record it after (see module)."""

    def __init__(
        self,
        backend: _Local | _Remote,
        *,
        on_stop: OnStop = "return",
        on_warn: OnWarn = "append",
        is_error: Callable[[Any], bool] | None = None,
    ) -> None:
        if on_stop not in ("return", "raise"):
            raise ValueError("on_stop is 'return' or 'raise'")
        self.backend = backend
        self.on_stop = on_stop
        self.on_warn = on_warn
        self.is_error = is_error  # a result that says the call failed (exceptions always do)
        self.session_id: str | None = None  # remote: the live run's external id
        self.last: Verdict = OK
        self.stopped = 0  # calls not made because loopboard said stop

    @classmethod
    def local(cls, policy: detection.Policy | str | Path | None = None, **options: Any) -> Guard:
        """A guard with the engine in this process: a Policy, a policy TOML file, or defaults."""
        if not isinstance(policy, detection.Policy):
            policy = detection.Policy.load(policy) if policy else detection.Policy()
        return cls(_Local(policy), **options)

    @classmethod
    def remote(
        cls,
        session_id: str | None = None,
        *,
        url: str | None = None,
        key: str | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> Guard:
        """A guard against the live run of ``session_id`` (else LOOPBOARD_SESSION_ID, else a
        new id) on a loopboard server (see ``connection`` for the URL and key; the timeout
        is LOOPBOARD_HOOK_TIMEOUT's, else 1.5 s)."""
        session_id = session_id or os.environ.get("LOOPBOARD_SESSION_ID") or uuid.uuid4().hex
        default = LiveClient.from_config()
        client = LiveClient(
            (url or default.url).rstrip("/"), key or default.key, timeout or default.timeout
        )
        guard = cls(_Remote(client, session_id), **options)
        guard.session_id = session_id
        return guard

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def end(self) -> None:
        """End the run (remote: it is analyzed like any other run)."""
        self.backend.end()

    def check(self, tool: str, args: Any = None) -> Verdict:
        """Return loopboard's answer on making this call next, without recording it."""
        self.last = self.backend.check(tool, args)
        return self.last

    def message(self, role: str, text: str) -> None:
        """Record a message (a ``user`` message starts a new turn)."""
        self.backend.record({"kind": role, "text": text})

    def record(self, tool: str, args: Any, result: Any, status: str = "ok") -> None:
        """Record a call that was made, with its result and status (ok / error)."""
        self.backend.record(
            {"kind": "tool_call", "tool": tool, "args": args, "result": result, "status": status}
        )

    def call(self, tool: str, args: dict[str, Any] | None, fn: Callable[..., Any]) -> Any:
        """Run ``fn(**args)`` unless loopboard says stop; record it; return its result, or on
        stop loopboard's message instead (or raise ``LoopDetected``)."""
        args = args or {}
        verdict = self.check(tool, args)
        if verdict.verdict == "stop":
            self.stopped += 1
            if self.on_stop == "raise":
                raise LoopDetected(tool, verdict)
            return verdict.message
        try:
            result = fn(**args)
        except Exception as exc:
            self.record(tool, args, f"{type(exc).__name__}: {exc}", "error")
            raise
        failed = self.is_error is not None and self.is_error(result)
        self.record(tool, args, result, "error" if failed else "ok")
        if verdict.verdict == "warn":
            return self._warned(tool, verdict, result)
        return result

    def _warned(self, tool: str, verdict: Verdict, result: Any) -> Any:
        if callable(self.on_warn):
            self.on_warn(tool, verdict)
            return result
        if self.on_warn == "ignore":
            return result
        if isinstance(result, str):
            return f"{result}\n\n[loopboard] {verdict.message}"
        return {"result": result, "loopboard": verdict.message}

    def tool(self, fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
        """Decorate a tool function so that each call goes through ``call`` (named after the
        function unless ``name`` is given; its arguments by parameter name)."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(fn)
            tool = name or fn.__name__

            @functools.wraps(fn)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                return self.call(
                    tool, dict(bound.arguments), lambda **_: fn(*bound.args, **bound.kwargs)
                )

            return guarded

        return wrap(fn) if fn is not None else wrap

    def tools(self, table: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """Return a dispatch table whose functions are guarded (each under its key)."""
        return {tool: self.tool(fn, name=tool) for tool, fn in table.items()}
