"""SWE-agent trajectories (`.traj`, one JSON object per file), 0.x text actions and 1.x tools.

Mapping, one linear run per file:
- The first non-demo `user` message of `history` (the task) -> a `user` step; the system
  prompt and every message with `is_demo: true` are left out.
- Each `trajectory[i]`: its `thought` -> an `assistant` step (when not empty), then ONE
  `tool_call` step whose result is `observation`.
  - 1.x (function calling): step *i* is matched, in order, to the non-demo assistant message
    whose `action` equals the step's action; when that message has `tool_calls`, the tool is
    `function.name`, args the parsed `function.arguments`, and the step id the call id.
  - 0.x, or no matching message: tool = first word of `action`, args =
    `{"command": <the whole action, stripped>}`, so identical actions give identical
    signatures.
  - `batch_id` = "step-<i>" (one action per model response).
- Errors are only in text: the observation is matched against `text_errors.SWE_AGENT`
  ("Your proposed edit has introduced new syntax error(s)", "Wrong flag!",
  "command not found", "Traceback (most recent call last)", "No such file or directory",
  "syntax error near unexpected token", lines starting "Error:", "File … not found",
  "No replacement was performed", format-error and timeout notices).
- metadata: environment, exit_status, submitted (submission present), model_stats (cost,
  tokens_sent/received, api_calls), model (from `replay_config` when readable), task.
- No timestamps in the format; `execution_time` is kept in nothing but the raw file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, fnumber, parse_json_text
from .errors import TraceError
from .reading import Limits, head_text, read_document

name = "swe-agent"
label = "SWE-agent trajectory (.traj)"

_TRAJECTORY = re.compile(r'"trajectory"\s*:\s*\[')


def sniff(head: bytes) -> bool:
    """A JSON object with a `trajectory` array and SWE-agent step keys (not mini-swe-agent)."""
    text = head_text(head, len(head))
    if not text.startswith("{") or not _TRAJECTORY.search(text):
        return False
    if '"trajectory_format"' in text or '"mini_version"' in text:
        return False
    return '"observation"' in text or '"environment"' in text


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a .traj file."""
    doc = read_document(stream, source=source, limits=limits)
    if not isinstance(doc, dict) or not isinstance(doc.get("trajectory"), list):
        raise TraceError(
            "not a SWE-agent trajectory: no `trajectory` array", source=source, field="trajectory"
        )
    history = [m for m in doc.get("history") or [] if isinstance(m, dict) and not m.get("is_demo")]
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    run = Run(
        id=os.path.basename(source) or "run", format=name, metadata=_metadata(doc, info, history)
    )
    task = _task_text(history)
    if task:
        run.steps.append(text_step("user", task, limits=limits))
    assistants = [m for m in history if m.get("role") == "assistant"]
    cursor = 0
    for index, entry in enumerate(doc["trajectory"]):
        if not isinstance(entry, dict):
            raise TraceError(
                f"trajectory[{index}] is not an object", source=source, field="trajectory"
            )
        message, cursor = _match_message(assistants, cursor, entry.get("action"))
        run.steps.extend(_steps_for(entry, index, message, limits))
    yield finish_run(run, source=source, limits=limits)


def _task_text(history: list[dict[str, Any]]) -> str:
    for message in history:
        if message.get("role") == "assistant":
            return ""
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _match_message(
    assistants: list[dict[str, Any]], cursor: int, action: Any
) -> tuple[dict[str, Any] | None, int]:
    """Return the next assistant message whose action is this step's action, and the cursor."""
    wanted = str(action or "").strip()
    for position in range(cursor, len(assistants)):
        if str(assistants[position].get("action") or "").strip() == wanted:
            return assistants[position], position + 1
    return None, cursor


def _steps_for(
    entry: dict[str, Any], index: int, message: dict[str, Any] | None, limits: Limits
) -> list[Step]:
    steps: list[Step] = []
    thought = entry.get("thought")
    if isinstance(thought, str) and thought.strip():
        steps.append(text_step("assistant", thought, limits=limits, batch_id=f"step-{index}"))
    action = str(entry.get("action") or "").strip()
    tool, args, call_id = _call_from_message(message)
    if tool is None:
        tool, args = (action.split(None, 1) or ["(empty)"])[0], {"command": action}
    step = tool_step(tool=tool, args=args, limits=limits, id=call_id, batch_id=f"step-{index}")
    observation = entry.get("observation")
    set_result(
        step,
        observation,
        limits=limits,
        error=text_errors.matches(observation, text_errors.SWE_AGENT),
    )
    steps.append(step)
    return steps


def _call_from_message(message: dict[str, Any] | None) -> tuple[str | None, Any, str | None]:
    calls = (message or {}).get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return None, None, None
    function = calls[0].get("function") or {}
    tool = function.get("name")
    if not isinstance(tool, str) or not tool:
        return None, None, None
    args = parse_json_text(function.get("arguments"))
    call_id = calls[0].get("id")
    return tool, args if args is not None else {}, str(call_id) if call_id else None


def _metadata(
    doc: dict[str, Any], info: dict[str, Any], history: list[dict[str, Any]]
) -> dict[str, Any]:
    meta: dict[str, Any] = {"agent": "swe-agent"}
    if isinstance(doc.get("environment"), str):
        meta["environment"] = doc["environment"]
    if info.get("exit_status") is not None:
        meta["exit_status"] = str(info["exit_status"])
    meta["submitted"] = bool(info.get("submission"))
    stats = info.get("model_stats")
    if isinstance(stats, dict):
        meta["model_stats"] = {k: v for k, v in stats.items() if fnumber(v) is not None}
        cost = fnumber(stats.get("instance_cost", stats.get("total_cost")))
        if cost is not None:
            meta["cost"] = cost
        meta["tokens_in"] = stats.get("tokens_sent")
        meta["tokens_out"] = stats.get("tokens_received")
    model = _model_name(doc.get("replay_config"))
    if model:
        meta["model"] = model
    task = _task_text(history)
    if task:
        meta["task"] = task[:500]
    return meta


def _model_name(config: Any) -> str | None:
    config = parse_json_text(config)
    if not isinstance(config, dict):
        return None
    agent = config.get("agent") if isinstance(config.get("agent"), dict) else config
    model = agent.get("model")
    if isinstance(model, dict):
        found = model.get("name") or model.get("model_name")
        return str(found) if found else None
    return None
