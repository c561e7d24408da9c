"""OpenHands event streams: eval `output.jsonl`, the GUI trajectory export, legacy history.

Containers:
- eval/resolver `output.jsonl`: one run per line (id `instance_id`, else "<file>:<line>");
  metadata model (`metadata.llm_config.model`), agent (`agent_class`), cost
  (`metrics.accumulated_cost`), `error`, `instruction`. Invalid lines are skipped and counted.
- GUI export: a bare JSON array of events -> one run (id = file name).
- `history` in the current schema (events with `id`), the legacy flat schema (actions and
  observations alternating, args inline, no ids: paired by order) or the older
  `[[action, observation], …]` pairs (flattened to the legacy order).

Events -> steps (linear: parent_id stays None; `cause` is used only to pair):
- `message` action -> `user`/`assistant`/`system` step by `source` (legacy without source:
  `user`); `system` action -> `system` step; `recall` observation -> `system` step (the
  recalled context). Skipped, counted in metadata["skipped_events"]: `recall` and
  `change_agent_state` actions, `agent_state_changed` and `null` observations, and
  observations answering a message/system action.
- Every other action (`run`, `read`, `edit`, `run_ipython`, `browse`, `think`, `finish`, …)
  -> ONE `tool_call` step: tool = the `action` type, args = `args` (legacy: the inline
  fields) without bookkeeping keys (`thought`, `confirmation_state`, `is_confirmed`,
  `action_risk`, `security_risk`, `impl_source`, `translated_ipython_code`,
  `kernel_init_code`, `keep_prompt`), so they do not split identical calls. A non-empty
  `thought` becomes an `assistant` step just before the call (for `think`, the thought IS
  the argument and stays in args). result = the observation's `content`, id = event id,
  `batch_id` = the model response id (`tool_call_metadata.model_response.id`); tokens from
  that response's `usage` on the first step of the response.
- Errors: `observation: "error"`; `extras.metadata.exit_code` (legacy: `exit_code`) != 0,
  which includes -1 (command still running / timed out); text (`text_errors.OPENHANDS`):
  content starting "ERROR:", "[Your proposed edit has introduced new syntax error(s)",
  "[No exact match found", and "Traceback (most recent call last)" for observations with no
  exit code (IPython).
- An `error` observation with `cause: null` (the call was rejected before running) -> a
  failed `tool_call` step of its own (tool = `tool_call_metadata.function_name`, else
  "(error)"); any other observation whose action is unknown -> its own step likewise.
- `tool_call_id` repeats across runs (`toolu_01…`), so nothing is keyed by it.
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, fnumber, number, parse_time
from .errors import TraceError
from .reading import JsonlReader, Limits, head_text, read_document

name = "openhands"
label = "OpenHands trajectory / eval output"

NOISE = {
    "action",
    "thought",
    "confirmation_state",
    "is_confirmed",
    "action_risk",
    "security_risk",
    "impl_source",
    "translated_ipython_code",
    "kernel_init_code",
    "keep_prompt",
}
MESSAGE_ACTIONS = {"message", "system"}
SKIPPED_ACTIONS = {"recall", "change_agent_state"}
SKIPPED_OBSERVATIONS = {"agent_state_changed", "null"}
_EVENT = re.compile(r'"(action|observation)"\s*:\s*"')
_SOURCE = re.compile(r'"source"\s*:\s*"(agent|user|environment)"')


def sniff(head: bytes) -> bool:
    """A bare array of OpenHands events, or JSONL objects with `history` of OpenHands events."""
    text = head_text(head, len(head))
    if text.startswith("["):
        first = text[:4000]
        return re.match(r"\[\s*\{", first) is not None and bool(
            _SOURCE.search(first) and _EVENT.search(first)
        )
    if not text.startswith("{") or re.search(r'"trajectory"\s*:\s*\[', text):
        return False
    history = re.search(r'"history"\s*:\s*\[', text)
    marker = any(f'"{k}"' in text for k in ("instance_id", "instruction", "agent_class"))
    if history and marker and _EVENT.search(text, history.end()):
        return True
    return '"agent_class"' in text and '"llm_config"' in text and marker


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per eval line, or the one run of a GUI export."""
    if not hasattr(stream, "peek"):
        stream = io.BufferedReader(stream)  # type: ignore[arg-type]
    first = stream.peek(64).lstrip()[:1]  # type: ignore[attr-defined]
    if first == b"[":
        events = read_document(stream, source=source, limits=limits)
        if not isinstance(events, list):
            raise TraceError("expected a JSON array of events", source=source)
        yield _run(os.path.basename(source) or "run", events, {}, limits, source)
        return
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    for number_, row in reader:
        history = row.get("history")
        if not isinstance(history, list):
            reader.reject(
                TraceError("no `history` array", source=source, line=number_, field="history")
            )
            continue
        run_id = str(row.get("instance_id") or f"{os.path.basename(source) or 'run'}:{number_}")
        run = _run(run_id, history, row, limits, source)
        yield reader.skips.apply(run)
    reader.check_not_empty()


def _run(run_id: str, history: list[Any], row: dict[str, Any], limits: Limits, source: str) -> Run:
    events = _flatten(history)
    builder = _Builder(limits)
    if any(isinstance(e, dict) and "id" in e for e in events):
        builder.current(events)
    else:
        builder.legacy(events)
    meta = _metadata(row)
    if builder.skipped:
        meta["skipped_events"] = dict(builder.skipped)
    run = Run(id=run_id, format=name, steps=builder.steps, metadata=meta)
    return finish_run(run, source=source, limits=limits)


