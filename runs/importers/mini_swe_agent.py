"""mini-swe-agent trajectories (`.traj.json`, `trajectory_format: "mini-swe-agent-1[.1]"`).

Mapping, one linear run per file:
- `messages[0]` (system prompt) is left out; other `system` messages -> `system` steps.
- The first `user` message (the task) -> a `user` step.
- Each `assistant` message: its text outside the bash block -> an `assistant` step (when not
  empty); the single ```` ```bash ```` block -> ONE `tool_call` step, tool `"bash"`, args
  `{"command": <block body>}`; the next `user` message is its result.
- Native tool calls (v1.1): assistant `tool_calls` -> `tool_call` steps (parsed arguments),
  results from the `role: "tool"` messages linked by `tool_call_id`; `extra.actions` (v1.1)
  is used instead of the regex when present.
- A format error (the reply "Please always provide EXACTLY ONE action…", i.e. the turn had 0
  or several bash blocks and nothing ran) -> a failed `tool_call` step of tool
  `"(format error)"`, args `{"bash_blocks": N}`, result the error text: not silence.
- Errors (text only): `<returncode>N</returncode>` with N != 0; a timeout notice
  ("timed out and has been killed"); format errors as above.
- The command `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` ends the run: its result is the
  submission (no returncode, status ok).
- tokens/cost per model call from `extra.response.usage` (`prompt_tokens`,
  `completion_tokens`, `cost`) on the first step of that assistant message; timestamps from
  `extra.response.created` (start of the call).
- metadata: instance_id, exit_status, submitted, model (config.model.model_name), mini_version,
  model_stats (instance_cost, api_calls).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, fnumber, number, parse_json_text, parse_time
from .errors import TraceError
from .reading import Limits, head_text, read_document

name = "mini-swe-agent"
label = "mini-swe-agent trajectory (.traj.json)"

BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
FORMAT_ERROR = re.compile(r"Please always provide EXACTLY ONE action|found \d+ actions")
TIMEOUT = re.compile(r"timed out and has been killed")
SUBMIT = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")


def sniff(head: bytes) -> bool:
    """A JSON object marked `trajectory_format: mini-swe-agent…` or with `info.mini_version`."""
    text = head_text(head, len(head))
    if not text.startswith("{"):
        return False
    if re.search(r'"trajectory_format"\s*:\s*"mini-swe-agent', text):
        return True
    return (
        '"mini_version"' in text
        and '"messages"' in text
        or ('"mini_version"' in text and '"exit_status"' in text)
    )


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a mini-swe-agent trajectory."""
    doc = read_document(stream, source=source, limits=limits)
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        raise TraceError(
            "not a mini-swe-agent trajectory: no `messages` array", source=source, field="messages"
        )
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    run_id = str(doc.get("instance_id") or os.path.basename(source) or "run")
    run = Run(id=run_id, format=name, metadata=_metadata(doc, info))
    run.steps = _steps(doc["messages"], limits)
    yield finish_run(run, source=source, limits=limits)


def _steps(messages: list[Any], limits: Limits) -> list[Step]:
    steps: list[Step] = []
    pending: list[Step] = []  # calls of the last assistant turn still waiting for a result
    by_call_id: dict[str, Step] = {}
    seen_task = False
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role, text = message.get("role"), content_text(message.get("content"))
        if role == "system":
            if index > 0:
                steps.append(text_step("system", text, limits=limits))
        elif role == "assistant":
            new = _assistant_steps(message, index, text, limits)
            steps.extend(new)
            pending = [s for s in new if s.kind == "tool_call"]
            by_call_id.update({s.id: s for s in pending if s.id})
        elif role == "tool":
            call = by_call_id.pop(str(message.get("tool_call_id")), None)
            if call is None:
                call = pending[0] if pending else None
            if call is None:
                steps.append(_orphan_result(text, limits))
            else:
                _fill(call, text, limits)
            pending = [s for s in pending if s is not call]
        elif role == "user":
            if not seen_task:
                seen_task = True
                steps.append(text_step("user", text, limits=limits))
            elif pending:
                _fill_turn(pending, text, limits)
                pending = []
            elif steps and steps[-1].kind == "assistant" and FORMAT_ERROR.search(text):
                steps.append(_format_error(steps[-1], text, limits))
            else:
                steps.append(text_step("user", text, limits=limits))
    return steps


