"""mini-swe-agent trajectories (`.traj.json`, `trajectory_format: "mini-swe-agent-1[.1]"`).

Both formats are one object `{info, messages, trajectory_format, instance_id?}`: 1 is written
by mini-swe-agent 1.x (text actions in a fenced block), 1.1 by 2.x (`extra.actions` on every
assistant turn, native `tool_calls` answered by `role: "tool"` messages, an `exit` message).
2.x writes `trajectory_format` last, so nothing here depends on it: every message is read by
what it carries.

Mapping, one linear run per file:
- `messages[0]` (system prompt) is left out; other `system` messages -> `system` steps.
- The first `user` message (the task) -> a `user` step.
- Each `assistant` message: its text outside the action block -> an `assistant` step (when
  not empty); then one `tool_call` step per action, in this order of evidence:
  1. `extra.actions` (1.1): `[{command, tool_call_id?}]` -> tool "bash", args
     `{"command": command}`, id the tool_call_id;
  2. native `tool_calls` (or Responses-API `output` items of type `function_call`): tool
     `function.name`, args the parsed `function.arguments`, id the call id;
  3. the text: exactly one ```` ```bash ```` (or ```` ```mswea_bash_command ````) block ->
     tool "bash", args `{"command": <block body>}`; 0 or several blocks run nothing.
- Results: a `role: "tool"` message (or a `function_call_output` item) goes to the call with
  its `tool_call_id` (else the first waiting call); the next `user` message answers all the
  calls of the turn still waiting.
- Errors: `extra.returncode` != 0 or `extra.exception_info` (1.1: a timeout or a failed
  execution has returncode -1) is the explicit signal; without it the text's
  `<returncode>N</returncode>` (an exit-code spelling of text_errors.COMMON); without any
  code, the common text rules plus mini-swe-agent's own timeout notice ("timed out and has
  been killed").
- A format error -> a `tool_call` step with status "invalid" (nothing ran, whatever the
  message says), tool "(format error)", args `{"actions": N}` (N actions found, when
  known), result the error text. It is a `user` message marked `extra.interrupt_type:
  "FormatError"` (1.1; the bad reply itself is not in `messages`, only `n_actions` /
  `model_response`), or, in 1, the reply "Please always provide EXACTLY ONE action…" /
  "found N actions" while no call is waiting.
- `role: "exit"` (1.1: Submitted, LimitsExceeded): its content is the result of a call still
  waiting (the submit command's output is the submission, status ok), else dropped; its
  `extra.exit_status` is kept in metadata. In 1 the command `echo
  COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` ends the run and the last user message (the diff,
  no returncode) is its result.
- tokens/cost per model call from `extra.response.usage` (`prompt_tokens`,
  `completion_tokens`, `cost`, else `extra.cost`) on the first step of that assistant
  message; timestamps from `extra.response.created` (start of the call).
- metadata: instance_id, exit_status, submitted, model (config.model.model_name), mini_version,
  model_stats (instance_cost, api_calls), trajectory_format.

Reading streams (reading.iter_members): `messages` is read one message at a time and only
`info`, `instance_id` and `trajectory_format` are kept besides, wherever they are in the file.

Any length: the steps go into a step spool (kit.spool), so a trajectory is read in the memory
of the spool's window. A call of the last assistant turn, the only one a later message may
answer, is held until the next turn (at most the spool's `max_held` of them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, number, parse_json_text, parse_time
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import StepSpool
from .reading import Limits, iter_members

name = "mini-swe-agent"
label = "mini-swe-agent trajectory (.traj.json)"

BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
FORMAT_ERROR = re.compile(
    r"Please always provide EXACTLY ONE action|found (\d+) actions?\b|Expected exactly 1 action"
    r"|No tool calls found in the response"
)
RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
RULES = text_errors.rules(("timeout", r"timed out and has been killed"))
INVALID_TOOL = "(format error)"
SUBMIT = re.compile(r"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT|MINI_SWE_AGENT_FINAL_OUTPUT")
SMALL_FIELDS = frozenset(("info", "instance_id", "trajectory_format"))


def claim(sample: Sample) -> Claim:
    """The marker `trajectory_format: mini-swe-agent…`, else `info.mini_version`, else
    messages whose `extra` holds mini-swe-agent's fields (`actions`, `interrupt_type`)."""
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object")
    marker = top.get("trajectory_format")
    if isinstance(marker, str) and marker.startswith("mini-swe-agent"):
        return Claim(0.97, f"`trajectory_format: {marker[:40]}`")
    info = top.get("info") if isinstance(top.get("info"), dict) else {}
    if info.get("mini_version") is not None:
        return Claim(0.92, "`info.mini_version`")
    messages = top.get("messages")
    if not isinstance(messages, list):
        return Claim.no(
            "no `trajectory_format: mini-swe-agent…`, `info.mini_version` or `messages`"
        )
    extras = [
        m["extra"] for m in messages if isinstance(m, dict) and isinstance(m.get("extra"), dict)
    ]
    if any("actions" in e or "interrupt_type" in e for e in extras):
        return Claim(0.8, "messages carry mini-swe-agent's `extra.actions`/`extra.interrupt_type`")
    agent = (
        (info.get("config") or {}).get("agent") if isinstance(info.get("config"), dict) else None
    )
    if isinstance(agent, dict) and "action_observation_template" in agent:
        return Claim(0.75, "`info.config.agent.action_observation_template`")
    return Claim.no("`messages` without mini-swe-agent's marker or `extra` fields")


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a mini-swe-agent trajectory, read message by message."""
    skips = Skips()
    builder = _Builder(limits, skips, source)
    small: dict[str, Any] = {}
    seen_messages = False
    members = iter_members(
        stream,
        source=source,
        limits=limits,
        arrays={"messages": None},
        keep=SMALL_FIELDS | {"messages"},
    )
    for key, index, value in members:
        if key == "messages":
            if index is None:
                continue
            seen_messages = True
            try:
                builder.add(value, index)
            except TooManySteps:
                raise
            except TraceError as exc:
                skips.add(TraceError(exc.reason, source=source, field=f"messages[{index}]"))
        else:
            small[key] = value
            if key == "instance_id" and small[key]:
                builder.run.id = str(small[key])
    if not seen_messages:
        raise TraceError(
            "not a mini-swe-agent trajectory: no `messages` array", source=source, field="messages"
        )
    info = small.get("info") if isinstance(small.get("info"), dict) else {}
    run_id = str(small.get("instance_id") or os.path.basename(source) or "run")
    run = builder.read()
    run.id, run.metadata = run_id, _metadata(small, info, builder.exit_status)
    run.name = run.id
    yield skips.apply(finish_run(run))


class _Builder:
    """Steps of one trajectory, built one message at a time."""

    def __init__(self, limits: Limits, skips: Skips, source: str) -> None:
        self.limits, self.skips, self.source = limits, skips, source
        self.spool = StepSpool(hold=self._holds)
        self.run = Run(id=os.path.basename(source) or "run", format=name, steps=self.spool)  # type: ignore[arg-type]
        self.pending: list[Step] = []  # calls of the last assistant turn still waiting: held
        self.seen_task = False
        self.last_blocks: int | None = None  # bash blocks of the last reply that ran nothing
        self.exit_status: str | None = None

    def add(self, message: Any, index: int) -> None:
        if not isinstance(message, dict):
            raise TraceError(f"a message must be an object, not {type(message).__name__}")
        role = message.get("role")
        kind = message.get("type")
        extra = message.get("extra") if isinstance(message.get("extra"), dict) else {}
        if message.get("object") == "response" or (kind == "message" and role == "assistant"):
            role = "assistant"  # a Responses-API reply
        if kind == "function_call_output":
            self._tool_result(message.get("call_id"), message.get("output"), extra)
        elif role == "system":
            if index > 0:
                self._add(text_step("system", _text(message), limits=self.limits))
        elif role == "assistant":
            self._assistant(message, index, extra)
        elif role == "tool":
            self._tool_result(message.get("tool_call_id"), message.get("content"), extra)
        elif role == "exit":
            self.exit_status = str(extra.get("exit_status") or "") or self.exit_status
            if self.pending:  # the submit command: its output is the submission
                self._answer(self.pending, _text(message), extra, error=False)
        elif role == "user":
            self._user(_text(message), extra)
        else:
            raise TraceError(f"unknown role {role!r}; skipped")

    @property
    def steps(self) -> StepSpool:
        return self.spool

    def _holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change: a pending call (one
        turn's calls: a few)."""
        return any(step is call for call in self.pending)

    def read(self) -> Run:
        """The run, once every message is read: no step changes any more."""
        self.spool.hold = None
        self.pending = []
        return self.run

    def _add(self, step: Step) -> Step:
        return add_step(self.run, step, limits=self.limits, source=self.source)

    def _user(self, text: str, extra: dict[str, Any]) -> None:
        if extra.get("interrupt_type") == "FormatError":
            self._format_error(text, extra)
        elif not self.seen_task:
            self.seen_task = True
            self._add(text_step("user", text, limits=self.limits))
        elif self.pending:
            self._answer(self.pending, text, extra)
        elif FORMAT_ERROR.search(text):
            self._format_error(text, extra)
        else:
            self._add(text_step("user", text, limits=self.limits))

    def _assistant(self, message: dict[str, Any], index: int, extra: dict[str, Any]) -> None:
        batch = f"msg-{index}"
        text = _text(message)
        calls = _actions(extra, batch, self.limits) or _native_calls(message, batch, self.limits)
        blocks = BASH_BLOCK.findall(text)
        if not calls and len(blocks) == 1 and not isinstance(extra.get("actions"), list):
            calls = [_bash(blocks[0], None, batch, self.limits)]
        self.last_blocks = None if calls else len(blocks)
        thought = BASH_BLOCK.sub("", text).strip() if calls else text.strip()
        steps: list[Step] = []
        if thought:
            steps.append(text_step("assistant", thought, limits=self.limits, batch_id=batch))
        steps.extend(calls)
        if not steps:
            steps.append(text_step("assistant", "", limits=self.limits, batch_id=batch))
        response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
        first = steps[0]
        first.tokens_in = number(usage.get("prompt_tokens", usage.get("input_tokens")))
        first.tokens_out = number(usage.get("completion_tokens", usage.get("output_tokens")))
        first.cost = fnumber(usage.get("cost", extra.get("cost")))
        first.started_at = parse_time(response.get("created", response.get("created_at")))
        for step in steps:
            self._add(step)
        self.pending = calls

    def _tool_result(self, call_id: Any, content: Any, extra: dict[str, Any]) -> None:
        call = self._waiting(None if call_id is None else str(call_id))
        if call is None:
            call = tool_step(tool="(unknown)", args={}, limits=self.limits)
            self._add(call)
            self.skips.note(
                f"{self.source}: result for call {call_id!r} matches no waiting call; "
                "kept as a step of its own"
            )
        self._answer([call], content_text(content), extra)

    def _waiting(self, call_id: str | None) -> Step | None:
        """The waiting call with this id, else the first waiting call without an id (or, for
        a result without an id, the first waiting call)."""
        for step in self.pending:
            if call_id is not None and step.id == call_id:
                return step
        for step in self.pending:
            if call_id is None or step.id is None:
                return step
        return None

    def _answer(
        self, calls: list[Step], output: str, extra: dict[str, Any], error: bool | None = None
    ) -> None:
        if error is None:
            submit = any(SUBMIT.search(str((s.args or {}).get("command", ""))) for s in calls)
            error = _failed(output, extra, submit=submit)
        for call in calls:
            set_result(call, output, error=error, limits=self.limits)
        self.pending = [s for s in self.pending if all(s is not c for c in calls)]

    def _format_error(self, text: str, extra: dict[str, Any]) -> None:
        found = FORMAT_ERROR.search(text)
        count = number(extra.get("n_actions"))
        if count is None and found and found.group(1):
            count = int(found.group(1))
        if count is None and "No tool calls found" in text:
            count = 0
        if count is None and isinstance(extra.get("model_response"), str):
            count = len(BASH_BLOCK.findall(extra["model_response"]))
        if count is None:
            count = self.last_blocks
        args = {} if count is None else {"actions": count}
        step = tool_step(tool=INVALID_TOOL, args=args, limits=self.limits)
        if self.steps and self.steps[-1].kind == "assistant" and self.last_blocks is not None:
            step.batch_id = self.steps[-1].batch_id
        set_result(step, text, error=True, limits=self.limits)
        step.status = "invalid"
        self._add(step)
        self.last_blocks = None


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None and isinstance(message.get("output"), list):  # a Responses-API reply
        content = [
            i for i in message["output"] if isinstance(i, dict) and i.get("type") == "message"
        ]
        content = [part for item in content for part in (item.get("content") or [])]
    return content_text(content)


