"""OpenAI Codex CLI rollout JSONL (`~/.codex/sessions/…/rollout-<ts>-<uuid>.jsonl`).

Every line is `{timestamp, type, payload}`. Mapping, one run per file
(id = `session_meta.payload.id`):
- `session_meta` -> metadata (cwd, cli_version, originator, source, model_provider);
  `turn_context` -> metadata model/effort/approval_policy (first seen, `models` lists all).
- `response_item` `message`: role `user` -> `user` step, except harness-injected context
  (text starting `<environment_context>`, `<user_instructions>`, `# AGENTS.md`) and role
  `developer`/`system` -> `system` steps; role `assistant` -> `assistant` step.
  `reasoning` (summary texts, joined by newlines) -> `reasoning` step.
- `event_msg` `user_message` / `agent_message` / `agent_reasoning` repeat what the
  response items say: each is paired with a response item of the same kind and text (either
  order) and only the first of the pair becomes a step, so no text is counted twice.
  Reasoning is paired part by part: a `reasoning` item with several `summary` parts comes
  with one `agent_reasoning` event per part (or one event holding them all), before or after
  the item. Parts already seen as events are dropped from the item (all seen: no step);
  events repeating a part of a stepped item are dropped; consecutive `agent_reasoning`
  events of one response, with no item yet, form one step. Text is compared with runs of
  whitespace collapsed.
- Calls, linked to their output by `call_id` (ids made unique with `#n` when reused):
  `function_call` (tool = `name`, args = parsed JSON `arguments`), `custom_tool_call`
  (apply_patch: args `{"input": <patch>}`), `local_shell_call` (tool `local_shell`, args =
  `action`), `web_search_call` (tool `web_search`, args = `action`, no output item: result
  None, `status: "failed"` -> error). `function_call_output` / `custom_tool_call_output`
  fill the result.
- Results: `Exit code: N\nWall time: S seconds\nOutput:\n…` -> result = the text without
  the wall-time line (it changes every run and would hide repeats); older JSON
  `{"output", "metadata": {"exit_code"}}` -> result = `output`. Exit code != 0 -> error.
  Text-only errors (`text_errors.CODEX`): "apply_patch verification failed",
  "failed to parse function arguments", "execution error:", "aborted".
- `batch_id`: the model response that issued the call: consecutive model items (reasoning,
  assistant message, calls) with no output or user message between them share "resp-<n>".
- `token_count` -> `info.last_token_usage` on the first step of the latest response
  (tokens_in = input_tokens, tokens_out = output_tokens); `total_token_usage` -> metadata.
- `turn_aborted` -> a `system` step "turn aborted: <reason>", and calls of that turn still
  without output become errors. `ghost_snapshot`, `compacted`, other event types: skipped
  and counted in metadata["skipped_records"].
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, number, parse_json_text, parse_time
from .reading import JsonlReader, Limits, clip_strings, head_values

name = "codex"
label = "OpenAI Codex CLI rollout JSONL"

LINE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
CALL_TYPES = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output"}
INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<user_shell_command>")
EXIT_CODE = re.compile(r"^Exit code:\s*(-?\d+)", re.MULTILINE)
PENDING_REASONING = 50  # reasoning items whose parts may still come back as events
WALL_TIME = re.compile(r"^Wall time:.*\n?", re.MULTILINE)


def sniff(head: bytes) -> bool:
    """JSONL whose first records are `{timestamp, type: session_meta|…, payload}`."""
    values = head_values(head, max_lines=5)
    if not values:
        return False
    return all(
        isinstance(v, dict) and v.get("type") in LINE_TYPES and "payload" in v for v in values
    )


@dataclass
class _State:
    limits: Limits
    steps: list[Step] = field(default_factory=list)
    calls: dict[str, Step] = field(default_factory=dict)
    id_counts: Counter = field(default_factory=Counter)
    turn_calls: list[Step] = field(default_factory=list)
    unpaired: dict[tuple[str, str], Counter] = field(default_factory=dict)
    response: int = 0
    in_response: bool = False
    response_first: Step | None = None
    event_reasoning: Step | None = None  # the latest step built from agent_reasoning events
    reasoning_items: list[list[str]] = field(default_factory=list)  # parts no event repeated yet
    skipped: Counter = field(default_factory=Counter)
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "codex"})


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a rollout file."""
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    state = _State(limits)
    for _, record in reader:
        _record(state, record)
    reader.check_not_empty()
    if state.skipped:
        state.meta["skipped_records"] = dict(state.skipped)
    run_id = str(state.meta.get("session_id") or os.path.basename(source) or "run")
    run = Run(id=run_id, format=name, steps=state.steps, metadata=state.meta)
    yield finish_run(reader.skips.apply(run), source=source, limits=limits)


