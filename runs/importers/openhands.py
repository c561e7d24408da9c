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
- An `error` observation with `cause: null` and a `tool_call_metadata.function_name` (the
  model's call was rejected before it ran: a missing or unknown argument, an unknown tool)
  -> a `tool_call` step of its own, tool = that function name, status "invalid" (no valid
  action, whatever the text says); one without a function name -> a failed step of tool
  "(error)"; any other observation whose action is unknown -> a failed step of its own.
- `tool_call_id` repeats across runs (`toolu_01…`), so nothing is keyed by it.

Reading streams: the GUI array is read event by event (reading.iter_document, prefix
`item`); an eval line is read up to max_line_bytes and then streamed too (reading.iter_members:
`history` event by event, only the row fields of the metadata built, the dataset row
`instance` and `test_result` skipped). A bad line (not JSON, too long, no `history`) is
skipped and counted on the next run (the last run for lines after it).

Any length: a run's steps go into a step spool (kit.spool), so it is read in the memory of the
spool's window (an eval line itself is read whole first: at most max_line_bytes). An
observation names its action by id among the newest MAX_ACTIONS actions with an id, which are
held until they go (an observation naming an older one reads as one whose action is unknown);
the legacy schema's action waiting for its observation is held too. The model responses
whose usage is taken are kept as 64-bit hashes (kit.spool.HashSet).
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, number, parse_time
from .detect import Claim, Sample, share
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import HashSet, Recent, StepSpool
from .reading import Limits, first_byte, iter_document, iter_members

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
#: Actions with an id an observation may name (the newest; each is held in memory).
MAX_ACTIONS = 4096
ROW_FIELDS = frozenset(
    (
        "instance_id",
        "instruction",
        "metadata",
        "metrics",
        "error",
        "success",
        "issue_type",
        "max_iterations",
    )
)


def claim(sample: Sample) -> Claim:
    """A bare array of OpenHands events (`action`/`observation` with a `source`), or objects
    (JSONL rows, or one document) whose `history` holds such events, beside eval fields."""
    top = sample.top
    if sample.layout == "json" and isinstance(top, list):
        events = [e for e in top if isinstance(e, dict)]
        fit = share(events, _is_event)
        sourced = any(_is_event(e) and e.get("source") in SOURCES for e in events)
        if fit == 0 or not sourced:
            return Claim.no(
                "the array's items are not OpenHands events (`action`/`observation` with `source`)"
            )
        return Claim(round(0.6 + 0.3 * fit, 2), f"an array of OpenHands events ({fit:.0%})")
    rows = sample.objects() if sample.layout == "jsonl" else [top] if isinstance(top, dict) else []
    if not rows:
        return Claim.no("no JSON object or array of events")
    if any(isinstance(r.get("trajectory"), list) for r in rows):
        return Claim.no("a `trajectory` array (SWE-agent), not `history`")
    with_history = [r for r in rows if isinstance(r.get("history"), list)]
    marked = share(rows, _has_eval_fields)
    events = [e for r in with_history for e in _flatten(r["history"])[:50]]
    fit = share(events, _is_event)
    if with_history and fit > 0:
        score = 0.7 + 0.1 * fit + 0.1 * marked
        return Claim(
            round(score, 2),
            f"`history` of OpenHands events ({fit:.0%})"
            + (" beside eval fields (`instance_id`, `instruction`, `metadata`)" if marked else ""),
        )
    if marked and any(
        isinstance(r.get("metadata"), dict) and "agent_class" in r["metadata"] for r in rows
    ):
        return Claim(0.6, "eval rows with `metadata.agent_class` (no event seen yet)")
    return Claim.no("no `history` of OpenHands events")


SOURCES = {"agent", "user", "environment"}


def _is_event(event: Any) -> bool:
    return isinstance(event, dict) and (
        isinstance(event.get("action"), str) or isinstance(event.get("observation"), str)
    )


def _has_eval_fields(row: dict[str, Any]) -> bool:
    return any(key in row for key in ("instance_id", "instruction", "agent_class")) or (
        isinstance(row.get("metadata"), dict) and "agent_class" in row["metadata"]
    )


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per eval line, or the one run of a GUI export, event by event."""
    if not hasattr(stream, "peek"):
        stream = io.BufferedReader(stream)  # type: ignore[arg-type]
    if first_byte(stream) == b"[":
        builder = _Builder(limits, source, os.path.basename(source) or "run")
        for index, event in enumerate(iter_document(stream, "item", source=source, limits=limits)):
            builder.add(event, index)
        if not builder.events:
            raise TraceError(
                "no OpenHands event (`action` or `observation`) in the array", source=source
            )
        yield _run(builder.run.id, builder, {}, limits, source)
        return
    yield from _eval_runs(stream, source=source, limits=limits)


def _eval_runs(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """One run per line; each line is streamed too (its `history` event by event, the
    dataset row `instance` and `test_result` skipped), so a long line is not held twice."""
    skips = Skips()
    base = os.path.basename(source) or "run"
    pending: Run | None = None
    for line, raw in _lines(stream, limits, skips, source):
        try:
            run = _eval_run(raw, line, base, limits, source)
        except TooManySteps:
            raise
        except TraceError as exc:
            skips.add(TraceError(exc.reason, source=source, line=line, field=exc.field))
            continue
        if pending is not None:
            yield pending
        pending = run
        skips.apply(run)  # what was skipped before this run goes on it
        skips.count, skips.warnings = 0, []
    if pending is None:
        raise skips.first or TraceError("empty file: no records", source=source)
    yield skips.apply(pending)  # and what came after the last run, on the last


def _eval_run(raw: bytes, line: int, base: str, limits: Limits, source: str) -> Run:
    builder = _Builder(limits, source, f"{base}:{line}", line)
    row: dict[str, Any] = {}
    seen = False
    members = iter_members(
        io.BytesIO(raw),
        source=source,
        limits=limits,
        arrays={"history": None},
        keep=ROW_FIELDS | {"history"},
    )
    for key, index, value in members:
        if key == "history" and index is not None:
            seen = True
            builder.add(value, index)
        elif key != "history":
            row[key] = value
            if key == "instance_id" and value:
                builder.run.id = str(value)
    if not seen and not isinstance(row.get("history"), list):
        raise TraceError("no `history` array", field="history")
    run_id = str(row.get("instance_id") or f"{base}:{line}")
    return _run(run_id, builder, row, limits, source)


def _lines(
    stream: IO[bytes], limits: Limits, skips: Skips, source: str
) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines with their numbers; a line over max_line_bytes is skipped and
    counted without being held (it is read past in pieces)."""
    limit = limits.max_line_bytes
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            size = len(raw)
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(1 << 20)
                size += len(raw)
            skips.add(
                TraceError(
                    f"line is over {size - 1} bytes, over the limit of {limit}",
                    source=source,
                    line=number,
                )
            )
            continue
        if raw.strip():
            yield number, raw


def _run(run_id: str, builder: _Builder, row: dict[str, Any], limits: Limits, source: str) -> Run:
    meta = _metadata(row)
    if builder.skipped:
        meta["skipped_events"] = dict(builder.skipped)
    run = builder.read()
    run.id = run.name = run_id
    run.metadata = meta
    return finish_run(run)


def _flatten(history: list[Any]) -> list[Any]:
    events: list[Any] = []
    for item in history:
        if isinstance(item, list):  # oldest schema: [action, observation] pairs
            events.extend(item)
        else:
            events.append(item)
    return events


class _Builder:
    """The steps of one run, built event by event.

    An observation with a `cause` key (current schema) answers the action with that id, among
    the newest MAX_ACTIONS actions with one; one without (legacy schema) answers the action
    just before it. The steps of those actions are what the spool holds.
    """

    def __init__(self, limits: Limits, source: str, run_id: str, line: int | None = None) -> None:
        self.limits, self.source, self.line = limits, source, line
        self.spool = StepSpool(hold=self._holds)
        self.run = Run(id=run_id, format=name, steps=self.spool)  # type: ignore[arg-type]
        self.skipped: Counter = Counter()
        self.responses = HashSet()
        # event id -> its action's step (None for a message), the newest MAX_ACTIONS
        self.actions: Recent[Any, Step | None] = Recent(MAX_ACTIONS, refresh=False)
        self.kept: set[int] = set()  # id() of the steps in `actions`
        self.waiting: Step | None = None
        self.events = 0  # actions and observations seen

    def _holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change: an action an
        observation may still name."""
        return id(step) in self.kept or step is self.waiting

    def _keep(self, key: Any, step: Step | None) -> None:
        old = self.actions.get(key)
        if old is not None:
            self.kept.discard(id(old))
        gone = self.actions.put(key, step)
        if step is not None:
            self.kept.add(id(step))
        if gone is not None and gone[1] is not None:
            self.kept.discard(id(gone[1]))

    def read(self) -> Run:
        """The run, once every event is read: no step changes any more."""
        self.spool.hold = None
        self.actions.clear()
        self.kept.clear()
        self.waiting = None
        return self.run

    def add(self, item: Any, index: int) -> None:
        """Add one history item: an event, or an `[action, observation]` pair."""
        for event in item if isinstance(item, list) else [item]:
            if not isinstance(event, dict):
                self.skipped["(not an object)"] += 1
            elif "action" in event:
                self.events += 1
                args = event.get("args") if isinstance(event.get("args"), dict) else event
                step = self.action(event, args)
                if event.get("id") is not None:
                    self._keep(event["id"], step)
                self.waiting = step
            elif "observation" in event:
                self.events += 1
                extras = event.get("extras") if isinstance(event.get("extras"), dict) else event
                if "cause" in event:
                    cause = event.get("cause")
                    known = cause is not None and cause in self.actions
                    call = self.actions.get(cause) if known else None
                else:
                    call, known = self.waiting, self.waiting is not None
                    self.waiting = None
                self.observation(event, call, known=known, extras=extras)
            else:
                self.skipped["(neither action nor observation)"] += 1

    def _add(self, step: Step) -> Step:
        return add_step(self.run, step, limits=self.limits, source=self.source, line=self.line)

    def action(self, event: dict[str, Any], args: dict[str, Any]) -> Step | None:
        kind = str(event.get("action"))
        when = parse_time(event.get("timestamp"))
        if kind in MESSAGE_ACTIONS:
            role = "system" if kind == "system" else _role(event.get("source"))
            self._add(
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
            self._add(first)
        step = tool_step(
            tool=kind,
            args=call_args,
            limits=self.limits,
            id=_id(event),
            batch_id=batch,
            started_at=when,
        )
        self._add(step)
        self.usage(first or step, batch, response)
        return step

    def usage(self, step: Step, batch: str | None, response: Any) -> None:
        if batch is None or not isinstance(response, dict) or not self.responses.add(batch):
            return
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
            self._add(text_step("system", text, limits=self.limits, id=_id(event), started_at=when))
            return
        if kind in SKIPPED_OBSERVATIONS or (known and call is None):
            self.skipped[f"observation:{kind}"] += 1
            return
        rejected = False
        if call is None:
            metadata = event.get("tool_call_metadata")
            function = metadata.get("function_name") if isinstance(metadata, dict) else None
            rejected = kind == "error" and bool(function)
            tool = "(error)" if kind == "error" else kind
            call = tool_step(
                tool=str(function or tool),
                args={},
                limits=self.limits,
                id=_id(event),
                started_at=when,
            )
            self._add(call)
        content = event.get("content")
        set_result(
            call, content, error=_is_error(kind, content, extras), limits=self.limits, ended_at=when
        )
        if rejected:  # the model's call was refused before it ran: no valid action
            call.status = "invalid"


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