def _bash(command: Any, call_id: Any, batch: str, limits: Limits) -> Step:
    return tool_step(
        tool="bash",
        args={"command": str(command)},
        limits=limits,
        id=None if call_id is None else str(call_id),
        batch_id=batch,
    )


def _actions(extra: dict[str, Any], batch: str, limits: Limits) -> list[Step]:
    actions = extra.get("actions")
    if not isinstance(actions, list):
        return []
    calls = []
    for action in actions:
        if isinstance(action, dict):
            command = action.get("command", action.get("action"))
            if command is not None:
                calls.append(_bash(command, action.get("tool_call_id"), batch, limits))
        elif isinstance(action, str):
            calls.append(_bash(action, None, batch, limits))
    return calls


def _native_calls(message: dict[str, Any], batch: str, limits: Limits) -> list[Step]:
    calls = []
    items = message.get("tool_calls")
    if not isinstance(items, list):  # a Responses-API reply: function_call output items
        output = message.get("output") if isinstance(message.get("output"), list) else []
        items = [i for i in output if isinstance(i, dict) and i.get("type") == "function_call"]
    for call in items:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else call
        args = parse_json_text(function.get("arguments"))
        call_id = call.get("call_id") or call.get("id")
        calls.append(
            tool_step(
                tool=str(function.get("name") or "bash"),
                args=args,
                limits=limits,
                id=str(call_id) if call_id else None,
                batch_id=batch,
            )
        )
    return calls


