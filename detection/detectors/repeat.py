"""Repeat, per-tool max_repeats, and mutating failure: the same call again on one path.

A repeat that brings nothing new (a result already seen for this call, or an error, whatever
its text) counts; a repeat with a new result is progress. A new successful mutating call
between two repeats makes the later one a re-check after a change: counting starts again,
unless the re-check fails the same way (the same error fingerprint, ``keys.error_fault``) as
before the change: a check that fails the same way after every change is still stuck.
Successful repeats are counted per user turn (scope "turn"); failures across the whole run.
Invalid turns are not seen here (the blocker detector counts their streaks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .base import HORIZON, Event, Level, add_seq, advice, make_room, newest_half, short, times

if TYPE_CHECKING:
    from ..engine import Monitor

MAX_RESULTS: Final = 256  # distinct results remembered per call (a poll that moves forever)


class Group:
    """The calls with one signature since counting (re)started."""

    __slots__ = (
        "calls", "changes", "count", "epoch", "fault", "first_known", "first_seq", "last_new",
        "results", "seqs", "tool",
    )  # fmt: skip

    def __init__(self, seq: int, epoch: int, result: str) -> None:
        self.first_seq = seq
        self.epoch = epoch
        self.results: dict[str, int] = {result: seq}  # result digest -> first seq with it
        self.calls = 1
        self.count = 1  # calls that brought nothing new, counting the first
        self.seqs = [seq]
        self.last_new = True
        # failures: the last error's fingerprint (None: unknown, it never fails "the same way")
        self.fault: str | None = ""
        self.tool = ""  # failures: the tool
        self.changes = 0  # failures: changes (epochs) they stayed the same across
        self.first_known = result[:1] != "?"  # the first call's result is in the trace

    def copy(self) -> Group:
        twin = Group(self.first_seq, self.epoch, "")
        twin.results = dict(self.results)
        twin.calls, twin.count, twin.seqs = self.calls, self.count, list(self.seqs)
        twin.last_new, twin.fault, twin.changes = self.last_new, self.fault, self.changes
        twin.first_known, twin.tool = self.first_known, self.tool
        return twin


class RepeatState:
    """The calls of one path: made once so far, repeated (a Group), failing, capped.

    Most calls are never repeated, so a call made once is kept as three plain dict entries
    (its seq, epoch and result digest: nothing for the garbage collector to track); its
    Group is only built on the second call. The calls made once, the failing calls and the
    capped calls are each remembered up to HORIZON (base.py), then the older half is
    forgotten: memory bounded however many distinct calls a turn or a run makes.
    """

    __slots__ = ("caps", "fails", "first_epoch", "first_rdig", "first_seq", "groups")

    def __init__(self) -> None:
        self.first_seq: dict[str, int] = {}  # sig -> seq of a successful call made once
        self.first_epoch: dict[str, int] = {}
        self.first_rdig: dict[str, str] = {}
        self.groups: dict[str, Group] = {}  # successful calls made more than once
        self.fails: dict[str, Group] = {}  # failing calls, whole run
        self.caps: dict[str, list[int]] = {}  # sig -> seqs, for tools with max_repeats

    def copy(self) -> RepeatState:
        twin = RepeatState()
        twin.first_seq, twin.first_epoch = dict(self.first_seq), dict(self.first_epoch)
        twin.first_rdig = dict(self.first_rdig)
        twin.groups = {sig: group.copy() for sig, group in self.groups.items()}
        twin.fails = {sig: group.copy() for sig, group in self.fails.items()}
        twin.caps = {sig: list(seqs) for sig, seqs in self.caps.items()}
        return twin

    def new_turn(self) -> None:
        """Successful calls and caps count per turn (failures across the whole run)."""
        self.first_seq.clear()
        self.first_epoch.clear()
        self.first_rdig.clear()
        self.groups.clear()
        self.caps.clear()

    def first(self, sig: str, seq: int, epoch: int, rdig: str) -> None:
        """Record a successful call as made once (again, after a change of epoch)."""
        if len(self.first_seq) >= HORIZON and sig not in self.first_seq:
            self.first_seq = newest_half(self.first_seq)  # (the other two follow its keys)
            self.first_epoch = {key: self.first_epoch[key] for key in self.first_seq}
            self.first_rdig = {key: self.first_rdig[key] for key in self.first_seq}
        self.first_seq[sig] = seq
        self.first_epoch[sig] = epoch
        self.first_rdig[sig] = rdig

    def group(self, sig: str) -> Group | None:
        """Return the call's Group, or one made from its single call (not stored)."""
        group = self.groups.get(sig)
        if group is None:
            seq = self.first_seq.get(sig)
            if seq is not None:
                group = Group(seq, self.first_epoch[sig], self.first_rdig[sig])
        return group


def _cap_message(tool: str, limit: int, repeats: int, first: int) -> str:
    return (
        f"{tool} must not be repeated more than {times(limit)} and this is repeat "
        f"{repeats} of the call first made at step {first}. Do not call it again: "
        "check whether the first call already took effect, then report or finish."
    )


