"""The kit's run built message by message, for the message-list formats (chat, responses,
anthropic) and tau2, and the reading of a file of conversations.

A `Conversation` turns messages into the steps of one run and pairs each tool result with
its call:

- a result names its call by id; ids may repeat inside a run (tau-bench reuses them), so a
  result goes to the **earliest still-unanswered call with that id**;
- a result without an id goes to the earliest unanswered call of the latest batch of its
  branch (with the same tool name when the result gives one): position is all there is;
- a result that still matches nothing is kept as a tool_call step of its own with tool
  "(unknown)" (or the name the result gives), args None, and a warning: nothing is lost and a
  detector still sees failing results;
- a call that never gets a result keeps result None (status "ok").

Branches (inlined sub-agents): a run is linear (no parent ids) until a message names a
sub-agent. `branch(child)` gives the parent id for that child's steps: the sub-agent call
(`Task`, `Agent`, `spawn_agent`, ... see `starts_subagent`) that started it, chosen once, at
the child's first message: the unclaimed call whose prompt is the child's first text, else
the earliest unclaimed one of the latest batch that has one, else the latest such call
(even if claimed), else the run's first step (the root of the conversation; none when the
child's message is the first). A child's steps are in a lane of their own (another actor:
detection/model.py); main-line steps keep parent_id None. In the engine a child sees the
parent's earlier calls, but the parent's later calls never see the child's, so a child's
calls are not counted as parent repeats.

Errors a result shows only in its text: `result_error` (text_errors' common table plus the
format's own rules); an explicit flag always wins.

Steps are built and added with the kit's `steps` (clipped values). Step ids are the source's
ids; `finish_run`, which every run read here goes through, merges the copies of one call (a
`tool_call` part and a `tool_calls` entry with the same id) and then makes ids unique within
the run (a repeated id gets "#2", "#3").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

from detection.model import Run, Step

from .. import text_errors
from ..content import content_text
from ..errors import Skips, TooManySteps, TraceError
from ..reading import (
    JsonlReader,
    Limits,
    clip_json,
    first_byte,
    iter_document,
    looks_like_jsonl,
    stream_head,
)
from .merge import UNKNOWN_TOOL
from .steps import add_step, finish_run, set_result, text_step, tool_step

# The message-list formats' own text rule (tau-bench, Responses): a result that *starts* with
# `Error:` (any case, leading blanks ignored). The common table's "error line" rule wants
# `Error: <text>` at a line start; this one also takes `error:` with nothing after it.
ERROR_PREFIX = text_errors.rules(("error prefix", r"(?i)\A\s*error\s*:"))


def result_error(
    text: Any, flag: Any = None, *, extra: tuple[text_errors.Rule, ...] = ERROR_PREFIX
) -> bool:
    """Return whether a tool result failed: an explicit boolean `flag` (`is_error`) wins;
    without one, the text decides by text_errors' common rules and the format's `extra`."""
    if isinstance(flag, bool):
        return flag
    return text_errors.error_rule(text, extra) is not None


# Tool names that start a sub-agent (compared lower-cased, `-` and spaces read as `_`).
SUBAGENT_TOOLS = frozenset(
    {
        "task",
        "agent",
        "dispatch_agent",
        "spawn_agent",
        "spawn_subagent",
        "subagent",
        "sub_agent",
        "run_subagent",
        "run_agent",
        "launch_agent",
        "start_agent",
        "call_agent",
        "create_agent",
        "create_subagent",
        "new_task",
        "delegate",
        "delegate_task",
        "handoff",
    }
)
PROMPT_KEYS = ("prompt", "description", "task", "message", "instructions", "query")


def starts_subagent(tool: Any) -> bool:
    """Return whether a tool call of this name starts a sub-agent (see SUBAGENT_TOOLS)."""
    if not isinstance(tool, str):
        return False
    key = re.sub(r"[-\s]+", "_", tool.strip().lower())
    return key in SUBAGENT_TOOLS or key.endswith(("subagent", "sub_agent"))


class Conversation:
    """The steps of one run, built message by message (branches: see the module rules)."""

    def __init__(self, run: Run, *, limits: Limits, skips: Skips, source: str) -> None:
        self.run, self.limits, self.skips, self.source = run, limits, skips, source
        self.parent: str | None = None  # parent_id of the steps added now (a branch's call)
        self._open: dict[str, list[Step]] = {}  # call id -> unanswered calls, earliest first
        self._answered: set[int] = set()  # seq of calls that got their result
        self._batches: dict[str | None, list[Step]] = {}  # branch -> calls of its latest batch
        self._call_ids: dict[int, str] = {}  # seq -> the call id as the source wrote it
        self._spawns: list[Step] = []  # calls that start a sub-agent, in order
        self._claimed: set[int] = set()  # seq of spawns that a child already took
        self._children: dict[str, str | None] = {}  # child id -> its parent step id
        self.state: dict[str, Any] = {}  # per-format reading state (e.g. the current batch)

    def add_each(self, items: Any, add: Callable[[Any, int], None], *, field: str) -> None:
        """Add each item with ``add(item, index)``; a bad one is skipped and reported as
        ``field[index]``, the rest still count (too many steps ends the run)."""
        for index, item in enumerate(items):
            try:
                add(item, index)
            except TooManySteps:
                raise
            except TraceError as exc:
                self.skips.add(
                    TraceError(exc.reason, source=self.source, field=f"{field}[{index}]")
                )
            finally:
                self.parent = None

    def _add(self, step: Step) -> Step:
        if step.parent_id is None:
            step.parent_id = self.parent
        if self.parent is not None and step.lane is None:
            step.lane = f"agent:{self.parent}"  # an inlined sub-agent: another actor
        step.seq = len(self.run.steps)
        return add_step(self.run, step, limits=self.limits, source=self.source)

    # -- branches

    def branch(self, child: str, text: Any = None) -> str | None:
        """Return the parent id for the steps of sub-agent `child` (chosen at its first
        message, whose text may match the prompt of the call that started it)."""
        if child in self._children:
            return self._children[child]
        parent = self._spawn_for(text if isinstance(text, str) else None)
        if parent is not None:
            self._claimed.add(parent.seq)
        elif self.run.steps:  # no call started it: hang it from the run's first step
            parent = self.run.steps[0]
            if parent.id is None:
                parent.id = "step-0"
        self._children[child] = None if parent is None else parent.id
        self.run.metadata.setdefault("subagents", 0)
        self.run.metadata["subagents"] += 1
        return self._children[child]

    def _spawn_for(self, text: str | None) -> Step | None:
        unclaimed = [step for step in self._spawns if step.seq not in self._claimed]
        if text and text.strip():
            wanted = text.strip()
            for step in unclaimed:
                args = step.args if isinstance(step.args, dict) else {}
                if any(
                    isinstance(args.get(k), str) and args[k].strip() == wanted for k in PROMPT_KEYS
                ):
                    return step
        if unclaimed:
            batch = unclaimed[-1].batch_id
            same = [s for s in unclaimed if batch is not None and s.batch_id == batch]
            return same[0] if same else unclaimed[-1]
        return self._spawns[-1] if self._spawns else None

    # -- steps

    def message(self, kind: str, text: Any, *, id: str | None = None, **extra: Any) -> Step:
        """Add a user/assistant/system/reasoning step."""
        if text is not None and not isinstance(text, str):
            text = content_text(text)
        return self._add(text_step(kind, text, limits=self.limits, id=id, **extra))

    def call(
        self, tool: Any, args: Any, *, call_id: Any, batch_id: str | None, **extra: Any
    ) -> Step:
        """Add a tool call issued by the message batch_id; its result may come later."""
        call_id = None if call_id is None else str(call_id)
        name = tool if isinstance(tool, str) and tool else UNKNOWN_TOOL
        step = self._add(
            tool_step(
                tool=name, args=args, limits=self.limits, id=call_id, batch_id=batch_id, **extra
            )
        )
        if call_id is not None:
            self._open.setdefault(call_id, []).append(step)
            self._call_ids[step.seq] = call_id
        batch = self._batches.get(self.parent)
        if not batch or batch[0].batch_id != batch_id or batch_id is None:
            batch = self._batches[self.parent] = []
        batch.append(step)
        if starts_subagent(name):
            if step.id is None:
                step.id = f"call-{step.seq}"  # a child's parent_id needs an id to name
            self._spawns.append(step)
        return step

    def result(
        self, result: Any, *, call_id: Any, error: bool, name: Any = None, where: str = ""
    ) -> Step:
        """Attach a result to its call (see the module rules); return the step it landed on."""
        step = self._match(None if call_id is None else str(call_id), name)
        value = clip_json(result, self.limits)
        if step is None:
            self._warn(
                f"{self.source}: {where}result for call {call_id!r} matches no "
                f"earlier call; kept as a step of its own"
            )
            step = self._add(
                tool_step(
                    tool=str(name or UNKNOWN_TOOL),
                    args=None,
                    limits=self.limits,
                    id=None if call_id is None else str(call_id),
                )
            )
        self._answered.add(step.seq)
        step.result = value
        if step.status != "invalid":  # a call the model wrote wrong stays invalid
            step.status = "error" if error else "ok"
        return step

    def complete(self, step: Step, result: Any, *, error: bool) -> None:
        """Give a call that carries its own result (built-in tools) that result."""
        self._answered.add(step.seq)
        self._forget(step)
        set_result(step, result, error=error, limits=self.limits)

    def _warn(self, message: str) -> None:
        if len(self.run.warnings) < 100:
            self.run.warnings.append(message)

    def _forget(self, step: Step) -> None:
        key = self._call_ids.get(step.seq, "")
        waiting = self._open.get(key)
        if waiting:
            self._open[key] = [w for w in waiting if w is not step]

    def _match(self, call_id: str | None, name: Any) -> Step | None:
        if call_id is not None:
            waiting = self._open.get(call_id)
            return waiting.pop(0) if waiting else None
        for step in self._batches.get(self.parent, ()):
            if step.seq not in self._answered and (not name or step.tool == name):
                self._forget(step)
                return step
        return None


# --- reading a file of conversations (shared by chat, responses and anthropic)

AddMessage = Callable[[Conversation, Any, int], None]
RunFromObject = Callable[..., Run]


def conversations_parser(
    format: str,
    *,
    is_message: Callable[[Any], bool],
    add_message: AddMessage,
    run_from_object: RunFromObject,
) -> Callable[..., Iterator[Run]]:
    """Return a conversation format's `parse(stream, *, source, limits)`: its files read by
    `read_conversations` with the format's own messages and objects."""

    def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
        yield from read_conversations(
            stream,
            source=source,
            limits=limits,
            format=format,
            is_message=is_message,
            add_message=add_message,
            run_from_object=run_from_object,
        )

    return parse