def _flatten(history: list[Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for item in history:
        if isinstance(item, list):  # oldest schema: [action, observation] pairs
            events.extend(e for e in item if isinstance(e, dict))
        elif isinstance(item, dict):
            events.append(item)
    return events


@dataclass
class _Builder:
    limits: Limits
    steps: list[Step] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    responses: set[str] = field(default_factory=set)

    def current(self, events: list[dict[str, Any]]) -> None:
        actions: dict[Any, Step | None] = {}
        for event in events:
            if "action" in event:
                actions[event.get("id")] = self.action(event, event.get("args") or {})
            elif "observation" in event:
                cause = event.get("cause")
                self.observation(
                    event,
                    actions.get(cause),
                    known=cause in actions,
                    extras=event.get("extras") or {},
                )

    def legacy(self, events: list[dict[str, Any]]) -> None:
        waiting: Step | None = None
        for event in events:
            if "action" in event:
                waiting = self.action(event, event)
            elif "observation" in event:
                self.observation(event, waiting, known=waiting is not None, extras=event)
                waiting = None

    def action(self, event: dict[str, Any], args: dict[str, Any]) -> Step | None:
        kind = str(event.get("action"))
        when = parse_time(event.get("timestamp"))
        if kind in MESSAGE_ACTIONS:
            role = "system" if kind == "system" else _role(event.get("source"))
            self.steps.append(
                text_step(
                    role,
                    content_text(args.get("content")),
                    limits=self.limits,
                    id=_id(event),
                    started_at=when,
                )
            )
            return None
        if kind in SKIPPED_ACTIONS:
            self.skipped[f"action:{kind}"] += 1
            return None
        thought = args.get("thought")
        call_args = {
            k: v
            for k, v in args.items()
            if k not in NOISE and k not in ("timestamp", "source", "message", "id")
        }
        if kind == "think":
            call_args["thought"] = thought
        response = (event.get("tool_call_metadata") or {}).get("model_response") or {}
        batch = (
            str(response.get("id")) if isinstance(response, dict) and response.get("id") else None
        )
        first: Step | None = None
        if isinstance(thought, str) and thought.strip() and kind != "think":
            first = text_step(
                "assistant", thought, limits=self.limits, batch_id=batch, started_at=when
            )
            self.steps.append(first)
        step = tool_step(
            tool=kind,
            args=call_args,
            limits=self.limits,
            id=_id(event),
            batch_id=batch,
            started_at=when,
        )
        self.steps.append(step)
        self.usage(first or step, batch, response)
        return step

    def usage(self, step: Step, batch: str | None, response: Any) -> None:
        if batch is None or batch in self.responses or not isinstance(response, dict):
            return
        self.responses.add(batch)
        usage = response.get("usage") or {}
        step.tokens_in = number(usage.get("prompt_tokens"))
        step.tokens_out = number(usage.get("completion_tokens"))

    def observation(
        self, event: dict[str, Any], call: Step | None, *, known: bool, extras: dict[str, Any]
    ) -> None:
        kind = str(event.get("observation"))
        when = parse_time(event.get("timestamp"))
        if kind == "recall":
            text = content_text(event.get("content")) or "recall"
            self.steps.append(
                text_step("system", text, limits=self.limits, id=_id(event), started_at=when)
            )
            return
        if kind in SKIPPED_OBSERVATIONS or (known and call is None):
            self.skipped[f"observation:{kind}"] += 1
            return
        if call is None:
            function = (event.get("tool_call_metadata") or {}).get("function_name")
            tool = "(error)" if kind == "error" else kind
            call = tool_step(
                tool=str(function or tool),
                args={},
                limits=self.limits,
                id=_id(event),
                started_at=when,
            )
            self.steps.append(call)
        content = event.get("content")
        set_result(
            call, content, error=_is_error(kind, content, extras), limits=self.limits, ended_at=when
        )


def _is_error(kind: str, content: Any, extras: dict[str, Any]) -> bool:
    if kind == "error":
        return True
    metadata = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
    code = number(metadata.get("exit_code", extras.get("exit_code")))
    if code is not None and code != 0:
        return True
    # an exit code is the explicit signal; without one (IPython, edits) the common rules read
    return text_errors.error_rule(content, text_errors.OPENHANDS, common=code is None) is not None


def _role(source: Any) -> str:
    return {"agent": "assistant", "environment": "system"}.get(str(source), "user")


def _id(event: dict[str, Any]) -> str | None:
    return None if event.get("id") is None else str(event["id"])


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"agent": "openhands"}
    metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    model = (metadata.get("llm_config") or {}).get("model")
    if model:
        meta["model"] = str(model)
    if metadata.get("agent_class"):
        meta["agent"] = str(metadata["agent_class"])
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    if fnumber(metrics.get("accumulated_cost")) is not None:
        meta["cost"] = fnumber(metrics["accumulated_cost"])
    for key in ("instance_id", "error", "success", "issue_type", "max_iterations"):
        if row.get(key) is not None:
            meta[key] = row[key]
    if isinstance(row.get("instruction"), str):
        meta["task"] = row["instruction"][:500]
    return meta