def _progress_message(tool: str, calls: int, first: int) -> str:
    return (
        f"{tool} was called {calls} times with the same arguments since step {first}, with a "
        "new (or unrecorded) result each time (progress, e.g. polling or paging)."
    )


def _repeat_message(tool: str, args: Any, result: Any, count: int, first: int) -> str:
    return (
        f"You have called {tool} with the same arguments ({short(args)}) {count} times since "
        f"step {first} and got the same result ({short(result, 60)}). Calling it again will "
        "not tell you anything new. " + advice(tool)
    )


def _failure_message(
    tool: str, args: Any, result: Any, count: int, first: int, changes: int = 0
) -> str:
    after = (
        f", the same way after each of the {changes} change(s) made in between" if changes else ""
    )
    return (
        f"{tool} has failed {count} times with the same arguments ({short(args)}) since step "
        f"{first}{after}; last error: {short(result, 80)}. " + advice(tool, True)
    )


class Repeat:
    """The same call signature again within the scope, on one path."""

    name = "repeat"

    def observe(self, state: RepeatState, ev: Event, out: Monitor) -> None:
        settings = ev.settings
        if settings.max_repeats is not None:
            self._cap(state, ev, settings.max_repeats, settings.rule, out)
        if settings.polling:
            return
        if ev.status == "error":
            self._failure(state, ev, out)
        else:
            self._success(state, ev, out)

    def _cap(self, state: RepeatState, ev: Event, limit: int, rule: str, out: Monitor) -> None:
        seqs = state.caps.get(ev.sig)
        if seqs is None:
            state.caps = make_room(state.caps)
            seqs = state.caps[ev.sig] = []
        add_seq(seqs, ev.seq)
        repeats = len(seqs) - 1
        if repeats > limit:
            level: Level = ("stop", limit, rule)
            out.report(
                ("repeat", ev.sig, "cap"), level, repeats, ev.tool, ev.sig, seqs,
                _cap_message, (ev.tool, limit, repeats, seqs[0]), False,
            )  # fmt: skip

    def _success(self, state: RepeatState, ev: Event, out: Monitor) -> None:
        sig = ev.sig
        group = state.groups.get(sig)
        if group is None:
            seq = state.first_seq.get(sig)
            if seq is None or state.first_epoch[sig] != ev.epoch:
                state.first(sig, ev.seq, ev.epoch, ev.rdig)  # a new call (or world)
                return
            group = Group(seq, ev.epoch, state.first_rdig[sig])  # its second call
            del state.first_seq[sig], state.first_epoch[sig], state.first_rdig[sig]
            state.groups[sig] = group
        elif group.epoch != ev.epoch:  # the world changed since: a re-check, counted anew
            del state.groups[sig]
            state.first(sig, ev.seq, ev.epoch, ev.rdig)
            return
        group.calls += 1
        first = group.results.get(ev.rdig)
        threshold = ev.settings.thresholds["repeat"]
        if first is None:  # a new result: progress
            group.last_new = True
            if len(group.results) < MAX_RESULTS:
                group.results[ev.rdig] = ev.seq
            warn = threshold.warn
            if warn and group.calls == warn and group.count < warn:
                info: Level = ("info", warn, threshold.warn_rule)
                out.report(
                    ("repeat", sig, "progress", group.first_seq), info, group.calls,
                    ev.tool, sig, [group.first_seq, ev.seq],
                    _progress_message, (ev.tool, group.calls, group.first_seq), False,
                )  # fmt: skip
            return
        group.last_new = False
        if group.count == 1 and not group.first_known:
            # The first call's result is not in the trace (unknown: never the same result),
            # so the loop of this result starts at the first call that returned it.
            group.first_seq, group.seqs, group.first_known = first, [first], True
        group.count += 1
        if first != group.first_seq and first not in group.seqs:
            add_seq(group.seqs, first)
        add_seq(group.seqs, ev.seq)
        ev.repeat_of = first
        ev.group_count = group.count
        level = threshold.level(group.count)
        if level is not None and ev.in_cycle:
            ev.cycle_level = level  # the cycle it is in reports it (Oscillation.escalate)
        elif level is not None:
            out.report(
                ("repeat", sig, "ok", group.first_seq), level, group.count, ev.tool, sig,
                group.seqs, _repeat_message,
                (ev.tool, ev.args, ev.result, group.count, group.first_seq), False,
            )  # fmt: skip

    def _failure(self, state: RepeatState, ev: Event, out: Monitor) -> None:
        group = state.fails.get(ev.sig)
        # A re-check after a change is still stuck only if it fails the same way, which a
        # failure whose error the trace does not carry (unknown) can never be said to.
        fault = (ev.fault.key if ev.fault is not None else "") if ev.known_result else None
        if group is None or (group.epoch != ev.epoch and (fault is None or group.fault != fault)):
            if group is None:
                state.fails = make_room(state.fails)
            group = state.fails[ev.sig] = Group(ev.seq, ev.epoch, "!error")
            group.fault, group.tool = fault, ev.tool  # new, or a re-check that fails differently
            return
        if group.epoch != ev.epoch:  # a re-check after a change that fails the same way
            group.changes += 1
            group.epoch = ev.epoch
        group.fault = fault
        group.calls += 1
        group.count += 1
        add_seq(group.seqs, ev.seq)
        ev.repeat_of = group.first_seq
        ev.group_count = group.count
        level = ev.settings.thresholds["repeat"].level(group.count)
        if level is not None and ev.in_cycle:
            ev.cycle_level = level  # the cycle it is in reports it (Oscillation.escalate)
        elif level is not None:
            out.report(
                ("repeat", ev.sig, "error", group.first_seq), level, group.count, ev.tool,
                ev.sig, group.seqs, _failure_message,
                (ev.tool, ev.args, ev.result, group.count, group.first_seq, group.changes),
                False,
            )  # fmt: skip

    def unknown_failure(self, state: RepeatState, ev: Event) -> None:
        """A failure whose arguments the trace does not carry could be any of its tool's
        calls, failing with any error: each failing call of the tool may since have failed
        differently, so none of them fails "the same way" across a change any more."""
        for group in state.fails.values():
            if group.tool == ev.tool:
                group.fault = None

    def predict(self, state: RepeatState, ev: Event) -> list[tuple[Any, ...]]:
        """Return (level, count, seqs, message) the call would reach if its result repeats."""
        settings = ev.settings
        out: list[tuple[Any, ...]] = []
        if settings.max_repeats is not None:
            seqs = state.caps.get(ev.sig, [])
            if len(seqs) > settings.max_repeats:
                message = (
                    f"{ev.tool} must not be repeated more than {times(settings.max_repeats)}; "
                    f"it was first called at step {seqs[0]}. Do not call it again."
                )
                cap: Level = ("stop", settings.max_repeats, settings.rule)
                out.append((cap, len(seqs), seqs, message))
        if settings.polling:
            return out
        threshold = settings.thresholds["repeat"]
        group = state.group(ev.sig)
        if (
            group is not None
            and group.epoch == ev.epoch
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
        warn = threshold.warn or 0
        if fail is not None and (fail.epoch == ev.epoch or fail.count >= warn > 0):
            level = threshold.level(fail.count + 1)
            if level is not None:
                message = (
                    f"{ev.tool} already failed {times(fail.count)} with these arguments since "
                    f"step {fail.first_seq}. " + advice(ev.tool, True)
                )
                out.append((level, fail.count + 1, fail.seqs, message))
        return out


class Failing:
    """A mutating tool's run of identical failures (see MutatingFailure)."""

    __slots__ = ("count", "epoch", "first_seq", "rdig", "seqs", "sig")

    def __init__(self, sig: str, rdig: str, seq: int, epoch: int) -> None:
        self.sig = sig
        self.rdig = rdig
        self.count = 1
        self.first_seq = seq
        self.seqs = [seq]
        self.epoch = epoch

    def copy(self) -> Failing:
        twin = Failing(self.sig, self.rdig, self.first_seq, self.epoch)
        twin.count, twin.seqs = self.count, list(self.seqs)
        return twin


def _mutating_message(tool: str, args: Any, result: Any, count: int, first: int) -> str:
    return (
        f"{tool} changes things on every attempt and has now failed the same way {count} times "
        f"in a row with identical arguments ({short(args)}) since step {first}: "
        f"{short(result, 80)}. Do not retry it unchanged: read the current state, then change "
        "the arguments, or report the blocker."
    )


class MutatingFailure:
    """A mutating tool failing the same way with identical arguments in consecutive calls.

    Consecutive = the previous call to that tool on this path, with no new successful
    mutating call in between; other tools (a read of the file) may come between.
    """

    name = "mutating_failure"

    def observe(self, state: dict[str, Failing], ev: Event, out: Monitor) -> None:
        settings = ev.settings
        if not settings.mutating or settings.polling:
            return
        if ev.status != "error":
            state.pop(ev.tool, None)
            return
        last = state.get(ev.tool)
        if last is None or last.sig != ev.sig or last.rdig != ev.rdig or last.epoch != ev.epoch:
            state[ev.tool] = Failing(ev.sig, ev.rdig, ev.seq, ev.epoch)
            return
        last.count += 1
        add_seq(last.seqs, ev.seq)
        level = settings.thresholds["mutating_failure"].level(last.count)
        if level is not None:
            out.report(
                ("mutating_failure", ev.sig, last.first_seq), level, last.count, ev.tool,
                ev.sig, last.seqs, _mutating_message,
                (ev.tool, ev.args, ev.result, last.count, last.first_seq), False,
            )  # fmt: skip

    def predict(self, state: dict[str, Failing], ev: Event) -> list[tuple[Any, ...]]:
        settings = ev.settings
        last = state.get(ev.tool)
        if not settings.mutating or last is None:
            return []
        if last.sig != ev.sig or last.epoch != ev.epoch:
            return []
        level = settings.thresholds["mutating_failure"].level(last.count + 1)
        if level is None:
            return []
        message = (
            f"{ev.tool} already failed {times(last.count)} in a row with these exact arguments "
            f"since step {last.first_seq} and nothing changed since. " + advice(ev.tool, True)
        )
        return [(level, last.count + 1, last.seqs, message)]