def _failed(output: str, extra: dict[str, Any], *, submit: bool = False) -> bool:
    """Whether a command's result is a failure: explicit code first, then the text (the
    submission that answers the submit command has no code and is not an error)."""
    if extra.get("exception_info"):
        return True
    code = number(extra.get("returncode"))
    if code is not None:
        return code != 0
    found = RETURNCODE.search(output)
    if found:
        return int(found.group(1)) != 0
    return not submit and text_errors.is_error(output, RULES)


def _metadata(
    small: dict[str, Any], info: dict[str, Any], exit_status: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"agent": "mini-swe-agent"}
    if small.get("instance_id"):
        meta["instance_id"] = str(small["instance_id"])
    status = info.get("exit_status") or exit_status
    if status:
        meta["exit_status"] = str(status)
    meta["submitted"] = bool(info.get("submission"))
    if info.get("mini_version"):
        meta["mini_version"] = str(info["mini_version"])
    stats = info.get("model_stats")
    if isinstance(stats, dict):
        meta["model_stats"] = {k: v for k, v in stats.items() if fnumber(v) is not None}
        if fnumber(stats.get("instance_cost")) is not None:
            meta["cost"] = fnumber(stats["instance_cost"])
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    if model.get("model_name"):
        meta["model"] = str(model["model_name"])
    if small.get("trajectory_format"):
        meta["trajectory_format"] = str(small["trajectory_format"])
    return meta
