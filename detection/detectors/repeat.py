"""Repeat, per-tool max_repeats, and mutating failure: the same call again on one path.

A repeat that brings nothing new (a result already seen for this call, or an error, whatever
its text) counts; a repeat with a new result is progress. A new successful mutating call
between two repeats makes the later one a re-check after a change: counting starts again.
Successful repeats are counted per user turn (scope "turn"); failures across the whole run.
"""

from __future__ import annotations

from typing import Any

from .base import Event, Lane, Reporter, add_seq, advice, short

MAX_RESULTS = 256  # distinct results remembered per call (a poll that moves forever)


class Group:
    """The calls with one signature since counting (re)started."""

    __slots__ = ("calls", "count", "epoch", "first_seq", "last_new", "results", "seqs")

    def __init__(self, seq: int, epoch: int, result: str) -> None:
        self.first_seq = seq
        self.epoch = epoch
        self.results: dict[str, int] = {result: seq}  # result digest -> first seq with it
        self.calls = 1
        self.count = 1  # calls that brought nothing new, counting the first
        self.seqs = [seq]
        self.last_new = True


#: A call made once so far in its group: (seq, epoch, result digest). Most calls are never
#: repeated, so their Group (a dict, a list and seven fields) is only built on the second.
First = tuple[int, int, str]


def _group(entry: Group | First | None) -> Group | None:
    return Group(*entry) if type(entry) is tuple else entry  # type: ignore[arg-type,return-value]


class RepeatState:
    __slots__ = ("caps", "fails", "turn")

    def __init__(self) -> None:
        self.turn: dict[str, Group | First] = {}  # successful calls, this scope
        self.fails: dict[str, Group] = {}  # failing calls, whole run
        self.caps: dict[str, list[int]] = {}  # sig -> seqs, for tools with max_repeats


class Repeat:
    """The same call signature again within the scope, on one path."""

    name = "repeat"

    def new_state(self) -> RepeatState:
        return RepeatState()

    def new_turn(self, state: RepeatState, scope: str) -> RepeatState:
        if scope == "turn":
            state.turn.clear()
            state.caps.clear()
        return state

    def observe(self, state: RepeatState, ev: Event, lane: Lane, out: Reporter) -> None:
        settings = ev.settings
        assert settings is not None
        if settings.max_repeats is not None:
            self._cap(state, ev, settings.max_repeats, settings.rule, out)
        if settings.polling:
            return
        if ev.status == "error":
            self._failure(state, ev, lane, out)
        else:
            self._success(state, ev, lane, out)

    def _cap(self, state: RepeatState, ev: Event, limit: int, rule: str, out: Reporter) -> None:
        seqs = state.caps.setdefault(ev.sig, [])
        add_seq(seqs, ev.seq)
        repeats = len(seqs) - 1
        if repeats > limit:

            def message() -> str:
                return (
                    f"{ev.tool} must not be repeated more than {limit} time(s) and this is repeat "
                    f"{repeats} of the call first made at step {seqs[0]}. Do not call it again: "
                    "check whether the first call already took effect, then report or finish."
                )

            out.report(
                "repeat", (ev.sig, "cap"), ("stop", limit, rule), repeats, ev.tool, ev.sig,
                seqs, message,
            )  # fmt: skip

    def _success(self, state: RepeatState, ev: Event, lane: Lane, out: Reporter) -> None:
        turn = state.turn
        group = turn.get(ev.sig)
        if group is not None and type(group) is tuple:
            group = turn[ev.sig] = Group(*group)
        if group is None or group.epoch != lane.epoch:  # type: ignore[union-attr]
            turn[ev.sig] = (ev.seq, lane.epoch, ev.rdig)
            return
        assert isinstance(group, Group)
        group.calls += 1
        first = group.results.get(ev.rdig)
        threshold = ev.settings.thresholds["repeat"]  # type: ignore[union-attr]
        if first is None:  # a new result: progress
            group.last_new = True
            if len(group.results) < MAX_RESULTS:
                group.results[ev.rdig] = ev.seq
            if threshold.warn and group.calls == threshold.warn and group.count < threshold.warn:

                def message() -> str:
                    return (
                        f"{ev.tool} was called {group.calls} times with the same arguments since "
                        f"step {group.first_seq}, with a new result each time (progress, e.g. "
                        "polling or paging)."
                    )

                info = ("info", threshold.warn, threshold.warn_rule)
                out.report(
                    "repeat", (ev.sig, "progress", group.first_seq), info, group.calls,
                    ev.tool, ev.sig, [group.first_seq, ev.seq], message,
                )  # fmt: skip
            return
        group.last_new = False
        group.count += 1
        if first != group.first_seq and first not in group.seqs:
            add_seq(group.seqs, first)
        add_seq(group.seqs, ev.seq)
        ev.repeat_of, ev.group_count = first, group.count
        level = threshold.level(group.count)
        if level is not None and not ev.in_cycle:
            count = group.count

            def message() -> str:
                return (
                    f"You have called {ev.tool} with the same arguments ({short(ev.args)}) "
                    f"{count} times since step {group.first_seq} and got the same result "
                    f"({short(ev.result, 60)}). Calling it again will not tell you anything "
                    "new. " + advice(ev.tool)
                )

            out.report(
                "repeat", (ev.sig, "ok", group.first_seq), level, group.count, ev.tool,
                ev.sig, group.seqs, message,
            )  # fmt: skip

    def _failure(self, state: RepeatState, ev: Event, lane: Lane, out: Reporter) -> None:
        group = state.fails.get(ev.sig)
        if group is None or group.epoch != lane.epoch:
            state.fails[ev.sig] = Group(ev.seq, lane.epoch, "!error")
            return
        group.calls += 1
        group.count += 1
        add_seq(group.seqs, ev.seq)
        ev.repeat_of, ev.group_count = group.first_seq, group.count
        threshold = ev.settings.thresholds["repeat"]  # type: ignore[union-attr]
        level = threshold.level(group.count)
        if level is not None and not ev.in_cycle:
            count = group.count

            def message() -> str:
                return (
                    f"{ev.tool} has failed {count} times with the same arguments "
                    f"({short(ev.args)}) since step {group.first_seq}; last error: "
                    f"{short(ev.result, 80)}. " + advice(ev.tool, failing=True)
                )

            out.report(
                "repeat", (ev.sig, "error", group.first_seq), level, group.count, ev.tool,
                ev.sig, group.seqs, message,
            )  # fmt: skip

    def predict(self, state: RepeatState, ev: Event, lane: Lane) -> list[tuple[Any, ...]]:
        """Return (level, count, seqs, message) the call would reach if its result repeats."""
        settings = ev.settings
        assert settings is not None
        out: list[tuple[Any, ...]] = []
        if settings.max_repeats is not None:
            seqs = state.caps.get(ev.sig, [])
            if len(seqs) > settings.max_repeats:
                message = (
                    f"{ev.tool} must not be repeated more than {settings.max_repeats} time(s); "
                    f"it was first called at step {seqs[0]}. Do not call it again."
                )
                level = ("stop", settings.max_repeats, settings.rule)
                out.append((level, len(seqs), seqs, message))
        if settings.polling:
            return out
        threshold = settings.thresholds["repeat"]
        group = _group(state.turn.get(ev.sig))
        if (
            group is not None
            and group.epoch == lane.epoch
            and not (group.last_new and group.calls > 1)
        ):
            level = threshold.level(group.count + 1)
            if level is not None:
                message = (
                    f"This would be call {group.count + 1} of {ev.tool} with the same arguments "
                    f"since step {group.first_seq}, which returned the same result each time. "
                    + advice(ev.tool)
                )
                out.append((level, group.count + 1, group.seqs, message))
        fail = state.fails.get(ev.sig)
        if fail is not None and fail.epoch == lane.epoch:
            level = threshold.level(fail.count + 1)
            if level is not None:
                message = (
                    f"{ev.tool} already failed {fail.count} times with these arguments since "
                    f"step {fail.first_seq}. " + advice(ev.tool, failing=True)
                )
                out.append((level, fail.count + 1, fail.seqs, message))
        return out


