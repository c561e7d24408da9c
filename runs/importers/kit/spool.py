"""A run's steps in bounded memory: `StepSpool`, the list a long run's steps live in.

An importer that reads a run of any length gives its `Run` a spool (`Run(steps=StepSpool())`)
instead of a list, and adds steps as usual (`kit.add_step`). The spool keeps the newest steps
in memory, the *window* (between `window` and twice that many), and writes older ones to an
unnamed temporary file, so a 1 GB session costs the memory of its window, not of its steps.
Reading it (`for step in spool`) gives every step back in order, as it was when it left the
window; it may be read any number of times, each read from the start.

The contract for an importer: a step may still change (a result arriving, a copy absorbed)
while it is in the window. A step the importer still expects to change after that (a call
waiting for its result) is *held*: the spool's `hold(step)` says so when the step leaves the
window, and a held step stays in memory, in its place, until the run ends; at most
`max_held` of them, after which the oldest held step is written as it is then (a later
change to it is lost). Steps are settled, in order, by the time the spool is read.

The kit finishes a spooled run by passes over it (`rewrite`: one spool read into another,
step by step), so the merge of copies, unique ids, numbering and lanes cost one window each;
see kit.steps.finish_run and lanes.assign_lanes. A run whose steps stay a list is finished as
before, whole.

Beside the spool, what a reader of a long run looks back at, in bounded memory: `HashSet`,
every id seen, and `Recent`, the newest entries of a mapping (calls waiting for their result,
ids a later record may name).
"""

from __future__ import annotations

import heapq
import io
import os
import pickle
import tempfile
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from detection.model import Step

#: Steps kept in memory: the newest WINDOW to 2 * WINDOW (about 4 KB each in a real session).
WINDOW = 2048
#: Steps held in memory past the window (calls waiting for their result), at most.
MAX_HELD = 8192
FIELDS = ("seq", "kind", "id", "parent_id", "tool", "args", "result", "status", "batch_id",
          "text", "started_at", "ended_at", "tokens_in", "tokens_out", "cost", "lane")  # fmt: skip
_HELD = -1  # a record's marker: the step at this place is held (or was written late)


def _values(step: Step) -> tuple:
    return (step.seq, step.kind, step.id, step.parent_id, step.tool, step.args, step.result,
            step.status, step.batch_id, step.text, step.started_at, step.ended_at,
            step.tokens_in, step.tokens_out, step.cost, step.lane)  # fmt: skip


