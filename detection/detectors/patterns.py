"""Oscillation (A,B,A,B… with the same results) and batch repeat (the same set of calls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..keys import digest
from .base import MAX_SEQS, Event, Level, add_seq, advice, short

if TYPE_CHECKING:
    from ..engine import Monitor

MIN_PERIOD: Final = 2
MAX_PERIOD: Final = 5
HISTORY: Final = MAX_PERIOD + 1  # calls remembered: enough to compare each with the one 5 before


class OscState:
    """The last HISTORY calls of a path and, per period, the streak of calls that repeat."""

    __slots__ = ("args", "keys", "live", "match", "named", "polls", "same", "seqs", "start", "tools", "when")  # fmt: skip

    def __init__(self) -> None:
        # the last HISTORY calls, oldest first: call sig + outcome, seq, tool, polling
        self.keys: list[str] = []
        self.when: list[int] = []
        self.tools: list[str] = []
        self.polls: list[bool] = []
        self.live = False  # some period has a streak going (a match above 0)
        self.same = 0  # how many calls in a row, ending with the last, have the same key
        self.match = [0] * (MAX_PERIOD + 1)  # per period: positions equal to p calls before
        self.start = [0] * (MAX_PERIOD + 1)  # per period: seq where the streak began
        self.seqs: list[list[int]] = [[] for _ in range(MAX_PERIOD + 1)]
        # per period: (signature, tool) of the streak's cycle, worked out when it first fires;
        # a streak goes on only while each call equals the one a period before, so the cycle
        # stays the same (rotated) until the streak ends
        self.named: list[tuple[str, str] | None] = [None] * (MAX_PERIOD + 1)
        # (seq, args) of the last MAX_PERIOD calls that repeated a recent one: a cycle's calls
        # all do, so its message can show what differs between them
        self.args: list[tuple[int, Any]] = []

    def copy(self) -> OscState:
        twin = OscState()
        twin.args = list(self.args)
        twin.keys, twin.when = list(self.keys), list(self.when)
        twin.tools, twin.polls = list(self.tools), list(self.polls)
        twin.live, twin.same = self.live, self.same
        twin.match, twin.start = list(self.match), list(self.start)
        twin.seqs = [list(seqs) for seqs in self.seqs]
        twin.named = list(self.named)
        return twin


def _all_alike(keys: list[str], period: int) -> bool:
    """Return whether the last ``period`` calls are all the same call."""
    last = keys[-1]
    return all(keys[index] == last for index in range(len(keys) - period, len(keys) - 1))


def _any_poll(polls: list[bool], period: int) -> bool:
    """Return whether any of the last ``period`` calls was to a polling tool."""
    return any(polls[index] for index in range(len(polls) - period, len(polls)))


def _cycle_message(
    period: int, tools: list[str], cycles: int, start: int, args: list[Any] | None = None
) -> str:
    return (
        f"You are going round in a cycle of {period} calls ({_cycle_calls(tools, args)}) that return the same "
        f"results each time: {cycles} full cycles since step {start}. Going round again will "
        "not change anything. " + advice(None)
    )


def _cycle_message_now(
    period: int,
    tools: list[str],
    cycles: int,
    start: int,
    recent: list[tuple[int, Any]],
    when: list[int],
) -> str:
    """``_cycle_message`` for the last ``period`` calls: their tools (the last of ``tools``)
    and, when they are the calls that repeated (``recent``), their arguments."""
    block_args = [args for seq, args in recent[-period:]]
    if [seq for seq, _ in recent[-period:]] != when[-period:]:
        block_args = []  # (not the cycle's calls: the message names tools only)
    return _cycle_message(period, tools[-period:], cycles, start, block_args or None)


def _cycle_calls(tools: list[str], args: list[Any] | None) -> str:
    """The cycle's calls, "a -> b"; calls of one tool also show the arguments that differ
    between them (``read_file path='a.py' -> read_file path='b.py'``)."""
    if args is None or len(args) != len(tools) or len(set(tools)) == len(tools):
        return " -> ".join(tools)
    if all(isinstance(value, dict) for value in args):
        keys = sorted({key for value in args for key in value}, key=str)
        differ = [k for k in keys if len({repr(value.get(k)) for value in args}) > 1]
        shown = [" ".join(f"{k}={short(value.get(k), 40)}" for k in differ[:3]) for value in args]
    else:
        shown = [short(value, 40) for value in args]
    return " -> ".join(f"{tool} {what}".rstrip() for tool, what in zip(tools, shown, strict=True))


class Oscillation:
    """A cycle of period 2..5 of calls whose results repeat too. Counted in full cycles."""

    name = "oscillation"

    def observe(self, state: OscState, ev: Event, out: Monitor) -> None:
        key = ev.sig + ev.outcome
        keys = state.keys
        # Fast path: a call equal to none of the 2nd..5th calls before it ends every streak
        # and starts none, whatever the periods' state was; most healthy calls are new.
        size = len(keys)
        seen = False
        for index in range(max(size - MAX_PERIOD, 0), size - 1):
            if keys[index] == key:
                seen = True
                break
        state.same = state.same + 1 if size and keys[size - 1] == key else 1
        keys.append(key)
        state.when.append(ev.seq)
        state.tools.append(ev.tool)
        state.polls.append(ev.settings.polling)
        if len(keys) > HISTORY:
            del keys[0], state.when[0], state.tools[0], state.polls[0]
        if not seen:
            if state.live:
                state.match = [0] * (MAX_PERIOD + 1)
                state.live = False
            return
        state.live = True
        self._streaks(state, ev, out)

    def _streaks(self, state: OscState, ev: Event, out: Monitor) -> None:
        keys, when = state.keys, state.when
        recent = state.args
        recent.append((ev.seq, ev.args))
        if len(recent) > 2 * MAX_PERIOD:
            del recent[:MAX_PERIOD]  # (only the last MAX_PERIOD are read)
        size = len(keys)
        reported = False
        for period in range(MIN_PERIOD, MAX_PERIOD + 1):
            if size <= period or keys[-1] != keys[-1 - period]:
                state.match[period] = 0
                continue
            state.match[period] += 1
            match = state.match[period]
            seqs = state.seqs[period]
            if match == 1:
                state.named[period] = None
                state.start[period] = when[-1 - period]
                # a new list: a finding of the streak before keeps the seqs it was given
                seqs = state.seqs[period] = when[-1 - period : -1]
            add_seq(seqs, ev.seq)
            if reported or match < period or state.same >= period:
                continue  # (the last `period` calls all alike: a repeat, not a cycle)
            if _all_alike(keys, period) or _any_poll(state.polls, period):
                continue  # one call over and over is a repeat; polls are exempt
            if any(state.match[p] >= p for p in range(MIN_PERIOD, period) if period % p == 0):
                continue  # a shorter period explains it
            ev.in_cycle = True
            cycles = 1 + match // period
            level = ev.settings.thresholds["oscillation"].level(cycles)
            if level is None:
                # Not yet a loop as a cycle. Should the repeat of this call be one, the cycle
                # reports it (``escalate``): found as it would be without the cycle.
                if ev.cycle_period == 0:
                    ev.cycle_period, ev.cycle_count = period, cycles
                continue
            reported = True
            self._fire(state, period, cycles, level, out)

    def escalate(self, state: OscState, ev: Event, level: Level, out: Monitor) -> None:
        """Report the cycle the call is in at the level its repeat reached. The repeat
        detector leaves a call inside a cycle to the cycle, so a loop that the repeat count
        finds before the cycle count does is still found, and named as the cycle."""
        self._fire(state, ev.cycle_period, ev.cycle_count, level, out)

    def _fire(self, state: OscState, period: int, cycles: int, level: Level, out: Monitor) -> None:
        keys = state.keys
        named = state.named[period]
        if named is None:
            block_keys = keys[-period:]
            rotation = min(block_keys[i:] + block_keys[:i] for i in range(period))
            tools = set(state.tools[-period:])
            tool = next(iter(tools)) if len(tools) == 1 else ",".join(sorted(tools))
            named = ("cycle:" + digest(rotation), tool)
            state.named[period] = named
        signature, tool = named
        start = state.start[period]
        # (the message's calls are read from the state when it is made: report() calls it at
        # once, and only when the finding fires or escalates)
        out.report(
            ("oscillation", signature, start), level, cycles, tool, signature,
            state.seqs[period], _cycle_message_now,
            (period, state.tools, cycles, start, state.args, state.when), False,
        )  # fmt: skip

    def predict(self, state: OscState, ev: Event) -> list[tuple[Any, ...]]:
        """Assume the call's result repeats too: would it complete another cycle?"""
        keys = state.keys
        for period in range(MIN_PERIOD, MAX_PERIOD + 1):
            if len(keys) < period or not keys[-period].startswith(ev.sig):
                continue
            match = state.match[period] + 1
            block = keys[-period + 1 :] + [keys[-period]]
            if match < period or len(set(block)) < 2:
                continue
            cycles = 1 + match // period
            level = ev.settings.thresholds["oscillation"].level(cycles)
            if level is not None and match % period == 0:
                message = (
                    f"This call would complete cycle {cycles} of a {period}-call cycle that "
                    f"returns the same results each time (since step {state.start[period]}). "
                    + advice(None)
                )
                return [(level, cycles, state.seqs[period], message)]
        return []


