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
- Errors are only in text: the observation is read with the common rules of text_errors plus
  `text_errors.SWE_AGENT` ("Your proposed edit has introduced new syntax error(s)", "Wrong
  flag!", "No such file or directory", "syntax error near unexpected token", "File … not
  found", …).
- A format error (the observation "Your output was not formatted correctly", or "did not use
  any tool calls": the model's reply held no valid action and nothing ran) -> the step has
  status "invalid", tool "(format error)", args `{"action": <the action text>}`: not a call
  of whatever word the malformed reply started with.
- metadata: environment, exit_status, submitted (submission present), model_stats (cost,
  tokens_sent/received, api_calls), model (from `replay_config` when readable), task.
- No timestamps in the format; `execution_time` is kept in nothing but the raw file.

Reading streams (reading.iter_members): `trajectory` and `history` are read item by item and
only the fields a run needs are built (`action`, `observation`, `thought`; a message's `role`,
`content`, `action`, `tool_calls`, `is_demo`), so a step's `messages`/`query` (the whole
model input, repeated at every step in 1.1+) and `state` are skipped unparsed. `info` and
`replay_config` are read wherever they are, before or after the big arrays. A trajectory item
that is not an object is skipped and counted.

Any length: the steps go into a step spool (kit.spool), so a trajectory is read in the memory
of the spool's window. `history` usually comes after `trajectory`, so a step is named after
its message (1.x) in one pass over the spool once the file is read: until then each call
step carries its action in `text`, and the non-demo assistant messages' calls wait in a spool
of their own (one step each: the action in `text`, the call's tool, args and id). The pass
looks for a step's message among the LOOKAHEAD messages after the last one matched; one
further on is not found (the step keeps the name of its action).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, parse_json_text
from .detect import Claim, Sample, share
from .errors import Skips, TraceError
from .kit import add_step, check_step_limit, finish_run, set_result, text_step, tool_step
from .kit.spool import StepSpool
from .reading import Limits, clip_json, iter_members

name = "swe-agent"
label = "SWE-agent trajectory (.traj)"

STEP_FIELDS = frozenset(("action", "observation", "thought"))
MESSAGE_FIELDS = frozenset(("role", "content", "action", "tool_calls", "is_demo"))
SMALL_FIELDS = frozenset(("environment", "info", "replay_config"))
FORMAT_ERROR = "format error"  # the rule of text_errors.SWE_AGENT that means "no valid action"
INVALID_TOOL = "(format error)"
#: History messages a trajectory step's message is looked for among, after the last matched.
LOOKAHEAD = 4096


def claim(sample: Sample) -> Claim:
    """A JSON object whose `trajectory` items carry `action` and `observation` (SWE-agent's
    step), beside `environment` or `history`; mini-swe-agent's markers rule it out."""
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object")
    info = top.get("info") if isinstance(top.get("info"), dict) else {}
    if "trajectory_format" in top or "mini_version" in info:
        return Claim.no("marked as mini-swe-agent (`trajectory_format` / `info.mini_version`)")
    trajectory = top.get("trajectory")
    if not isinstance(trajectory, list):
        return Claim.no("no top-level `trajectory` array")
    entries = [item for item in trajectory if isinstance(item, dict)]
    beside = "environment" in top or isinstance(top.get("history"), list)
    if not entries:
        if beside:
            return Claim(0.5, "an empty `trajectory` array beside `environment`/`history`")
        return Claim.no("the `trajectory` array shows no step object")
    whole = share(entries, lambda e: "action" in e and "observation" in e)
    begun = share(entries, lambda e: "action" in e)  # an item cut by the head keeps `action`
    if begun == 0:
        return Claim.no("`trajectory` items have no `action`")
    score = 0.6 + 0.25 * max(whole, begun * 0.5) + (0.1 if beside else 0.0)
    return Claim(
        round(min(score, 0.95), 2),
        f"`trajectory` items with `action`/`observation` ({whole:.0%} whole)"
        + (" beside `environment`/`history`" if beside else ""),
    )


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a .traj file, read incrementally (see the module docstring)."""
    skips = Skips()
    steps = StepSpool()
    run = Run(id=os.path.basename(source) or "run", format=name, steps=steps)  # type: ignore[arg-type]
    calls = StepSpool()  # per non-demo assistant message: its action and its call, as a step
    small: dict[str, Any] = {}
    task: str | None = None
    seen_trajectory = seen_assistant = False
    members = iter_members(
        stream,
        source=source,
        limits=limits,
        arrays={"trajectory": STEP_FIELDS, "history": MESSAGE_FIELDS},
        keep=SMALL_FIELDS | {"trajectory", "history"},
    )
    for key, index, value in members:
        if key == "trajectory":
            if index is None:
                continue  # not an array: reported below unless another `trajectory` is
            seen_trajectory = True
            if not isinstance(value, dict):
                kind = type(value).__name__
                skips.add(
                    TraceError(
                        f"a trajectory step must be an object, not {kind}; skipped",
                        source=source,
                        field=f"trajectory[{index}]",
                    )
                )
                continue
            action = str(value.get("action") or "").strip()
            for step in _steps_for(value, index, action, limits):
                add_step(run, step, limits=limits, source=source)
        elif key == "history":
            if index is None or not isinstance(value, dict) or value.get("is_demo"):
                continue
            role = value.get("role")
            if role == "assistant":
                seen_assistant = True
                calls.append(_call_of(value))
            elif role == "user" and task is None and not seen_assistant:
                task = content_text(value.get("content"))
        else:
            small[key] = value
    if not seen_trajectory:
        raise TraceError(
            "not a SWE-agent trajectory: no `trajectory` array", source=source, field="trajectory"
        )
    info = small.get("info") if isinstance(small.get("info"), dict) else {}
    run.metadata = _metadata(small, info, task)
    first: list[Step] = []
    if task:  # read after the trajectory, the task goes first
        check_step_limit(len(steps) + 1, run.id, limits=limits, source=source)
        first.append(text_step("user", task, limits=limits))
    matcher = _Matcher(iter(calls))
    run.steps = steps.rewrite(lambda read: _named(first, read, matcher, limits))  # type: ignore[assignment]
    calls.close()
    yield skips.apply(finish_run(run))


def _named(
    first: list[Step], steps: Iterator[Step], matcher: _Matcher, limits: Limits
) -> Iterator[Step]:
    """The run's steps, `first` first, each call step named after its message's call."""
    yield from first
    for step in steps:
        if step.kind == "tool_call":
            action, step.text = step.text or "", None
            _apply_call(step, matcher.match(action), limits)
        yield step


class _Matcher:
    """The history's calls from the last one matched on, at most LOOKAHEAD of them read ahead,
    with where each action is among them."""

    def __init__(self, calls: Iterator[Step]) -> None:
        self.calls = calls
        self.ahead: deque[Step] = deque()
        self.where: dict[str, deque[int]] = {}  # action -> its places (absolute) in `ahead`
        self.cursor = 0  # the place of ahead[0]
        self._fill()

    def match(self, action: str) -> Step | None:
        """The next call (from the cursor on) whose message's action is `action`, or None;
        the calls up to it are passed."""
        places = self.where.get(action)
        if not places:
            return None
        found = None
        for _ in range(places[0] - self.cursor + 1):  # each is the first of its action's places
            found = self.ahead.popleft()
            passed = self.where[found.text or ""]
            passed.popleft()
            if not passed:
                del self.where[found.text or ""]
            self.cursor += 1
        self._fill()
        return found

    def _fill(self) -> None:
        while len(self.ahead) < LOOKAHEAD:
            call = next(self.calls, None)
            if call is None:
                return
            self.where.setdefault(call.text or "", deque()).append(self.cursor + len(self.ahead))
            self.ahead.append(call)


def _steps_for(entry: dict[str, Any], index: int, action: str, limits: Limits) -> list[Step]:
    """The steps of one trajectory entry, the call named from its action text for now."""
    batch = f"step-{index}"
    steps: list[Step] = []
    thought = entry.get("thought")
    if isinstance(thought, str) and thought.strip():
        steps.append(text_step("assistant", thought, limits=limits, batch_id=batch))
    observation = entry.get("observation")
    rule = text_errors.error_rule(observation, text_errors.SWE_AGENT)
    if rule == FORMAT_ERROR:
        step = tool_step(tool=INVALID_TOOL, args={"action": action}, limits=limits, batch_id=batch)
        set_result(step, observation, error=True, limits=limits)
        step.status = "invalid"
    else:
        tool = (action.split(None, 1) or ["(empty)"])[0]
        step = tool_step(tool=tool, args={"command": action}, limits=limits, batch_id=batch)
        set_result(step, observation, error=rule is not None, limits=limits)
    step.text = action  # until the step is named after its message (see the module)
    steps.append(step)
    return steps


def _apply_call(step: Step, call: Step | None, limits: Limits) -> None:
    """Name the step after the function call of its message (1.x), when there is one."""
    if call is None or call.tool is None or step.status == "invalid":
        return
    step.tool = call.tool[:200]
    step.args = clip_json(call.args, limits)
    step.id = call.id


def _call_of(message: dict[str, Any]) -> Step:
    """An assistant message as a step: its action in `text` and, of its first function call,
    the tool, parsed args and id (tool None when it has none)."""
    said = Step(seq=0, kind="message", text=str(message.get("action") or "").strip())
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return said
    function = calls[0].get("function") if isinstance(calls[0].get("function"), dict) else {}
    tool = function.get("name")
    if not isinstance(tool, str) or not tool:
        return said
    args = parse_json_text(function.get("arguments"))
    call_id = calls[0].get("id")
    said.tool, said.args = tool, args if args is not None else {}
    said.id = str(call_id) if call_id else None
    return said


def _metadata(small: dict[str, Any], info: dict[str, Any], task: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"agent": "swe-agent"}
    if isinstance(small.get("environment"), str):
        meta["environment"] = small["environment"]
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
    model = _model_name(small.get("replay_config"))
    if model:
        meta["model"] = model
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