def _record(state: _State, record: dict[str, Any]) -> None:
    kind, payload = record.get("type"), record.get("payload")
    when = parse_time(record.get("timestamp"))
    if not isinstance(payload, dict):
        state.skipped[str(kind)] += 1
    elif kind == "session_meta":
        _session_meta(state.meta, payload)
    elif kind == "turn_context":
        _turn_context(state.meta, payload)
    elif kind == "response_item":
        _response_item(state, payload, when)
    elif kind == "event_msg":
        _event(state, payload, when)
    else:
        state.skipped[str(kind)] += 1


def _session_meta(meta: dict[str, Any], payload: dict[str, Any]) -> None:
    for key, target in (
        ("id", "session_id"),
        ("cwd", "cwd"),
        ("cli_version", "cli_version"),
        ("originator", "originator"),
        ("source", "source"),
        ("model_provider", "model_provider"),
    ):
        if payload.get(key) and target not in meta:
            meta[target] = payload[key] if isinstance(payload[key], str) else str(payload[key])


def _turn_context(meta: dict[str, Any], payload: dict[str, Any]) -> None:
    model = payload.get("model")
    if isinstance(model, str) and model:
        meta.setdefault("model", model)
        if model not in meta.setdefault("models", []):
            meta["models"].append(model)
    for key in ("effort", "approval_policy"):
        if payload.get(key) is not None:
            meta.setdefault(key, payload[key])


def _add(state: _State, step: Step, when: float | None, *, model: bool) -> Step:
    step.started_at = when
    if model:
        if not state.in_response:
            state.response += 1
            state.in_response = True
            state.response_first = step
        step.batch_id = f"resp-{state.response}"
    else:
        state.in_response = False
    state.steps.append(step)
    return step


def _paired(state: _State, kind: str, text: str, origin: str) -> bool:
    """Return True when this text is the twin of one already stepped (event vs item)."""
    key = text.strip()
    other = "event" if origin == "item" else "item"
    waiting = state.unpaired.setdefault((kind, other), Counter())
    if waiting[key]:
        waiting[key] -= 1
        return True
    state.unpaired.setdefault((kind, origin), Counter())[key] += 1
    return False


def _message(state: _State, kind: str, text: str, when: float | None, origin: str) -> None:
    if kind == "user" and text.lstrip().startswith(INJECTED):
        _add(state, text_step("system", text, limits=state.limits), when, model=False)
        return
    if _paired(state, kind, text, origin):
        return
    if kind == "user":
        state.turn_calls = []
    _add(state, text_step(kind, text, limits=state.limits), when, model=kind != "user")


def _key(text: str) -> str:
    return " ".join(text.split())


def _reasoning_item(state: _State, summary: Any, when: float | None) -> None:
    """One reasoning item: its summary parts, each of which may already be an event."""
    parts = [content_text(part) for part in summary] if isinstance(summary, list) else []
    parts = [part for part in parts if _key(part)]
    if not parts:
        return
    events = state.unpaired.setdefault(("reasoning", "event"), Counter())
    whole = _key("\n".join(parts))
    if len(parts) > 1 and events[whole]:  # one event held all the parts
        events[whole] -= 1
        return
    fresh = []
    for part in parts:
        if events[_key(part)]:
            events[_key(part)] -= 1
        else:
            fresh.append(part)
    if not fresh:
        return
    state.reasoning_items.append([_key(part) for part in fresh])
    del state.reasoning_items[:-PENDING_REASONING]
    _add(state, text_step("reasoning", "\n".join(fresh), limits=state.limits), when, model=True)


def _reasoning_event(state: _State, text: str, when: float | None) -> None:
    """One `agent_reasoning` event (one summary part, or all of them): dropped when it repeats
    a reasoning item already stepped; consecutive events of one response form one step."""
    key = _key(text)
    if not key:
        return
    for index, waiting in enumerate(state.reasoning_items):
        if key in waiting:
            waiting.remove(key)
        elif key != " ".join(waiting):
            continue
        else:
            waiting.clear()
        if not waiting:
            del state.reasoning_items[index]
        return
    state.unpaired.setdefault(("reasoning", "event"), Counter())[key] += 1
    last = state.steps[-1] if state.steps else None
    if last is not None and last is state.event_reasoning and state.in_response:
        last.text = clip_strings(f"{last.text}\n{text}", state.limits.max_value_chars)
        return
    step = text_step("reasoning", text, limits=state.limits)
    state.event_reasoning = _add(state, step, when, model=True)


