"""pi coding agent session JSONL (`@mariozechner/pi-coding-agent`, session versions 1–3, and
the GJC fork), `~/.pi/agent/sessions/--<cwd>--/<timestamp>_<uuid>.jsonl`.

One run per file. Every line is an entry `{type, id?, parentId?, timestamp, …}`:

- `session` (the header: `id`, `version` 2|3 or none for v1, `cwd`, `parentSession`, v1's
  `provider`/`modelId`/`thinkingLevel`) -> run id and metadata; not part of the tree.
- `message {message}` by `message.role`:
  - `user` -> a `user` step (content text; images show as `[image]`);
  - `assistant` -> its `thinking` blocks one `reasoning` step, its `text` blocks one
    `assistant` step, each `toolCall {id, name, arguments}` a `tool_call` step (batch_id =
    the entry id). Tokens on the entry's first step: tokens_in = input + cacheRead +
    cacheWrite, tokens_out = output, cost = `usage.cost.total` (USD). `stopReason` "aborted"
    or "error" adds a `system` step "turn <reason>: <errorMessage>", and that turn's calls
    that never get a result become errors (result says they were not run);
  - `toolResult` (and `tool`, written by tools that rewrite pi sessions) -> the result of the
    call with `toolCallId`: the content text, `isError: true` -> error. Only when `isError`
    is absent do the common text rules (`text_errors`) decide. A result whose call is not in
    the file is kept as a call of its own (tool = `toolName`), with a warning;
  - `bashExecution` (a command the *user* ran with `!cmd`) -> a `user` step
    "$ <command>\\n<output>" with the exit code, not an agent call;
  - `custom`/`hookMessage`, `branchSummary`, `compactionSummary` -> `system` steps.
- `custom_message` (extension-injected context), `compaction`, `branch_summary` -> `system`
  steps; `model_change` / `thinking_level_change` -> metadata (`models`); `session_info`
  -> the run's name; `custom`, `label` and unknown types -> skipped, counted in
  `metadata["skipped_records"]`.
- Tree: v2/v3 entries carry `id` (8 hex) and `parentId` (null on the first). Branching
  (retry, edit, `/tree`) adds a second child to an earlier entry; every branch is kept, as a
  sibling sub-tree by `parent_id`. A step's parent is the last step of the nearest ancestor
  entry that made a step; steps of one entry chain in order; a `parentId` not in the file
  (a file starting mid-tree) makes a root. v1 files have no ids: an entry's parent is the
  entry before it (as pi does when it migrates them). A file without any fork imports as a
  linear run (no parent ids).
- `pi --mode json` event streams: `message_end {message}` is read like a `message` entry,
  in line order; `tool_execution_end {toolCallId, result, isError}` gives a result when no
  toolResult message does. Other stream events (`message_update`, `turn_end`, …) repeat
  these and are skipped.
- Times: entry `timestamp` (ISO), else `message.timestamp` (epoch ms); a result's
  `ended_at` is its own time.
- **Any length**: the steps go into a step spool (kit.spool), so a session is read in the
  memory of the spool's window; a call waiting for its result is held (`_State.holds`). A
  run that stays one chain until its first fork keeps no parent ids while it does: a run
  that never forks needs none, and one that forks gets them back in one pass at the end.
  What the reader looks back at is bounded: the newest MAX_ENTRIES entries a `parentId` may
  name (an older one reads as a parent not in the file: a root), MAX_OPEN_CALLS calls
  waiting for their result (a result for an older one is kept as a call of its own), and
  every call id read as a 64-bit hash (kit.spool.HashSet) to tell a repeated one.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, number, parse_time
from .detect import Claim, Sample
from .errors import TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import HashSet, Recent, StepSpool
from .reading import JsonlReader, Limits

name = "pi"
label = "pi coding agent session JSONL"

ENTRY_TYPES = {
    "session",
    "message",
    "model_change",
    "thinking_level_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
}
STREAM_TYPES = {
    "agent_start",
    "agent_end",
    "turn_start",
    "turn_end",
    "message_start",
    "message_update",
    "message_end",
    "tool_execution_start",
    "tool_execution_update",
    "tool_execution_end",
}
ROLES = {"user", "assistant", "toolResult", "tool", "bashExecution", "custom", "hookMessage"}
RESULT_ROLES = {"toolResult", "tool"}
SYSTEM_ROLES = {"custom", "hookMessage", "branchSummary", "compactionSummary"}
NOT_RUN = "[not run: the turn ended with stopReason {reason!r}{detail}]"
# A session of any length is read in bounded memory: its steps are spooled (kit.spool; a call
# waiting for its result is held, see `_State.holds`), and what the reader looks back at is
# bounded too.
MAX_ENTRIES = 65536  # entries a later `parentId` may name (the newest; an older one is a root)
MAX_OPEN_CALLS = 8192  # calls waiting for their result (the oldest is given up)
MAX_COUNTED_KINDS = 50  # skipped entry types counted by name; the rest count as "(other)"


# --- detection


def _pi_message(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    message = record.get("message")
    if record.get("type") in ("message", "message_end") and isinstance(message, dict):
        return message.get("role") in ROLES or message.get("role") in SYSTEM_ROLES
    return False


def claim(sample: Sample) -> Claim:
    """JSONL of pi entries: a `session` header with `cwd`, `message` entries whose
    `message.role` is user/assistant/toolResult, `toolCall` blocks."""
    if sample.layout != "jsonl":
        return Claim.no("not JSONL")
    records = sample.objects()
    header = next((r for r in records if r.get("type") == "session"), None)
    has_header = header is not None and "cwd" in header and "id" in header
    typed = [r for r in records if r.get("type") in ENTRY_TYPES | STREAM_TYPES]
    messages = [r for r in records if _pi_message(r)]
    if not messages and not has_header:
        return Claim.no("no `session` header with `cwd` and no `message` entry with a pi role")
    if not messages:
        return Claim(0.4, "a pi `session` header but no message entries in the first records")
    calls = sum(
        1
        for r in messages
        for block in (r["message"].get("content") or [])
        if isinstance(block, dict) and block.get("type") == "toolCall"
    )
    fit = len(typed) / len(records)
    score = 0.55 + 0.3 * fit + (0.1 if has_header else 0.0) + (0.04 if calls else 0.0)
    reason = (
        f"{fit:.0%} of the records are pi entries ({len(messages)} `message` entries, "
        f"{calls} `toolCall` blocks{', a `session` header with `cwd`' if has_header else ''})"
    )
    return Claim(min(score, 0.99), reason)


# --- reading


@dataclass
class _State:
    source: str
    limits: Limits
    skips: Any
    run: Run
    # entry id -> its last step (the newest MAX_ENTRIES entries, by their first anchor)
    anchors: Recent[str, str | None] = field(
        default_factory=lambda: Recent(MAX_ENTRIES, refresh=False)
    )
    # toolCallId -> its call, waiting for its result (the newest MAX_OPEN_CALLS)
    calls: Recent[str, Step] = field(default_factory=lambda: Recent(MAX_OPEN_CALLS, refresh=True))
    waiting: set[int] = field(default_factory=set)  # id() of the calls in `calls`
    known: HashSet = field(default_factory=HashSet)  # every toolCallId read
    by_stream: set[int] = field(default_factory=set)  # answered by tool_execution_end only
    stopped: dict[int, tuple[Step, str]] = field(default_factory=dict)  # id(call) -> why
    previous: str | None = None  # the previous entry's id (v1 and event streams)
    last_step: str | None = None  # the id of the run's latest step
    fork_at: int | None = None  # the first step whose parent is not the step before it
    counter: int = 0
    skipped: Counter = field(default_factory=Counter)
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "pi"})
    run_name: str = ""
    line: int | None = None  # the line being read

    def add(self, step: Step, parent: str | None) -> str:
        """Add a step under `parent`. While the run is one chain (each step under the one
        before) its parent stays None: `_chain_if_forked` gives it back if the run forks."""
        if self.fork_at is None and parent != self.last_step:
            self.fork_at = len(self.run.steps)
        add_step(self.run, step, limits=self.limits, source=self.source, line=self.line)
        self.counter += 1
        step.id = step.id or f"s{self.counter}"
        step.parent_id = parent if self.fork_at is not None else None
        self.last_step = step.id
        return step.id

    def anchor(self, entry_id: str, step_id: str | None) -> None:
        """`entry_id`'s last step is `step_id` (the newest MAX_ENTRIES entries are kept)."""
        self.anchors.put(entry_id, step_id)

    def wait(self, call_id: str, step: Step) -> None:
        """`step` waits for the result of `call_id` (the newest MAX_OPEN_CALLS wait)."""
        if call_id in self.calls:
            self.let_go(call_id)  # a repeated id: the earlier call gets no result any more
        self.waiting.add(id(step))
        gone = self.calls.put(call_id, step)
        if gone is not None:
            self._stop_waiting(gone[1])

    def let_go(self, call_id: str) -> Step:
        """`call_id`'s call waits no more: a turn that stopped before it ran ends it now."""
        return self._stop_waiting(self.calls.pop(call_id))

    def _stop_waiting(self, step: Step) -> Step:
        self.waiting.discard(id(step))
        self.by_stream.discard(id(step))
        _not_run(self, step)
        return step

    def answered(self, call_id: str) -> Step | None:
        """The call a toolResult answers, which waits no more (None: no call waits for it)."""
        step = self.calls.pop(call_id, None)
        if step is not None:
            self.waiting.discard(id(step))
            self.by_stream.discard(id(step))
            self.stopped.pop(id(step), None)
        return step

    def holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change, so the spool holds
        it: a call waiting for its result (from a toolResult, or from the end of its turn)."""
        return id(step) in self.waiting


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a pi session file: its steps are spooled (kit.spool), so a
    session of any length is read in the memory of the spool's window."""
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    steps = StepSpool()
    run = Run(id=_run_id({}, source), format=name, steps=steps)  # type: ignore[arg-type]
    state = _State(source, limits, reader.skips, run)
    steps.hold = state.holds
    for line, record in reader:
        state.line = line
        try:
            _entry(state, record, line)
        except TooManySteps:
            raise
        except TraceError as exc:
            reader.reject(exc)
    reader.check_not_empty()
    for call_id in list(state.calls):  # calls that never got a result
        state.let_go(call_id)
    steps.hold = None  # read: no step changes any more
    _chain_if_forked(run, state.fork_at)
    if state.skipped:
        state.meta["skipped_records"] = dict(state.skipped)
    run.id, run.metadata = _run_id(state.meta, source), state.meta
    run.name = state.run_name or run.id
    del state
    yield finish_run(reader.skips.apply(run))


