"""Shared builder for the message-list formats (chat, responses, anthropic): not an importer.

A `Conversation` turns messages into the steps of one linear run (no parent ids) and pairs
each tool result with its call:

- a result names its call by id; ids may repeat inside a run (tau-bench reuses them), so a
  result goes to the **earliest still-unanswered call with that id**;
- a result without an id goes to the earliest unanswered call of the latest batch (with the
  same tool name when the result gives one): position is all there is to go by;
- a result that still matches nothing is kept as a tool_call step of its own with tool
  "(unknown)" (or the name the result gives), args None, and a warning: nothing is lost and a
  detector still sees failing results;
- a call that never gets a result keeps result None (status "ok").

Step ids are the source's ids made unique within the run (a repeated id gets "#2", "#3").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

from detection.model import Run, Step

from .content import content_text
from .errors import Skips, TooManySteps, TraceError
from .reading import (
    JsonlReader,
    Limits,
    clip_json,
    clip_strings,
    first_byte,
    iter_document,
    looks_like_jsonl,
    stream_head,
)

UNKNOWN_TOOL = "(unknown)"
_ERROR_TEXT = re.compile(r"\s*error\s*:", re.IGNORECASE)


def text_is_error(text: Any) -> bool:
    """Return whether a result reports an error in its text: it starts with `Error:`."""
    return isinstance(text, str) and _ERROR_TEXT.match(text) is not None


class Conversation:
    """The steps of one linear run, built message by message."""

    def __init__(self, run: Run, *, limits: Limits, skips: Skips, source: str) -> None:
        self.run, self.limits, self.skips, self.source = run, limits, skips, source
        self._open: dict[str, list[Step]] = {}  # call id -> unanswered calls, earliest first
        self._answered: set[int] = set()  # seq of calls that got their result
        self._batch: list[Step] = []  # the calls of the latest message that issued any
        self._ids: dict[str, int] = {}
        self._call_ids: dict[int, str] = {}  # seq -> the call id as the source wrote it
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

    def _add(self, step: Step) -> Step:
        if len(self.run.steps) >= self.limits.max_steps:
            raise TooManySteps(
                f"run {self.run.id!r} has more than {self.limits.max_steps} steps",
                source=self.source,
            )
        if step.id is not None:
            count = self._ids.get(step.id, 0) + 1
            self._ids[step.id] = count
            if count > 1:
                step.id = f"{step.id}#{count}"
        step.seq = len(self.run.steps)
        self.run.steps.append(step)
        return step

    def message(self, kind: str, text: Any, *, id: str | None = None, **extra: Any) -> Step:
        """Add a user/assistant/system/reasoning step."""
        if text is not None and not isinstance(text, str):
            text = content_text(text)
        text = clip_strings(text, self.limits.max_value_chars)
        return self._add(Step(seq=0, kind=kind, id=id, text=text, **extra))

    def call(
        self, tool: Any, args: Any, *, call_id: Any, batch_id: str | None, **extra: Any
    ) -> Step:
        """Add a tool call issued by the message batch_id; its result may come later."""
        call_id = None if call_id is None else str(call_id)
        name = tool if isinstance(tool, str) and tool else UNKNOWN_TOOL
        step = self._add(
            Step(
                seq=0,
                kind="tool_call",
                id=call_id,
                tool=name[:200],
                args=clip_json(args, self.limits),
                batch_id=batch_id,
                **extra,
            )
        )
        if call_id is not None:
            self._open.setdefault(call_id, []).append(step)
            self._call_ids[step.seq] = call_id
        if not self._batch or self._batch[0].batch_id != batch_id or batch_id is None:
            self._batch = []
        self._batch.append(step)
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
                Step(
                    seq=0,
                    kind="tool_call",
                    id=None if call_id is None else str(call_id),
                    tool=str(name or UNKNOWN_TOOL)[:200],
                )
            )
        self._answered.add(step.seq)
        step.result = value
        step.status = "error" if error else "ok"
        return step

    def complete(self, step: Step, result: Any, *, error: bool) -> None:
        """Give a call that carries its own result (built-in tools) that result."""
        self._answered.add(step.seq)
        waiting = self._open.get(self._call_ids.get(step.seq, ""), [])
        self._open[self._call_ids.get(step.seq, "")] = [w for w in waiting if w is not step]
        step.result = clip_json(result, self.limits)
        step.status = "error" if error else "ok"

    def _warn(self, message: str) -> None:
        if len(self.run.warnings) < 100:
            self.run.warnings.append(message)

    def _match(self, call_id: str | None, name: Any) -> Step | None:
        if call_id is not None:
            waiting = self._open.get(call_id)
            return waiting.pop(0) if waiting else None
        for step in self._batch:
            if step.seq not in self._answered and (not name or step.tool == name):
                waiting = self._open.get(self._call_ids.get(step.seq, ""), [])
                self._open[self._call_ids.get(step.seq, "")] = [w for w in waiting if w is not step]
                return step
        return None


# --- reading a file of conversations (shared by chat, responses and anthropic)

AddMessage = Callable[[Conversation, Any, int], None]
RunFromObject = Callable[..., Run]


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
                yield run
            except TooManySteps:
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
            yield loose[0].run

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
