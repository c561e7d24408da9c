"""One call is one step: the importer kit's merge of the copies a source writes of one call.

Some sources write one tool call more than once, each copy carrying part of it:

- chat exports of Claude Code and Codex sessions put a call both as a `tool_call` content
  part and as a `tool_calls` entry of the same message, with the same id;
- OpenTelemetry sends a tool span and a log event (or a model span's output) for one call;
- hook logs write a call before it runs (no result) and again after (with the result).

`kit.finish_run` passes every run through `merge_copies`, so this rule has one home.

A tool step's call id is the one its importer names in `call_ids` (keyed by `id(step)`, for
formats whose step ids are something else, such as OTLP span ids), else its `Step.id`.

A later tool step is a copy of an earlier one when all of these hold:

- they have the same call id;
- the same tool name (or one of them is "(unknown)");
- their arguments agree: equal, or one of them is unknown (None);
- at most one of them carries a result (None means the trace does not carry it), so two
  answered calls that reuse an id (tau-bench does) stay two calls;
- when both name the message that issued them (`batch_id`), it is the same message; and when
  neither carries a result, both must name it: without a result to join, only the message
  says that two records are one call and not the same id used again.

The copy is removed; the step written first keeps its place and its id and takes from the
copy what it lacks (arguments, result, times, tokens, cost, batch, parent). Its status is
the status of the copy that carries the result; without a result, a copy's failure
("error", "invalid") wins over "ok". Steps whose parent was the copy hang from the step kept.

Where a source gives no call id (hooks without `tool_use_id`), its importer pairs the
records itself by the rule stated there; the merge only goes by id.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping

from detection.model import Run, Step

from .spool import HashSet

UNKNOWN_TOOL = "(unknown)"
FILLED = ("args", "result", "started_at", "ended_at", "tokens_in", "tokens_out", "cost",
          "batch_id", "parent_id")  # fmt: skip


def is_copy(first: Step, later: Step) -> bool:
    """Return whether `later` is a copy of `first` (same call id assumed; see the module)."""
    if first.tool != later.tool and UNKNOWN_TOOL not in (first.tool, later.tool):
        return False
    if first.args is not None and later.args is not None and first.args != later.args:
        return False
    if first.result is not None and later.result is not None:
        return False
    if first.batch_id is not None and later.batch_id is not None:
        return bool(first.batch_id == later.batch_id)
    return first.result is not None or later.result is not None


def absorb(kept: Step, copy: Step) -> None:
    """Give `kept` what `copy` knows and it does not (see the module for the status rule)."""
    if kept.tool == UNKNOWN_TOOL and copy.tool:
        kept.tool = copy.tool
    if copy.result is not None or kept.result is None and kept.status == "ok":
        kept.status = copy.status
    for name in FILLED:
        if getattr(kept, name) is None and getattr(copy, name) is not None:
            setattr(kept, name, getattr(copy, name))


def merge_copies(run: Run, call_ids: Mapping[int, str] | None = None) -> int:
    """Merge every copy of a call into the step written first; return how many were merged."""
    noted = call_ids or {}
    earlier: dict[str, list[Step]] = {}  # call id -> the tool steps kept with it
    moved: dict[str, str] = {}  # a removed copy's step id -> the kept step's id
    kept: list[Step] = []
    for step in run.steps:
        kept.append(step)
        if step.kind != "tool_call":
            continue
        call_id = noted.get(id(step)) if noted else None
        if not call_id:
            if step.id is None or step.id == "":
                continue
            call_id = str(step.id)
        candidates = earlier.get(call_id)
        if candidates is None:
            earlier[call_id] = [step]
            continue
        first = None
        for candidate in candidates:
            if is_copy(candidate, step):
                first = candidate
                break
        if first is None:
            candidates.append(step)
            continue
        kept.pop()
        absorb(first, step)
        if step.id is not None and first.id is not None and step.id != first.id:
            moved[str(step.id)] = str(first.id)
    merged = len(run.steps) - len(kept)
    if merged:
        for step in kept:
            if step.parent_id is not None and str(step.parent_id) in moved:
                step.parent_id = moved[str(step.parent_id)]
        run.steps = kept
    return merged


def make_ids_unique(run: Run) -> None:
    """Give a step whose id an earlier step of the run already has the suffix "#n" (n = 2, 3,
    ...); references to that id keep naming the first step that has it."""
    counts: dict[str, int] = {}
    taken = {str(step.id) for step in run.steps if step.id is not None}
    for step in run.steps:
        if step.id is None:
            continue
        key = str(step.id)
        count = counts.get(key, 0) + 1
        counts[key] = count
        if count == 1:
            continue
        unique = f"{key}#{count}"
        while unique in taken:
            count += 1
            unique = f"{key}#{count}"
        counts[key] = count
        taken.add(unique)
        step.id = unique


def merge_stream(steps: Iterable[Step], window: int, moved: dict[str, str]) -> Iterator[Step]:
    """`merge_copies` as a pass over a spooled run: the same rule, with a step open to its
    copies while fewer than `window` steps have been read after it (a copy further on stays
    a step of its own). The removed copies' ids that a parent may name go into `moved`, for
    the next pass (`unique_stream`) to apply."""
    earlier: dict[str, list[Step]] = {}  # call id -> the open tool steps kept with it
    pending: deque[tuple[int, Step]] = deque()  # kept steps not given out yet
    for index, step in enumerate(steps):
        while pending and pending[0][0] <= index - window:
            yield _settle(pending.popleft()[1], earlier)
        if step.kind == "tool_call" and step.id is not None and step.id != "":
            call_id = str(step.id)
            candidates = earlier.get(call_id)
            if candidates is None:
                earlier[call_id] = [step]
            else:
                first = next((c for c in candidates if is_copy(c, step)), None)
                if first is not None:
                    absorb(first, step)
                    if first.id is not None and step.id != first.id:
                        moved[str(step.id)] = str(first.id)
                    continue
                candidates.append(step)
        pending.append((index, step))
    while pending:
        yield _settle(pending.popleft()[1], earlier)


def _settle(step: Step, earlier: dict[str, list[Step]]) -> Step:
    """A step leaves the merge: no later copy joins it."""
    if step.kind == "tool_call" and step.id is not None and step.id != "":
        candidates = earlier.get(str(step.id))
        if candidates is not None:
            for position, candidate in enumerate(candidates):
                if candidate is step:
                    del candidates[position]
                    break
            if not candidates:
                del earlier[str(step.id)]
    return step


def unique_stream(
    steps: Iterable[Step], *, marked: set[str], moved: dict[str, str]
) -> Iterator[Step]:
    """`make_ids_unique` and the numbering as a pass over a spooled run, after
    `merge_stream`: parents that named a removed copy name the step kept (`moved`), a
    repeated id gets the suffix "#n" (`marked`: the run's ids that hold a "#", the only ones
    a suffix can meet), and steps are numbered 0.. in order. The ids seen are kept as
    hashes (spool.HashSet)."""
    seen = HashSet()
    counts: dict[str, int] = {}  # ids seen more than once -> how many times
    taken = set(marked)
    for seq, step in enumerate(steps):
        if moved and step.parent_id is not None and str(step.parent_id) in moved:
            step.parent_id = moved[str(step.parent_id)]
        if step.id is not None:
            key = str(step.id)
            if not seen.add(key):
                count = counts.get(key, 1) + 1
                unique = f"{key}#{count}"
                while unique in taken:
                    count += 1
                    unique = f"{key}#{count}"
                counts[key] = count
                taken.add(unique)
                step.id = unique
        step.seq = seq
        yield step