def _entry(state: _State, record: dict[str, Any], line: int) -> None:
    kind = record.get("type")
    if kind == "session":
        _header(state, record)
        return
    entry_id = record.get("id")
    entry_id = str(entry_id) if isinstance(entry_id, str | int) else f"line-{line}"
    if "parentId" in record:
        parent_entry = record.get("parentId")
        parent_entry = None if parent_entry is None else str(parent_entry)
    else:  # v1 and event streams: a chain in line order
        parent_entry = state.previous
    parent = state.anchors.get(parent_entry) if parent_entry is not None else None
    state.anchor(entry_id, parent)  # until the entry makes a step of its own
    state.previous = entry_id
    when = parse_time(record.get("timestamp"))
    if kind in ("message", "message_end"):
        message = record.get("message")
        if not isinstance(message, dict):
            raise TraceError("expected an object", source=state.source, line=line, field="message")
        last = _message(state, message, entry_id, parent, when, line)
    elif kind == "tool_execution_end":
        _stream_result(state, record, when, line)
        last = parent
    elif kind in ("custom_message", "compaction", "branch_summary"):
        last = _injected(state, kind, record, parent, when)
    elif kind in ("model_change", "thinking_level_change"):
        _setting(state, record)
        last = parent
    elif kind == "session_info":
        if isinstance(record.get("name"), str):
            state.run_name = record["name"][:200]
        last = parent
    else:
        key = str(kind)[:100]
        if key not in state.skipped and len(state.skipped) >= MAX_COUNTED_KINDS:
            key = "(other)"
        state.skipped[key] += 1
        last = parent
    state.anchor(entry_id, last)