class _Reader(io.RawIOBase):
    """Read a file descriptor from an offset of its own (the writer's position is not moved)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.offset = fd, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = os.pread(self.fd, len(buffer), self.offset)
        self.offset += len(data)
        buffer[: len(data)] = data
        return len(data)


class _File:
    """An unnamed temporary file of pickled batches, appended to and read from the start."""

    def __init__(self) -> None:
        self.handle = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the spool
        self.batches = 0

    def write(self, batch: list) -> None:
        pickle.dump(batch, self.handle, protocol=pickle.HIGHEST_PROTOCOL)
        self.batches += 1

    def read(self) -> Iterator[list]:
        self.handle.flush()
        stream = io.BufferedReader(_Reader(self.handle.fileno()), 1 << 20)
        for _ in range(self.batches):
            yield pickle.load(stream)

    def close(self) -> None:
        self.handle.close()


class StepSpool:
    """A run's steps: the newest in memory, the rest in a temporary file (see the module)."""

    def __init__(
        self,
        *,
        window: int | None = None,
        hold: Callable[[Step], bool] | None = None,
        max_held: int | None = None,
    ) -> None:
        self.window = max(1, window or WINDOW)
        self.hold = hold
        self.max_held = MAX_HELD if max_held is None else max_held
        self._tail: list[Step] = []  # the window: the newest steps, not written
        self._written = 0  # steps before the window (written, or held in their place)
        self._file: _File | None = None
        self._held: dict[int, Step] = {}  # place -> a step held past the window
        self._late: _File | None = None  # held steps let go (max_held), in the order of place
        self.lanes_assigned = False  # lanes.assign_lanes has run over these steps
        # What a pass that wrote this spool saw (kit.steps.finish_run reads it)
        self.marked_ids: set[str] = set()  # step ids with a "#" (make_ids_unique's suffix)
        self.tree = False  # some step has a parent or a lane
        self.ids = False  # some step has an id
        # parent id named before its step -> that step's (lane, kind, tool) as written
        self.forward: dict[str, tuple[str | None, str, str | None]] = {}

    # --- a list's ways, as far as importers use them

    def append(self, step: Step) -> None:
        self._tail.append(step)
        if len(self._tail) >= 2 * self.window:
            self._spill(len(self._tail) - self.window)

    def extend(self, steps: Iterable[Step]) -> None:
        for step in steps:
            self.append(step)

    def __len__(self) -> int:
        return self._written + len(self._tail)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Step]:
        if self._file is not None:
            late = self._late_steps()
            for batch in self._file.read():
                for record in batch:
                    if type(record) is int:  # noqa: E721 - a held step's place
                        held = self._held.get(record)
                        yield held if held is not None else next(late)
                    else:
                        yield Step(*record)
        yield from list(self._tail)

    def __getitem__(self, index: int) -> Step:
        """A step still in the window (a negative index counts from the newest)."""
        if index < 0:
            index += len(self)
        if index < self._written:
            held = self._held.get(index)
            if held is not None:
                return held
            raise IndexError(f"step {index} has left the window of the spool")
        return self._tail[index - self._written]

    @property
    def spilled(self) -> int:
        """How many steps have left the window (written, or held in their place)."""
        return self._written

    @property
    def in_memory(self) -> int:
        """How many steps are in memory now: the window and the held steps."""
        return len(self._tail) + len(self._held)

    def close(self) -> None:
        """Let the temporary files go (the spool cannot be read after)."""
        for file in (self._file, self._late):
            if file is not None:
                file.close()
        self._file = self._late = None
        self._tail, self._held, self._written = [], {}, 0

    # --- passes

    def rewrite(self, passing: Callable[[Iterator[Step]], Iterable[Step]]) -> StepSpool:
        """Return a new spool of what `passing` makes of these steps (read in order), noting
        the ids, parents and lanes it writes; this spool is closed."""
        out = StepSpool(window=self.window)
        out.lanes_assigned = self.lanes_assigned
        marked, tree, ids = out.marked_ids, False, False
        seen, wanted, forward = HashSet(), set(), out.forward
        for step in passing(iter(self)):
            parent = step.parent_id
            if parent is not None:
                tree = True
                if str(parent) not in seen:
                    wanted.add(str(parent))
            if step.id is not None:
                ids = True
                key = str(step.id)
                if "#" in key:
                    marked.add(key)
                if seen.add(key) and key in wanted:
                    forward[key] = (step.lane, step.kind, step.tool)
            tree = tree or step.lane is not None
            out.append(step)
        out.tree, out.ids = tree, ids
        self.close()
        return out

    def sort_by_seq(self) -> StepSpool:
        """Return the steps sorted by `seq`, ties in their order (this spool is closed): in
        memory when they fit the window, else sorted a chunk at a time and merged."""
        if self._file is None:
            self._tail.sort(key=_seq)
            return self
        chunks: list[StepSpool] = []
        chunk: list[Step] = []
        for step in self:
            chunk.append(step)
            if len(chunk) >= 4 * self.window:
                chunks.append(_sorted_chunk(chunk, self.window))
                chunk = []
        if chunk:
            chunks.append(_sorted_chunk(chunk, self.window))
        out = StepSpool(window=self.window)
        out.extend(heapq.merge(*chunks, key=_seq))  # stable: ties from earlier chunks first
        for spool in chunks:
            spool.close()
        self.close()
        return out

    # --- spilling

    def _spill(self, count: int) -> None:
        if self._file is None:
            self._file = _File()
        batch: list = []
        hold = self.hold
        for offset, step in enumerate(self._tail[:count]):
            place = self._written + offset
            if hold is not None and hold(step):
                self._held[place] = step
                batch.append(place)
            else:
                batch.append(_values(step))
        self._file.write(batch)
        self._written += count
        del self._tail[:count]
        if len(self._held) > self.max_held:
            self._let_go(len(self._held) - self.max_held)

    def _let_go(self, count: int) -> None:
        """Write the oldest held steps as they are now (a later change to them is lost)."""
        if self._late is None:
            self._late = _File()
        places = list(self._held)[:count]  # oldest first: the order they are read back
        self._late.write([_values(self._held.pop(place)) for place in places])

    def _late_steps(self) -> Iterator[Step]:
        if self._late is not None:
            for batch in self._late.read():
                for record in batch:
                    yield Step(*record)