class BatchState:
    __slots__ = ("counted", "cur", "cur_id", "cur_seqs", "prev", "seqs", "start", "streak")

    def __init__(self) -> None:
        self.cur_id: Any = None  # the open batch's id
        self.cur: list[str] = []  # call sig + outcome of each call in the open batch
        self.cur_seqs: list[int] = []
        self.counted = False  # the open batch already matched the previous one
        self.prev: tuple[str, ...] | None = None
        self.streak = 0
        self.start = 0
        self.seqs: list[int] = []

    def copy(self) -> BatchState:
        twin = BatchState()
        twin.cur_id, twin.cur, twin.cur_seqs = self.cur_id, list(self.cur), list(self.cur_seqs)
        twin.counted, twin.prev, twin.streak = self.counted, self.prev, self.streak
        twin.start, twin.seqs = self.start, list(self.seqs)
        return twin


def _batch_message(streak: int, calls: int, start: int) -> str:
    return (
        f"Your last {streak} messages each issued the same {calls} calls (in any order) with "
        f"the same results, since step {start}. Issuing them again will not change anything. "
        + advice(None)
    )


class BatchRepeat:
    """The same set of calls (order ignored) issued by consecutive assistant messages."""

    name = "batch_repeat"

    def _close(self, state: BatchState) -> None:
        if len(state.cur) < 2:
            state.prev, state.streak = None, 0
        else:
            key = tuple(sorted(state.cur))
            if not (state.counted and key == state.prev):
                state.prev, state.streak = key, 1
                state.start, state.seqs = state.cur_seqs[0], list(state.cur_seqs[:MAX_SEQS])
        state.cur, state.cur_seqs, state.counted, state.cur_id = [], [], False, None

    def observe(self, state: BatchState, ev: Event, out: Monitor) -> None:
        if ev.batch_id is None:
            if state.cur_id is not None:
                self._close(state)
            state.prev, state.streak = None, 0
            return
        if ev.batch_id != state.cur_id:
            if state.cur_id is not None:
                self._close(state)
            state.cur_id = ev.batch_id
        state.cur.append(ev.sig + ev.outcome)
        state.cur_seqs.append(ev.seq)
        prev = state.prev
        if state.counted or prev is None or len(state.cur) != len(prev):
            return
        if tuple(sorted(state.cur)) != prev:
            return
        state.counted = True
        state.streak += 1
        for seq in state.cur_seqs:
            add_seq(state.seqs, seq)
        level = ev.settings.thresholds["batch_repeat"].level(state.streak)
        if level is None:
            return
        signature = "batch:" + digest(list(prev))
        out.report(
            ("batch_repeat", signature, state.start), level, state.streak, ev.tool, signature,
            state.seqs, _batch_message, (state.streak, len(prev), state.start), False,
        )  # fmt: skip