def _run_id(meta: dict[str, Any], source: str) -> str:
    return str(meta.get("session_id") or os.path.basename(source) or "run")


def _header(state: _State, record: dict[str, Any]) -> None:
    meta = state.meta
    for key, target in (
        ("id", "session_id"),
        ("version", "session_version"),
        ("cwd", "cwd"),
        ("parentSession", "parent_session"),
        ("provider", "provider"),
        ("thinkingLevel", "thinking_level"),
    ):
        value = record.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            meta.setdefault(target, value)
    if isinstance(record.get("modelId"), str):
        _model(meta, record["modelId"])
    if "version" not in record:
        meta.setdefault("session_version", 1)
    state.run.id = _run_id(meta, state.source)


def _model(meta: dict[str, Any], model: Any) -> None:
    if isinstance(model, str) and model:
        meta.setdefault("model", model)
        if model not in meta.setdefault("models", []):
            meta["models"].append(model)


def _setting(state: _State, record: dict[str, Any]) -> None:
    if record.get("type") == "model_change":
        _model(state.meta, record.get("modelId") or record.get("model"))
    else:
        state.meta.setdefault("thinking_level", record.get("thinkingLevel"))


def _time(message: dict[str, Any], when: float | None) -> float | None:
    return when if when is not None else parse_time(message.get("timestamp"))