class MutatingFailure:
    """A mutating tool failing the same way with identical arguments in consecutive calls.

    Consecutive = the previous call to that tool on this path, with no new successful
    mutating call in between; other tools (a read of the file) may come between.
    """

    name = "mutating_failure"

    def new_state(self) -> dict[str, Any]:
        return {}  # tool -> [sig, result digest, count, first seq, seqs, epoch]

    def new_turn(self, state: dict[str, Any], scope: str) -> dict[str, Any]:
        return state  # failures count across the whole run

    def observe(self, state: dict[str, Any], ev: Event, lane: Lane, out: Reporter) -> None:
        settings = ev.settings
        if settings is None or not settings.mutating or settings.polling:
            return
        if ev.status != "error":
            state.pop(ev.tool, None)
            return
        last = state.get(ev.tool)
        if last is None or last[0] != ev.sig or last[1] != ev.rdig or last[5] != lane.epoch:
            state[ev.tool] = [ev.sig, ev.rdig, 1, ev.seq, [ev.seq], lane.epoch]
            return
        last[2] += 1
        add_seq(last[4], ev.seq)
        level = settings.thresholds["mutating_failure"].level(last[2])
        if level is not None:

            def message() -> str:
                return (
                    f"{ev.tool} changes things on every attempt and has now failed the same way "
                    f"{last[2]} times in a row with identical arguments ({short(ev.args)}) since "
                    f"step {last[3]}: {short(ev.result, 80)}. Do not retry it unchanged: read the "
                    "current state, then change the arguments, or report the blocker."
                )

            out.report(
                "mutating_failure", (ev.sig, last[3]), level, last[2], ev.tool, ev.sig,
                last[4], message,
            )  # fmt: skip

    def predict(self, state: dict[str, Any], ev: Event, lane: Lane) -> list[tuple[Any, ...]]:
        settings = ev.settings
        last = state.get(ev.tool)
        if settings is None or not settings.mutating or last is None:
            return []
        if last[0] != ev.sig or last[5] != lane.epoch:
            return []
        level = settings.thresholds["mutating_failure"].level(last[2] + 1)
        if level is None:
            return []
        message = (
            f"{ev.tool} already failed {last[2]} time(s) in a row with these exact arguments "
            f"since step {last[3]} and nothing changed since. " + advice(ev.tool, failing=True)
        )
        return [(level, last[2] + 1, last[4], message)]