def _assistant_steps(message: dict[str, Any], index: int, text: str, limits: Limits) -> list[Step]:
    batch = f"msg-{index}"
    usage = ((message.get("extra") or {}).get("response") or {}).get("usage") or {}
    created = parse_time(((message.get("extra") or {}).get("response") or {}).get("created"))
    calls = _native_calls(message, batch, limits) or _text_calls(message, text, batch, limits)
    thought = BASH_BLOCK.sub("", text).strip() if calls else text.strip()
    steps: list[Step] = []
    if thought:
        steps.append(text_step("assistant", thought, limits=limits, batch_id=batch))
    steps.extend(calls)
    if not steps:
        steps.append(text_step("assistant", "", limits=limits, batch_id=batch))
    first = steps[0]
    first.tokens_in = number(usage.get("prompt_tokens"))
    first.tokens_out = number(usage.get("completion_tokens"))
    first.cost = fnumber(usage.get("cost"))
    first.started_at = created
    return steps


def _native_calls(message: dict[str, Any], batch: str, limits: Limits) -> list[Step]:
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        args = parse_json_text(function.get("arguments"))
        calls.append(
            tool_step(
                tool=str(function.get("name") or "bash"),
                args=args,
                limits=limits,
                id=str(call.get("id") or "") or None,
                batch_id=batch,
            )
        )
    return calls


def _text_calls(message: dict[str, Any], text: str, batch: str, limits: Limits) -> list[Step]:
    actions = (message.get("extra") or {}).get("actions")
    if isinstance(actions, list) and actions:
        commands = [
            a.get("command", a.get("action")) if isinstance(a, dict) else a for a in actions
        ]
    else:
        commands = BASH_BLOCK.findall(text)
        if len(commands) != 1:  # nothing runs: the next user message is a format error
            return []
    return [
        tool_step(tool="bash", args={"command": str(c)}, limits=limits, batch_id=batch)
        for c in commands
        if c is not None
    ]


def _fill(call: Step, output: str, limits: Limits) -> None:
    code = RETURNCODE.search(output)
    error = bool(code and int(code.group(1)) != 0) or bool(TIMEOUT.search(output))
    set_result(call, output, error=error, limits=limits)


def _fill_turn(pending: list[Step], output: str, limits: Limits) -> None:
    for call in pending:
        _fill(call, output, limits)


def _format_error(assistant: Step, text: str, limits: Limits) -> Step:
    blocks = len(BASH_BLOCK.findall(assistant.text or ""))
    step = tool_step(
        tool="(format error)",
        args={"bash_blocks": blocks},
        limits=limits,
        batch_id=assistant.batch_id,
    )
    set_result(step, text, error=True, limits=limits)
    return step


def _orphan_result(text: str, limits: Limits) -> Step:
    step = tool_step(tool="(unknown)", args={}, limits=limits)
    _fill(step, text, limits)
    return step


def _metadata(doc: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"agent": "mini-swe-agent"}
    if doc.get("instance_id"):
        meta["instance_id"] = str(doc["instance_id"])
    if info.get("exit_status") is not None:
        meta["exit_status"] = str(info["exit_status"])
    meta["submitted"] = bool(info.get("submission"))
    if info.get("mini_version"):
        meta["mini_version"] = str(info["mini_version"])
    stats = info.get("model_stats")
    if isinstance(stats, dict):
        meta["model_stats"] = {k: v for k, v in stats.items() if fnumber(v) is not None}
        if fnumber(stats.get("instance_cost")) is not None:
            meta["cost"] = fnumber(stats["instance_cost"])
    model = ((info.get("config") or {}).get("model") or {}).get("model_name")
    if model:
        meta["model"] = str(model)
    if doc.get("trajectory_format"):
        meta["trajectory_format"] = str(doc["trajectory_format"])
    return meta