def _message(
    state: _State,
    message: dict[str, Any],
    entry_id: str,
    parent: str | None,
    when: float | None,
    line: int,
) -> str | None:
    role = message.get("role")
    when = _time(message, when)
    limits = state.limits
    if role == "user":
        step = text_step("user", content_text(message.get("content")), limits=limits)
        step.started_at = when
        return state.add(step, parent)
    if role == "assistant":
        return _assistant(state, message, entry_id, parent, when)
    if role in RESULT_ROLES:
        _result(state, message, when, line)
        return parent
    if role == "bashExecution":
        return _user_command(state, message, parent, when)
    if role in SYSTEM_ROLES:
        text = message.get("summary") if role != "custom" else None
        text = text if isinstance(text, str) else content_text(message.get("content"))
        step = text_step("system", f"[{role}] {text}", limits=limits, started_at=when)
        return state.add(step, parent)
    raise TraceError(f"unknown message role {role!r}", source=state.source, line=line)


def _assistant(
    state: _State, message: dict[str, Any], entry_id: str, parent: str | None, when: float | None
) -> str | None:
    limits = state.limits
    blocks = message.get("content")
    blocks = blocks if isinstance(blocks, list) else [{"type": "text", "text": blocks}]
    thinking = [b.get("thinking") for b in blocks if isinstance(b, dict)]
    thinking = [t for t in thinking if isinstance(t, str) and t.strip()]
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    made: list[Step] = []
    last = parent
    if thinking:
        made.append(text_step("reasoning", "\n".join(thinking), limits=limits))
    if texts:
        made.append(text_step("assistant", "\n".join(texts), limits=limits))
    calls = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "toolCall":
            call_id = block.get("id")
            step = tool_step(
                tool=str(block.get("name") or ""), args=block.get("arguments"), limits=limits
            )
            step.batch_id = entry_id
            made.append(step)
            calls.append((None if call_id is None else str(call_id), step))
    reason = message.get("stopReason")
    if reason in ("aborted", "error"):
        detail = message.get("errorMessage")
        detail = f": {detail}" if isinstance(detail, str) and detail else ""
        made.append(text_step("system", f"turn {reason}{detail}", limits=limits))
        for _, step in calls:
            state.stopped[id(step)] = (step, NOT_RUN.format(reason=reason, detail=detail))
    if not made:  # an empty turn: keep it visible as an empty assistant message
        made.append(text_step("assistant", "", limits=limits))
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    first = made[0]
    ins = [number(usage.get(k)) for k in ("input", "cacheRead", "cacheWrite")]
    if any(v is not None for v in ins):
        first.tokens_in = sum(v or 0 for v in ins)
    first.tokens_out = number(usage.get("output"))
    cost = usage.get("cost")
    first.cost = fnumber(cost.get("total")) if isinstance(cost, dict) else fnumber(cost)
    for call_id, step in calls:  # before they join the run, which may spool them
        if call_id is None:
            _not_run(state, step)  # no result can name it
        else:
            if not state.known.add(call_id):
                state.skips.note(f"{state.source}: tool call id {call_id!r} repeats")
            state.wait(call_id, step)
    for step in made:
        step.started_at = when
        last = state.add(step, last)
    if _model_of(message):
        _model(state.meta, _model_of(message))
    return last