def read_conversations(
    stream: IO[bytes],
    *,
    source: str,
    limits: Limits,
    format: str,
    is_message: Callable[[Any], bool],
    add_message: AddMessage,
    run_from_object: RunFromObject,
) -> Iterator[Run]:
    """Yield the runs of a file of conversations: JSONL line by line, JSON item by item.

    Top-level values (JSONL lines, array items, the document) that are single messages make
    one run for the file; other values go to run_from_object, one run each. Invalid ones are
    skipped and reported; skips count on the next run yielded (runs are yielded one behind).
    """
    base = os.path.basename(source) or "run"
    skips = Skips()
    reader = _jsonl_values if looks_like_jsonl(stream_head(stream)) else _document_values
    loose: list[Conversation] = []

    def runs() -> Iterator[Run]:
        for where, value in reader(
            stream, source=source, limits=limits, skips=skips, is_message=is_message
        ):
            try:
                if is_message(value):
                    if not loose:
                        loose.append(
                            Conversation(
                                Run(id=base, format=format),
                                limits=limits,
                                skips=skips,
                                source=source,
                            )
                        )
                    add_message(loose[0], value, where[1])
                    continue
                run = run_from_object(
                    value, default_id=f"{base}{where[0]}", source=source, limits=limits, skips=skips
                )
                if not run.steps:
                    raise TraceError("no valid message in this conversation")
                yield finish_run(run)
            except TooManySteps as exc:
                exc.line = where[2] if exc.line is None else exc.line
                raise
            except TraceError as exc:
                skips.add(
                    TraceError(
                        exc.reason,
                        source=source,
                        line=where[2],
                        field=exc.field or (where[0] or None),
                    )
                )
        if loose:
            yield finish_run(loose[0].run)

    yield from with_skips(runs(), skips, source=source, single_id=(f"{base}:1", base))


