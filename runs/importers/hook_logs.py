"""Hook-event logs: what a hook that appends its stdin JSON to a file writes, one event per
line. Two dialects share the reader: Claude Code's hooks (`PreToolUse`, `PostToolUse`, …)
and Cursor's (`beforeShellExecution`, `preToolUse`, …; format notes §3.22).

A logger may add its own time field (`timestamp`, `ts`, `time`, `logged_at`): it is read
when present. Runs: one per session (`session_id`; Cursor: `conversation_id`), in order of
first appearance; the steps of one session are linear.

Claude Code events (the hook's JSON as documented: `session_id`, `transcript_path`, `cwd`,
`hook_event_name`, …):
- `PreToolUse {tool_name, tool_input, tool_use_id}` opens a call;
- `PostToolUse {tool_response}` gives it its result (matched by `tool_use_id`, else the
  earliest open call of that tool); the status is by the shared text rules on the response
  (Bash: `stdout` + `stderr`; `interrupted: true` is an error), or `is_error` when given;
- `PostToolUseFailure {error, is_interrupt}` gives it an error;
- `PermissionDenied`/a `PreToolUse` refused by a hook is only visible in the next events;
- `UserPromptSubmit {prompt}` -> user step; `Notification {message}`, `Stop`,
  `SubagentStop`, `SessionStart {source}`, `SessionEnd {reason}`, `PreCompact` -> system
  steps that say so.

Cursor events: the generic `preToolUse`/`postToolUse`/`postToolUseFailure` as above
(`tool_output`, `error_message`, `failure_type`); `beforeShellExecution {command, cwd}` /
`afterShellExecution {output, exit_code?}` as a `Shell` call; `beforeMCPExecution
{tool_name, tool_input: JSON text}` / `afterMCPExecution {result_json}`; `beforeReadFile
{file_path}` a `Read` call; `afterFileEdit {file_path, edits}` an `Edit` call (ok);
`beforeSubmitPrompt {prompt}` a user step; `afterAgentResponse {text, …tokens}` an
assistant step; `afterAgentThought {text}` a reasoning step; `stop {status, loop_count}`
and `sessionEnd` system steps. Without a `tool_use_id`, a before/after pair is matched by
`generation_id` and order.

**Any length**: each session's steps go into a step spool (kit.spool), so a log of any length
is read in the memory of the spool's window; a call waiting for its result is held. The
newest MAX_OPEN_CALLS calls wait for their result (a call a hook refused never gets one): a
result for an older call reads as a result without a call (a call of its own, with a
warning), and the first MAX_WARNINGS warnings of a session are kept. A result with a
`tool_use_id` is a copy of its call that the kit's merge joins to it when it comes within a
window of steps (kit.finish_run); one further on stays a step of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_json_text, parse_time
from .detect import Claim, Sample, share
from .errors import MAX_WARNINGS, Skips, TooManySteps, TraceError, too_many_held
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import Recent, StepSpool
from .reading import JsonlReader, Limits

# A log of any length is read in bounded memory: each session's steps are spooled (kit.spool;
# a call still waiting for its result is held), and so are the calls it looks back at.
MAX_OPEN_CALLS = 8192  # calls waiting for their result, per session (the oldest is given up)
TIME_KEYS = ("timestamp", "ts", "time", "logged_at", "received_at")

CLAUDE_EVENTS = {
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PermissionRequest",
    "PermissionDenied",
    "UserPromptSubmit",
    "Notification",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "PostCompact",
}
CURSOR_EVENTS = {
    "preToolUse",
    "postToolUse",
    "postToolUseFailure",
    "beforeShellExecution",
    "afterShellExecution",
    "beforeMCPExecution",
    "afterMCPExecution",
    "beforeReadFile",
    "afterFileEdit",
    "afterTabFileEdit",
    "beforeSubmitPrompt",
    "afterAgentResponse",
    "afterAgentThought",
    "stop",
    "sessionStart",
    "sessionEnd",
    "preCompact",
    "subagentStart",
    "subagentStop",
}


def is_cursor_event(record: Any) -> bool:
    return isinstance(record, dict) and record.get("hook_event_name") in CURSOR_EVENTS


@dataclass
class _Session:
    run: Run
    limits: Limits
    source: str
    # id(step) -> a call waiting for its result, oldest first (the newest MAX_OPEN_CALLS)
    open: Recent[int, Step] = field(default_factory=lambda: Recent(MAX_OPEN_CALLS, refresh=False))
    named: dict[str, list[int]] = field(default_factory=dict)  # call id -> its open calls
    line: int | None = None  # the line being read

    def __post_init__(self) -> None:
        self.run.steps.hold = lambda step: id(step) in self.open  # type: ignore[attr-defined]

    def wait(self, step: Step) -> None:
        """`step` waits for its result (the oldest waiting call gives up if there are too many)."""
        gone = self.open.put(id(step), step)
        if step.id is not None:
            self.named.setdefault(str(step.id), []).append(id(step))
        if gone is not None:
            self._forget(gone[1])

    def answered(self, step: Step) -> None:
        """`step` has its result: it waits no more."""
        self.open.pop(id(step), None)
        self._forget(step)

    def answered_id(self, call_id: str) -> bool:
        """The open calls with this id have their result; return whether there were any."""
        keys = self.named.pop(call_id, [])
        for key in keys:
            self.open.pop(key, None)
        return bool(keys)

    def _forget(self, step: Step) -> None:
        if step.id is None:
            return
        keys = self.named.get(str(step.id))
        if keys is not None and id(step) in keys:
            keys.remove(id(step))
            if not keys:
                del self.named[str(step.id)]

    def warn(self, text: str) -> None:
        if len(self.run.warnings) < MAX_WARNINGS:
            self.run.warnings.append(text[:500])


class HookLog:
    """The reader for one dialect: which events it knows and how a session is named."""

    def __init__(self, name: str, label: str, events: set[str], session_keys: tuple[str, ...]):
        self.name, self.label = name, label
        self.events, self.session_keys = events, session_keys

    def claim(self, sample: Sample) -> Claim:
        if not sample.maybe_jsonl:
            return Claim.no("not JSONL")
        fit = share(
            sample.records,
            lambda r: isinstance(r, dict) and r.get("hook_event_name") in self.events,
        )
        if not fit:
            return Claim.no(f"no `hook_event_name` of {self.label}")
        return Claim(0.9 * fit, f"{fit:.0%} of the records are {self.label} payloads")

    def parse(self, stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        """Yield one run per session, in order of first appearance."""
        reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
        sessions: dict[str, _Session] = {}
        held = 0
        for line, event in reader:
            name = event.get("hook_event_name")
            if name not in self.events:
                reader.reject(
                    TraceError(
                        f"unknown hook event {name!r}",
                        source=source,
                        line=line,
                        field="hook_event_name",
                    )
                )
                continue
            key = next((str(event[k]) for k in self.session_keys if event.get(k)), "session")
            session = sessions.get(key)
            if session is None:
                run = Run(id=key[:255], format=self.name, steps=StepSpool())  # type: ignore[arg-type]
                session = sessions[key] = _Session(run, limits, source)
            session.line = line
            steps = session.run.steps
            before = len(steps) - steps.spilled  # type: ignore[attr-defined]
            try:
                self._event(session, name, event, limits)
            except TooManySteps:
                raise
            except TraceError as exc:
                reader.reject(TraceError(exc.reason, source=source, line=line, field=exc.field))
            held += len(steps) - steps.spilled - before  # type: ignore[attr-defined]
            if held > limits.max_held_steps:
                raise too_many_held(limits.max_held_steps, source=source, line=line)
        reader.check_not_empty()
        skips: Skips | None = reader.skips
        for session in sessions.values():
            session.run.steps.hold = None  # type: ignore[attr-defined] # read: no step changes
            run = skips.apply(session.run) if skips is not None else session.run
            skips = None  # the file's skipped lines are counted once, on its first run
            yield finish_run(run)

    # --- one event

    def _event(self, session: _Session, name: str, event: dict, limits: Limits) -> None:
        run = session.run
        when = next((parse_time(event[k]) for k in TIME_KEYS if event.get(k) is not None), None)
        for key in ("cwd", "model", "cursor_version", "transcript_path"):
            if isinstance(event.get(key), str) and key not in run.metadata:
                run.metadata[key] = event[key]
        if name in ("PreToolUse", "preToolUse"):
            self._open(
                session,
                event.get("tool_name"),
                parse_json_text(event.get("tool_input")),
                event,
                when,
                limits,
            )
        elif name in ("PostToolUse", "postToolUse"):
            response = event.get("tool_response", event.get("tool_output"))
            response = parse_json_text(response)
            call = self._take(session, event, event.get("tool_name"), when, limits)
            set_result(
                call, response, error=_response_failed(response), limits=limits, ended_at=when
            )
        elif name in ("PostToolUseFailure", "postToolUseFailure"):
            call = self._take(session, event, event.get("tool_name"), when, limits)
            error = event.get("error", event.get("error_message"))
            kind = event.get("failure_type")
            text = content_text(error) if error is not None else "failed"
            if kind and kind != "error":
                text = f"{text} ({kind})"
            set_result(call, text, error=True, limits=limits, ended_at=when)
        elif name == "beforeShellExecution":
            args = {"command": event.get("command"), "cwd": event.get("cwd")}
            self._open(
                session,
                "Shell",
                {k: v for k, v in args.items() if v is not None},
                event,
                when,
                limits,
            )
        elif name == "afterShellExecution":
            call = self._take(
                session, event, "Shell", when, limits, args={"command": event.get("command")}
            )
            output = event.get("output")
            code = number(event.get("exit_code"))
            failed = code != 0 if code is not None else text_errors.is_error(output)
            set_result(call, output, error=failed, limits=limits, ended_at=when)
        elif name == "beforeMCPExecution":
            self._open(
                session,
                event.get("tool_name"),
                parse_json_text(event.get("tool_input")),
                event,
                when,
                limits,
            )
        elif name == "afterMCPExecution":
            args = parse_json_text(event.get("tool_input"))
            call = self._take(session, event, event.get("tool_name"), when, limits, args=args)
            result = parse_json_text(event.get("result_json"))
            failed = isinstance(result, dict) and result.get("isError") is True
            set_result(
                call, result, error=failed or _response_failed(result), limits=limits, ended_at=when
            )
        elif name == "beforeReadFile":
            self._add(
                session,
                tool_step(
                    tool="Read",
                    args={"file_path": event.get("file_path")},
                    limits=limits,
                    started_at=when,
                ),
            )
        elif name in ("afterFileEdit", "afterTabFileEdit"):
            tool = "Edit" if name == "afterFileEdit" else "TabEdit"
            step = self._add(
                session,
                tool_step(
                    tool=tool,
                    args={"file_path": event.get("file_path"), "edits": event.get("edits")},
                    limits=limits,
                    started_at=when,
                ),
            )
            set_result(step, "edited", error=False, limits=limits)
        elif name in ("UserPromptSubmit", "beforeSubmitPrompt"):
            self._add(
                session,
                text_step(
                    "user", content_text(event.get("prompt")), limits=limits, started_at=when
                ),
            )
        elif name == "afterAgentResponse":
            step = text_step(
                "assistant", content_text(event.get("text")), limits=limits, started_at=when
            )
            step.tokens_in, step.tokens_out = (
                number(event.get("input_tokens")),
                number(event.get("output_tokens")),
            )
            self._add(session, step)
        elif name == "afterAgentThought":
            self._add(
                session,
                text_step(
                    "reasoning", content_text(event.get("text")), limits=limits, started_at=when
                ),
            )
        else:
            self._add(
                session, text_step("system", _notice(name, event), limits=limits, started_at=when)
            )

    def _add(self, session: _Session, step: Step) -> Step:
        return add_step(
            session.run, step, limits=session.limits, source=session.source, line=session.line
        )

    def _open(
        self,
        session: _Session,
        tool: Any,
        args: Any,
        event: dict,
        when: float | None,
        limits: Limits,
    ) -> Step:
        call_id = event.get("tool_use_id")
        step = tool_step(
            tool=str(tool or "(unknown)"),
            args=args,
            limits=limits,
            id=str(call_id) if call_id else None,
            batch_id=str(event["generation_id"]) if event.get("generation_id") else None,
            started_at=when,
        )
        self._add(session, step)
        session.wait(step)
        return step

    def _unmatched(self, session: _Session, event: dict) -> None:
        session.warn(
            f"a {event.get('hook_event_name')} result matches no earlier call; kept as a call "
            "of its own"
        )

    def _take(
        self,
        session: _Session,
        event: dict,
        tool: Any,
        when: float | None,
        limits: Limits,
        args: Any = None,
    ) -> Step:
        """The step that takes this result. With a tool_use_id: a step of its own with that id
        (and no arguments when an earlier record of the call is open: it has them), which the
        kit's merge (kit.finish_run) joins to that record. Without
        one: the earliest open call of the same tool (and generation); none: a call of its
        own, with a warning."""
        call_id = event.get("tool_use_id")
        generation = event.get("generation_id")
        if call_id:
            joined = session.answered_id(str(call_id))  # the earlier record has the arguments
        else:
            step = next(
                (
                    s
                    for s in session.open.values()
                    if s.tool == str(tool or "(unknown)")
                    and (not generation or s.batch_id in (None, str(generation)))
                ),
                None,
            )
            if step is not None:
                session.answered(step)
                return step
            joined = False
        if not joined:
            self._unmatched(session, event)
        payload = args if args is not None else parse_json_text(event.get("tool_input"))
        return self._add(
            session,
            tool_step(
                tool=str(tool or "(unknown)"),
                args=None if joined else payload,
                limits=limits,
                id=str(call_id) if call_id else None,
                batch_id=str(generation) if generation else None,
                started_at=when,
            ),
        )


def _response_failed(response: Any) -> bool:
    if isinstance(response, dict):
        if response.get("is_error") is True or response.get("isError") is True:
            return True
        if response.get("interrupted") is True:
            return True
        if "stdout" in response or "stderr" in response:
            text = "\n".join(str(response.get(k) or "") for k in ("stdout", "stderr"))
            return text_errors.is_error(text)
        return isinstance(response.get("error"), str) and bool(response["error"])
    if isinstance(response, str):
        return text_errors.is_error(response)
    return False


def _notice(name: str, event: dict) -> str:
    detail = next(
        (
            event[k]
            for k in (
                "message",
                "reason",
                "source",
                "status",
                "final_status",
                "trigger",
                "error_message",
            )
            if isinstance(event.get(k), str) and event[k]
        ),
        "",
    )
    if name == "stop" and event.get("loop_count") is not None:
        detail = f"{detail} (loop_count {event['loop_count']})".strip()
    return f"{name}: {detail}" if detail else name


claude_code_hooks = HookLog(
    "claude-code-hooks", "Claude Code hook events (JSONL)", CLAUDE_EVENTS, ("session_id",)
)
cursor_hooks = HookLog(
    "cursor-hooks", "Cursor hook events (JSONL)", CURSOR_EVENTS, ("conversation_id", "session_id")
)
