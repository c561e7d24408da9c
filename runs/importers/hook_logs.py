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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_json_text, parse_time
from .detect import Claim, Sample, share
from .errors import Skips, TooManySteps, TraceError, too_many_held
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import JsonlReader, Limits

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
    open: list[Step] = field(default_factory=list)  # calls waiting for their result
    line: int | None = None  # the line being read


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
            session = sessions.get(key) or sessions.setdefault(
                key, _Session(Run(id=key[:255], format=self.name), limits, source)
            )
            session.line = line
            before = len(session.run.steps)
            try:
                self._event(session, name, event, limits)
            except TooManySteps:
                raise
            except TraceError as exc:
                reader.reject(TraceError(exc.reason, source=source, line=line, field=exc.field))
            held += len(session.run.steps) - before
            if held > limits.max_held_steps:
                raise too_many_held(limits.max_held_steps, source=source, line=line)
        reader.check_not_empty()
        skips: Skips | None = reader.skips
        for session in sessions.values():
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
        session.open.append(step)
        return step

    def _unmatched(self, session: _Session, event: dict) -> None:
        session.run.warnings.append(
            f"a {event.get('hook_event_name')} result matches no earlier call; kept as a call "
            "of its own"[:500]
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
            waiting = [s for s in session.open if s.id != str(call_id)]
            joined = len(waiting) < len(session.open)  # the earlier record has the arguments
            session.open = waiting
        else:
            step = next(
                (
                    s
                    for s in session.open
                    if s.tool == str(tool or "(unknown)")
                    and (not generation or s.batch_id in (None, str(generation)))
                ),
                None,
            )
            if step is not None:
                session.open.remove(step)
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