Where = tuple[str, int, int | None]  # id suffix, index, line


def _jsonl_values(
    stream: IO[bytes],
    *,
    source: str,
    limits: Limits,
    skips: Skips,
    is_message: Callable[[Any], bool],
) -> Iterator[tuple[Where, Any]]:
    for line, value in JsonlReader(stream, source=source, limits=limits, skips=skips):
        if (
            isinstance(value, list)
            and value
            and isinstance(value[0], dict)
            and not is_message(value[0])
            and "role" not in value[0]
        ):
            for index, item in enumerate(value):  # a line holding an array of runs
                yield (f":{line}#{index}", index, line), item
        else:
            yield (f":{line}", line, line), value


def _document_values(
    stream: IO[bytes],
    *,
    source: str,
    limits: Limits,
    skips: Skips,
    is_message: Callable[[Any], bool],
) -> Iterator[tuple[Where, Any]]:
    start = first_byte(stream)
    if not start:
        raise TraceError("empty file", source=source)
    if start == b"{":
        for value in iter_document(stream, "", source=source, limits=limits):
            yield ("", 0, None), value
        return
    if start != b"[":
        raise TraceError("expected a JSON array or object", source=source, line=1)
    for index, item in enumerate(iter_document(stream, "item", source=source, limits=limits)):
        yield (f"#{index}", index, None), item


def with_skips(
    runs: Iterator[Run], skips: Skips, *, source: str, single_id: tuple[str, str]
) -> Iterator[Run]:
    pending: Run | None = None
    count = 0
    for run in runs:
        if pending is not None:
            yield _take_skips(pending, skips)
        pending, count = run, count + 1
    if pending is None:
        if skips.first is not None:
            raise skips.first
        raise TraceError("empty file: no messages", source=source)
    if count == 1 and pending.id == single_id[0]:  # a one-line file is one document
        pending.name = single_id[1] if pending.name == pending.id else pending.name
        pending.id = single_id[1]
    yield _take_skips(pending, skips)


def _take_skips(run: Run, skips: Skips) -> Run:
    skips.apply(run)
    skips.count, skips.warnings = 0, []
    return run
