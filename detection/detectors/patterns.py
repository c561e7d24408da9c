"""Oscillation (A,B,A,B… with the same results) and batch repeat (the same set of calls)."""

from __future__ import annotations

from typing import Any

from ..keys import digest
from .base import MAX_SEQS, Event, Lane, Reporter, add_seq, advice

MIN_PERIOD, MAX_PERIOD = 2, 5


class OscState:
    __slots__ = ("hist", "keys", "live", "match", "named", "same", "seqs", "start")

    def __init__(self) -> None:
        # last MAX_PERIOD+1 calls: (call sig + outcome, seq, tool, polling)
        self.hist: list[tuple[str, int, str, bool]] = []
        self.keys: list[str] = []  # the same calls' keys alone, for a quick `in`
        self.live = False  # some period has a streak going (a match above 0)
        self.same = 0  # how many calls in a row, ending with the last, have the same key
        self.match = [0] * (MAX_PERIOD + 1)  # per period: positions equal to p calls before
        self.start = [0] * (MAX_PERIOD + 1)  # per period: seq where the streak began
        self.seqs: list[list[int]] = [[] for _ in range(MAX_PERIOD + 1)]
        # per period: (signature, tool) of the streak's cycle, worked out when it first fires;
        # a streak goes on only while each call equals the one a period before, so the cycle
        # stays the same (rotated) until the streak ends
        self.named: list[tuple[str, str] | None] = [None] * (MAX_PERIOD + 1)


class Oscillation:
    """A cycle of period 2..5 of calls whose results repeat too. Counted in full cycles."""

    name = "oscillation"

    def new_state(self) -> OscState:
        return OscState()

    def new_turn(self, state: OscState, scope: str) -> OscState:
        return OscState() if scope == "turn" else state

    def observe(self, state: OscState, ev: Event, lane: Lane, out: Reporter) -> None:
        settings = ev.settings
        assert settings is not None
        key = ev.sig + ev.outcome
        hist, keys = state.hist, state.keys
        # Fast path: a call equal to none of the 2nd..5th calls before it ends every streak
        # and starts none, whatever the periods' state was; most healthy calls are new.
        seen = key in keys[-MAX_PERIOD:-1]
        state.same = state.same + 1 if keys and keys[-1] == key else 1
        hist.append((key, ev.seq, ev.tool or "", settings.polling))
        keys.append(key)
        if len(hist) > MAX_PERIOD + 1:
            del hist[0], keys[0]
        if not seen:
            if state.live:
                state.match = [0] * (MAX_PERIOD + 1)
                state.live = False
            return
        state.live = True
        size = len(hist)
        reported = False
        for period in range(MIN_PERIOD, MAX_PERIOD + 1):
            if size <= period or hist[-1][0] != hist[-1 - period][0]:
                state.match[period] = 0
                continue
            state.match[period] += 1
            match = state.match[period]
            seqs = state.seqs[period]
            if match == 1:
                state.named[period] = None
                state.start[period] = hist[-1 - period][1]
                seqs.clear()
                seqs.extend(entry[1] for entry in hist[-1 - period : -1])
            add_seq(seqs, ev.seq)
            if reported or match < period or state.same >= period:
                continue  # (the last `period` calls all alike: a repeat, not a cycle)
            block = hist[-period:]
            block_keys = [entry[0] for entry in block]
            if len(set(block_keys)) < 2 or any(entry[3] for entry in block):
                continue  # one call over and over is a repeat; polls are exempt
            if any(state.match[p] >= p for p in range(MIN_PERIOD, period) if period % p == 0):
                continue  # a shorter period explains it
            ev.in_cycle = True
            cycles = 1 + match // period
            threshold = settings.thresholds["oscillation"]
            level = threshold.level(cycles)
            if level is None:
                continue
            reported = True
            named = state.named[period]
            if named is None:
                rotation = min(block_keys[i:] + block_keys[:i] for i in range(period))
                tools = {entry[2] for entry in block}
                tool = next(iter(tools)) if len(tools) == 1 else ",".join(sorted(tools))
                named = state.named[period] = ("cycle:" + digest(rotation), tool)
            signature, tool = named

            def message(period: int = period, block: Any = block, cycles: int = cycles) -> str:
                names = " -> ".join(entry[2] for entry in block)
                return (
                    f"You are going round in a cycle of {period} calls ({names}) that return the "
                    f"same results each time: {cycles} full cycles since step "
                    f"{state.start[period]}. Going round again will not change anything. "
                    + advice(None)
                )

            out.report(
                "oscillation", (signature, state.start[period]), level, cycles, tool,
                signature, seqs, message,
            )  # fmt: skip

    def predict(self, state: OscState, ev: Event, lane: Lane) -> list[tuple[Any, ...]]:
        """Assume the call's result repeats too: would it complete another cycle?"""
        settings = ev.settings
        assert settings is not None
        hist = state.hist
        for period in range(MIN_PERIOD, MAX_PERIOD + 1):
            if len(hist) < period or not hist[-period][0].startswith(ev.sig):
                continue
            match = state.match[period] + 1
            block = [entry[0] for entry in hist[-period + 1 :]] + [hist[-period][0]]
            if match < period or len(set(block)) < 2:
                continue
            cycles = 1 + match // period
            level = settings.thresholds["oscillation"].level(cycles)
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
        self.cur_id: str | None = None
        self.cur: list[str] = []  # call sig + outcome of each call in the open batch
        self.cur_seqs: list[int] = []
        self.counted = False  # the open batch already matched the previous one
        self.prev: tuple[str, ...] | None = None
        self.streak = 0
        self.start = 0
        self.seqs: list[int] = []


class BatchRepeat:
    """The same set of calls (order ignored) issued by consecutive assistant messages."""

    name = "batch_repeat"

    def new_state(self) -> BatchState:
        return BatchState()

    def new_turn(self, state: BatchState, scope: str) -> BatchState:
        return BatchState()  # a user message in between: not consecutive

    def _close(self, state: BatchState) -> None:
        if len(state.cur) < 2:
            state.prev, state.streak = None, 0
        else:
            key = tuple(sorted(state.cur))
            if not (state.counted and key == state.prev):
                state.prev, state.streak = key, 1
                state.start, state.seqs = state.cur_seqs[0], list(state.cur_seqs[:MAX_SEQS])
        state.cur, state.cur_seqs, state.counted, state.cur_id = [], [], False, None

    def observe(self, state: BatchState, ev: Event, lane: Lane, out: Reporter) -> None:
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
        settings = ev.settings
        assert settings is not None
        level = settings.thresholds["batch_repeat"].level(state.streak)
        if level is None:
            return
        signature = "batch:" + digest(list(prev))

        def message() -> str:
            return (
                f"Your last {state.streak} messages each issued the same {len(prev)} calls "
                f"(in any order) with the same results, since step {state.start}. Issuing them "
                "again will not change anything. " + advice(None)
            )

        out.report(
            "batch_repeat", (signature, state.start), level, state.streak, ev.tool, signature,
            state.seqs, message,
        )  # fmt: skip