def _model_of(message: dict[str, Any]) -> str | None:
    model = message.get("model")
    return model if isinstance(model, str) and model else None


def _result(state: _State, message: dict[str, Any], when: float | None, line: int) -> None:
    call_id = message.get("toolCallId")
    call_id = None if call_id is None else str(call_id)
    text = content_text(message.get("content"))
    flag = message.get("isError")
    error = flag if isinstance(flag, bool) else text_errors.is_error(text)
    step = state.answered(call_id) if call_id is not None else None
    if step is None:
        state.skips.note(
            f"{state.source}:{line}: result for call {call_id!r} matches no earlier call; "
            "kept as a step of its own"
        )
        tool = message.get("toolName")
        step = tool_step(tool=str(tool or ""), args=None, limits=state.limits)
        step.args = None
        step.started_at = when
        state.add(step, state.last_step)
    set_result(step, text, error=error, limits=state.limits, ended_at=when)


def _stream_result(state: _State, record: dict[str, Any], when: float | None, line: int) -> None:
    """`tool_execution_end` of `pi --mode json`: a result unless a toolResult already gave it."""
    call_id = record.get("toolCallId")
    step = state.calls.get(str(call_id)) if call_id is not None else None
    if step is None or id(step) in state.by_stream:
        return
    result = record.get("result")
    text = content_text(result.get("content")) if isinstance(result, dict) else content_text(result)
    flag = record.get("isError")
    error = flag if isinstance(flag, bool) else text_errors.is_error(text)
    state.by_stream.add(id(step))  # a toolResult may still give the result instead
    state.stopped.pop(id(step), None)
    set_result(step, text, error=error, limits=state.limits, ended_at=when)


def _user_command(
    state: _State, message: dict[str, Any], parent: str | None, when: float | None
) -> str:
    command, output = message.get("command"), message.get("output")
    code = number(message.get("exitCode"))
    text = f"$ {command}\n{output if isinstance(output, str) else ''}"
    if code is not None:
        text += f"\n(exit code {code})"
    if message.get("cancelled") is True:
        text += "\n(cancelled)"
    return state.add(text_step("user", text, limits=state.limits, started_at=when), parent)


def _injected(
    state: _State, kind: str, record: dict[str, Any], parent: str | None, when: float | None
) -> str:
    if kind == "custom_message":
        text = content_text(record.get("content"))
        label_ = record.get("customType")
    else:
        text = record.get("summary")
        text = text if isinstance(text, str) else ""
        label_ = kind
    step = text_step("system", f"[{label_}] {text}", limits=state.limits, started_at=when)
    return state.add(step, parent)


def _not_run(state: _State, step: Step) -> None:
    """A call of an aborted or failed turn that got no result: not run, so an error."""
    stopped = state.stopped.pop(id(step), None)
    if stopped is not None:
        step.result, step.status = stopped[1], "error"


def _chain_if_forked(run: Run, fork_at: int | None) -> None:
    """A run that forks: its steps before the fork chain, each under the step before it (a
    run that never forks is linear: no parent ids)."""
    if fork_at is None or fork_at == 0:
        return

    def chained(steps: Iterator[Step]) -> Iterator[Step]:
        previous = None
        for place, step in enumerate(steps):
            if place < fork_at:
                step.parent_id = previous
            previous = step.id
            yield step

    if isinstance(run.steps, StepSpool):
        run.steps = run.steps.rewrite(chained)  # type: ignore[assignment]
    else:
        for _ in chained(iter(run.steps)):
            pass