def _seq(step: Step) -> int:
    return step.seq  # type: ignore[no-any-return]


def _sorted_chunk(steps: list[Step], window: int) -> StepSpool:
    steps.sort(key=_seq)
    spool = StepSpool(window=window)
    spool.extend(steps)
    return spool


class HashSet:
    """A set of strings kept as 64-bit hashes in one array (11 to 21 bytes a member instead of
    the string and a set slot): for the ids a long run has seen. Two strings with one hash are
    taken for one (odds about 1 in 10^7 for a million ids within a run)."""

    __slots__ = ("_mask", "_size", "_table")

    def __init__(self) -> None:
        self._table = array("q", bytes(8 * 1024))
        self._mask = 1023
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, key: str) -> bool:
        """Add `key`; return whether it was new."""
        code = hash(key) or 1
        table, mask = self._table, self._mask
        slot = code & mask
        while True:
            found = table[slot]
            if found == 0:
                break
            if found == code:
                return False
            slot = (slot + 1) & mask
        table[slot] = code
        self._size += 1
        if self._size * 4 > mask * 3:  # at most 3/4 full: 11 to 21 bytes a member
            self._grow()
        return True

    def __contains__(self, key: object) -> bool:
        code = hash(key) or 1
        table, mask = self._table, self._mask
        slot = code & mask
        while True:
            found = table[slot]
            if found == 0:
                return False
            if found == code:
                return True
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        old = self._table
        mask = len(old) * 2 - 1
        table = array("q", bytes(8 * (mask + 1)))
        for code in old:
            if code:
                slot = code & mask
                while table[slot]:
                    slot = (slot + 1) & mask
                table[slot] = code
        self._table, self._mask = table, mask


class Recent[K, V](OrderedDict[K, V]):
    """A bounded look-back: the newest `bound` entries, oldest first. `put(key, value)` is
    the bounded insert: past `bound` entries the oldest goes and `put` returns it as
    `(key, value)` (None when none went), for a caller that lets go of what it held. A key
    put again gets the new value and, with `refresh`, moves to the newest place (it goes
    last); without, it keeps the place it was first put in (it goes as early as before).

    Everything else is an OrderedDict's (`get`, `pop`, `in`, `del`, `values()`, …), which
    finds its oldest entry at once however many went before, where a dict's `next(iter(d))`
    skips the slots of the keys deleted before it. Item assignment is not bounded: use it
    only to change an entry already in (it keeps its place)."""

    __slots__ = ("bound", "refresh")

    def __init__(self, bound: int, *, refresh: bool) -> None:
        super().__init__()
        self.bound = bound
        self.refresh = refresh

    def put(self, key: K, value: V) -> tuple[K, V] | None:
        """Set `key` to `value` (see the class); return the entry that went, if one did."""
        if key in self:
            self[key] = value
            if self.refresh:
                self.move_to_end(key)
            return None
        self[key] = value
        if len(self) > self.bound:
            return self.popitem(last=False)
        return None
