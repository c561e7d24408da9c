"""ATIF, Harbor's Agent Trajectory Interchange Format (`trajectory.json`), `ATIF-v1.0` to
`ATIF-v1.7` (and the bare `"1.x"` some writers emit).

One JSON object per file, read member by member (`steps` item by item), one run per file
(id = `session_id`, else `trajectory_id`, else the file name):

- `agent {name, version, model_name}` -> metadata; `final_metrics` -> metadata (the step
  metrics are summed on the steps themselves: `final_metrics` may be zero when they are not).
- Each step (`step_id`, `timestamp`, `source`: system|user|agent, `message`: text or content
  parts): `user` -> a `user` step, `system` -> a `system` step, `agent` -> its
  `reasoning_content` a `reasoning` step and its `message` an `assistant` step (either left
  out when empty). `is_copied_context: true` steps (replayed after summarization) are
  skipped and counted in `metadata["copied_context_steps"]`.
- `tool_calls [{tool_call_id, function_name, arguments}]` -> `tool_call` steps (batch_id =
  `step-<step_id>`); `observation.results [{source_call_id?, content?, extra?}]` in the
  same step are their results: by `source_call_id`, else by position among the step's calls
  still without a result. Content that is content parts is read as text; content that is a
  JSON object (off-spec writers) is kept as that object.
- A result that no call of its step claims (results on `system` steps, the off-spec
  openagents writer) is kept as a call of its own: tool = the result's or its step's
  `extra.tool`/`extra.event_type`, else "(unknown)"; args = the `command`/`cmd`/`input`/
  `arguments` the content object names, else {}.
- Status, explicit first: `results[].extra` `is_error: true` or `status: "error"|"failed"`;
  an object content with `passed`/`success` false, `is_error` true or a non-zero
  `exit_code`/`exitCode`/`returncode`. Otherwise the common text rules (`text_errors`) read
  the content text (or the object's `output`/`stderr`/`error` text).
- An `agent` step with no tool calls whose observation reports a parse error ("parsing
  errors", Terminus-2's "ERROR: Missing required field…") -> a `tool_call` step
  "(format error)" with status "invalid": the model produced no valid action.
- Tokens: step `metrics` prompt_tokens -> tokens_in, completion_tokens -> tokens_out,
  cost_usd -> cost, on the step's first step.
- Sub-agents: `subagent_trajectories[]` (v1.7) are read into the same run, each under the
  call whose result names it by `subagent_trajectory_ref` (`trajectory_id`/`session_id`),
  else as a root of its own (its steps follow that call in the run), each in a lane of its
  own (another agent). Refs to separate files (`trajectory_path`) are listed in
  `metadata["subagent_files"]`; `continued_trajectory_ref` in metadata.
- Also read: `"observation": {"type": "tool_result", "content"|"result"}` (no `results`
  array) from in-house writers, as one result.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, number, parse_time
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import Limits, iter_members

name = "atif"
label = "ATIF trajectory (Harbor / Terminal-Bench)"

VERSION = re.compile(r"^(?:ATIF-)?v?1\.\d+$")
SOURCES = {"system", "user", "agent"}
FORMAT_ERROR = "(format error)"
PARSE_ERROR = re.compile(
    r"parsing errors?|^ERROR: (?:Missing required field|Invalid JSON|No valid)", re.M | re.I
)
ARG_KEYS = ("command", "cmd", "input", "arguments", "args")
ERROR_TEXT_KEYS = ("output", "stderr", "error", "stdout", "result")


# --- detection


def claim(sample: Sample) -> Claim:
    """One JSON object with `schema_version: "ATIF-v1.x"` and `steps` of
    `{step_id, source}`."""
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object")
    version = top.get("schema_version")
    steps = top.get("steps")
    atif_steps = isinstance(steps, list) and any(
        isinstance(s, dict) and "step_id" in s and s.get("source") in SOURCES for s in steps
    )
    if isinstance(version, str) and version.startswith("ATIF-"):
        return Claim(0.97, f"`schema_version` is {version!r}")
    if isinstance(version, str) and VERSION.match(version) and atif_steps:
        return Claim(0.8, f"`schema_version` {version!r} and steps with `step_id`/`source`")
    if atif_steps and isinstance(top.get("agent"), dict):
        return Claim(0.6, "an `agent` object and steps with `step_id`/`source`, no version")
    return Claim.no("no `schema_version: ATIF-…` and no `steps` with `step_id` and `source`")


# --- reading


@dataclass
class _State:
    source: str
    limits: Limits
    skips: Skips
    run: Run
    meta: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, Step] = field(default_factory=dict)  # sub-agent trajectory/session id -> call
    main: list[Step] = field(default_factory=list)
    counter: int = 0
    copied: int = 0
    sources: Counter = field(default_factory=Counter)

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def add(self, step: Step, branch: str) -> Step:
        add_step(self.run, step, limits=self.limits, source=self.source)
        self.counter += 1
        step.id = f"{branch}{self.counter}"
        return step


def _run_id(meta: dict[str, Any], source: str) -> str:
    return str(
        meta.get("session_id") or meta.get("trajectory_id") or os.path.basename(source) or "run"
    )


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of an ATIF trajectory file."""
    skips = Skips()
    state = _State(source, limits, skips, Run(id=_run_id({}, source), format=name))
    subagents: list[tuple[int, Any]] = []
    seen_steps = False
    members = iter_members(
        stream,
        source=source,
        limits=limits,
        arrays={"steps": None, "subagent_trajectories": None},
    )
    for key, index, value in members:
        if key == "steps" and index is not None:
            seen_steps = True
            _step_safely(state, value, index, "", "steps")
        elif key == "subagent_trajectories" and index is not None:
            subagents.append((index, value))  # read after the main steps, to find their call
        else:
            _root_member(state, key, value)
            state.run.id = _run_id(state.meta, source)
    if not seen_steps:
        raise TraceError("no `steps` array: not an ATIF trajectory", source=source, field="steps")
    main = list(state.steps)
    under: dict[str, list[Step]] = {}  # call id -> the sub-agent steps it started
    for index, trajectory in subagents:
        start = len(state.steps)
        parent = _subagent(state, trajectory, index)
        under.setdefault(parent or "", []).extend(state.steps[start:])
    if len(state.steps) > len(main):  # sub-agents present
        ordered: list[Step] = []  # each sub-agent right after the call that started it
        for step in main:
            ordered.append(step)
            ordered.extend(under.pop(step.id, []))
        state.run.steps = ordered + [step for steps in under.values() for step in steps]
    if state.copied:
        state.meta["copied_context_steps"] = state.copied
    run = state.run
    run.id, run.metadata = _run_id(state.meta, source), state.meta
    run.name = run.id
    yield finish_run(skips.apply(run))