def _response_item(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        text = content_text(payload.get("content"))
        if role in ("developer", "system"):
            _add(state, text_step("system", text, limits=state.limits), when, model=False)
        elif role in ("user", "assistant"):
            _message(state, role, text, when, "item")
    elif kind == "reasoning":
        _reasoning_item(state, payload.get("summary"), when)
    elif kind in CALL_TYPES:
        _call(state, payload, when)
    elif kind in OUTPUT_TYPES:
        _output(state, payload, when)
    else:
        state.skipped[str(kind)] += 1


def _call(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    if kind == "function_call":
        tool, args = payload.get("name"), parse_json_text(payload.get("arguments"))
    elif kind == "custom_tool_call":
        tool, args = payload.get("name"), {"input": payload.get("input")}
    elif kind == "local_shell_call":
        tool, args = "local_shell", payload.get("action")
    else:
        tool, args = "web_search", payload.get("action")
    call_id = str(payload.get("call_id") or payload.get("id") or "")
    count = state.id_counts[call_id]
    state.id_counts[call_id] += 1
    step_id = (call_id if count == 0 else f"{call_id}#{count + 1}") if call_id else None
    step = tool_step(tool=str(tool or kind), args=args, limits=state.limits, id=step_id)
    _add(state, step, when, model=True)
    state.turn_calls.append(step)
    if kind == "web_search_call":
        set_result(step, None, error=payload.get("status") == "failed", limits=state.limits)
    elif call_id:
        state.calls[call_id] = step


def _output(state: _State, payload: dict[str, Any], when: float | None) -> None:
    call = state.calls.pop(str(payload.get("call_id") or ""), None)
    state.in_response = False
    if call is None:
        call = _add(
            state, tool_step(tool="(unknown)", args={}, limits=state.limits), when, model=False
        )
        state.skipped["output_without_call"] += 1
    result, error = read_output(payload.get("output"))
    set_result(call, result, error=error, limits=state.limits, ended_at=when)


def read_output(output: Any) -> tuple[Any, bool]:
    """Return (result, is_error) for a call output string (text or JSON inside a string)."""
    if isinstance(output, dict):
        output = json.dumps(output)
    if not isinstance(output, str):
        return output, False
    parsed = parse_json_text(output)
    if isinstance(parsed, dict) and "output" in parsed:
        code = number((parsed.get("metadata") or {}).get("exit_code"))
        text = parsed["output"]
        return text, (code not in (None, 0)) or text_errors.matches(text, text_errors.CODEX)
    match = EXIT_CODE.search(output[:500])
    if match:
        return WALL_TIME.sub("", output, count=1), int(match.group(1)) != 0
    return output, text_errors.matches(output, text_errors.CODEX)


def _event(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    if kind == "user_message":
        _message(state, "user", str(payload.get("message") or ""), when, "event")
    elif kind == "agent_message":
        _message(state, "assistant", str(payload.get("message") or ""), when, "event")
    elif kind == "agent_reasoning":
        _reasoning_event(state, str(payload.get("text") or ""), when)
    elif kind == "token_count":
        _tokens(state, payload.get("info"))
    elif kind == "turn_aborted":
        _aborted(state, str(payload.get("reason") or "aborted"), when)
    else:
        state.skipped[f"event:{kind}"] += 1


def _tokens(state: _State, info: Any) -> None:
    if not isinstance(info, dict):
        return
    if isinstance(info.get("total_token_usage"), dict):
        state.meta["total_token_usage"] = info["total_token_usage"]
    last = info.get("last_token_usage")
    step = state.response_first
    if isinstance(last, dict) and step is not None and step.tokens_in is None:
        step.tokens_in = number(last.get("input_tokens"))
        step.tokens_out = number(last.get("output_tokens"))


def _aborted(state: _State, reason: str, when: float | None) -> None:
    for call in state.turn_calls:
        if call.result is None and call.status == "ok" and call.tool != "web_search":
            set_result(call, f"turn aborted: {reason}", error=True, limits=state.limits)
    state.turn_calls = []
    _add(
        state,
        text_step("system", f"turn aborted: {reason}", limits=state.limits),
        when,
        model=False,
    )