def _root_member(state: _State, key: str, value: Any) -> None:
    meta = state.meta
    if key in ("schema_version", "session_id", "trajectory_id", "continued_trajectory_ref"):
        if isinstance(value, str | int) and not isinstance(value, bool):
            meta[key] = value
    elif key == "agent" and isinstance(value, dict):
        for field_, target in (
            ("name", "agent"),
            ("version", "agent_version"),
            ("model_name", "model"),
        ):
            if isinstance(value.get(field_), str):
                meta[target] = value[field_]
    elif key == "final_metrics" and isinstance(value, dict):
        meta["final_metrics"] = {
            k: v for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
    elif key == "notes" and isinstance(value, str):
        meta["notes"] = value[:2000]


def _step_safely(state: _State, value: Any, index: int, branch: str, where: str) -> list[Step]:
    try:
        return _step(state, value, branch)
    except TooManySteps:
        raise
    except TraceError as exc:
        state.skips.add(TraceError(exc.reason, source=state.source, field=f"{where}[{index}]"))
        return []


def _step(state: _State, raw: Any, branch: str) -> list[Step]:
    if not isinstance(raw, dict):
        raise TraceError(f"expected an object, got {type(raw).__name__}", source=state.source)
    source = raw.get("source")
    if source not in SOURCES:
        raise TraceError(f"unknown step source {source!r}", source=state.source)
    if raw.get("is_copied_context") is True:
        state.copied += 1
        return []
    limits = state.limits
    when = parse_time(raw.get("timestamp"))
    batch = f"step-{raw.get('step_id')}"
    made: list[Step] = []
    message = content_text(raw.get("message"))
    if source == "agent":
        reasoning = raw.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning.strip():
            made.append(state.add(text_step("reasoning", reasoning, limits=limits), branch))
        if message.strip() or not raw.get("tool_calls"):
            made.append(state.add(text_step("assistant", message, limits=limits), branch))
    else:
        made.append(state.add(text_step(source, message, limits=limits), branch))
    calls: list[tuple[str | None, Step]] = []
    tool_calls = raw.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if not isinstance(call, dict):
            state.skips.note(
                f"{state.source}: step {raw.get('step_id')}: a tool call is not an object"
            )
            continue
        step = tool_step(
            tool=str(call.get("function_name") or ""), args=call.get("arguments"), limits=limits
        )
        step.batch_id = batch
        call_id = call.get("tool_call_id")
        calls.append((None if call_id is None else str(call_id), state.add(step, branch)))
        made.append(step)
    results = _results(raw.get("observation"))
    if source == "agent" and not calls and any(_parse_error(r) for r in results):
        step = tool_step(tool=FORMAT_ERROR, args={"message": message}, limits=limits)
        text = "\n".join(content_text(r.get("content")) for r in results)
        set_result(step, text, error=True, limits=limits)
        step.status = "invalid"
        step.batch_id = batch
        made.append(state.add(step, branch))
        results = []
    open_calls = list(calls)
    for result in results:
        made.extend(_result(state, raw, result, open_calls, branch, batch))
    metrics = raw.get("metrics")
    if isinstance(metrics, dict) and made:
        made[0].tokens_in = number(metrics.get("prompt_tokens"))
        made[0].tokens_out = number(metrics.get("completion_tokens"))
        made[0].cost = fnumber(metrics.get("cost_usd"))
    for step in made:
        step.started_at = when
    if isinstance(raw.get("model_name"), str):
        state.meta.setdefault("model", raw["model_name"])
    state.sources[source] += 1
    return made


def _results(observation: Any) -> list[dict[str, Any]]:
    if not isinstance(observation, dict):
        return []
    results = observation.get("results")
    if isinstance(results, list):
        return [r for r in results if isinstance(r, dict)]
    if "content" in observation or "result" in observation:  # in-house `{type: tool_result}`
        content = observation.get("content", observation.get("result"))
        return [{"content": content, "source_call_id": observation.get("source_call_id")}]
    return []


def _result(
    state: _State,
    raw: dict[str, Any],
    result: dict[str, Any],
    open_calls: list[tuple[str | None, Step]],
    branch: str,
    batch: str,
) -> list[Step]:
    content = result.get("content")
    value = content if isinstance(content, dict) else content_text(content)
    call_id = result.get("source_call_id")
    target = None
    if call_id is not None:
        target = next((c for c in open_calls if c[0] == str(call_id)), None)
    elif open_calls:
        target = open_calls[0]
    made: list[Step] = []
    if target is not None:
        open_calls.remove(target)
        step = target[1]
    else:
        step = state.add(_call_of_result(state, raw, result, content), branch)
        step.batch_id = batch
        made.append(step)
    set_result(step, value, error=_is_error(result, content), limits=state.limits)
    for ref in result.get("subagent_trajectory_ref") or []:
        if isinstance(ref, dict):
            for key in ("trajectory_id", "session_id"):
                if isinstance(ref.get(key), str):
                    state.refs.setdefault(ref[key], step)
            if isinstance(ref.get("trajectory_path"), str):
                state.meta.setdefault("subagent_files", []).append(ref["trajectory_path"][:500])
    return made


def _call_of_result(
    state: _State, raw: dict[str, Any], result: dict[str, Any], content: Any
) -> Step:
    """A result no call claims: a call of its own, named by what the writer says it was."""
    tool = None
    for extra in (result.get("extra"), raw.get("extra")):
        if isinstance(extra, dict):
            tool = tool or extra.get("tool") or extra.get("tool_name") or extra.get("event_type")
    args: dict[str, Any] = {}
    if isinstance(content, dict):
        args = {k: content[k] for k in ARG_KEYS if k in content}
    state.skips.note(
        f"{state.source}: step {raw.get('step_id')}: a result without a tool call; kept as a "
        f"call of its own ({tool or '(unknown)'})"
    )
    return tool_step(
        tool=str(tool) if isinstance(tool, str) else "", args=args, limits=state.limits
    )


def _is_error(result: dict[str, Any], content: Any) -> bool:
    extra = result.get("extra")
    if isinstance(extra, dict):
        if extra.get("is_error") is True or extra.get("status") in ("error", "failed"):
            return True
        if extra.get("is_error") is False or extra.get("status") in ("ok", "success"):
            return False
    if isinstance(content, dict):
        for key in ("passed", "success", "ok"):
            if isinstance(content.get(key), bool):
                return not content[key]
        if isinstance(content.get("is_error"), bool):
            return content["is_error"]
        for key in ("exit_code", "exitCode", "returncode", "return_code"):
            code = number(content.get(key))
            if code is not None:
                return code != 0
        text = "\n".join(content_text(content[k]) for k in ERROR_TEXT_KEYS if k in content)
        return text_errors.is_error(text)
    return text_errors.is_error(content_text(content))


def _parse_error(result: dict[str, Any]) -> bool:
    text = (
        content_text(result.get("content")) if not isinstance(result.get("content"), dict) else ""
    )
    return bool(PARSE_ERROR.search(text[:2000]))


def _subagent(state: _State, trajectory: Any, index: int) -> str | None:
    """Read an embedded sub-agent; return the id of the call it hangs under, if any."""
    where = f"subagent_trajectories[{index}]"
    if not isinstance(trajectory, dict) or not isinstance(trajectory.get("steps"), list):
        state.skips.add(
            TraceError("not a trajectory with `steps`", source=state.source, field=where)
        )
        return None
    parent = None
    for key in ("trajectory_id", "session_id"):
        if isinstance(trajectory.get(key), str) and trajectory[key] in state.refs:
            parent = state.refs[trajectory[key]]
            break
    previous = parent.id if parent is not None else None
    for number_, raw in enumerate(trajectory["steps"]):
        for step in _step_safely(state, raw, number_, f"a{index}.", f"{where}.steps"):
            step.parent_id = previous
            step.lane = f"agent:{index}"
            previous = step.id
    return parent.id if parent is not None else None
