"""The core: one streaming engine behind both ``Monitor`` (live) and ``analyze`` (postmortem).

Each step goes through ``Monitor.observe``: its signatures are computed once, it is placed on
its path (lane) of the run tree, every detector that can fire for its tool reads it with
that lane's state, and the budgets, ledger and stall score are updated. ``analyze`` is the
same loop over a whole run, so a live agent and the dashboard always agree.

Lanes: counts are kept per lane, one actor's own sequence of actions (``Step.lane``, None for
the main agent; see detection/model.py). ``parent_id`` only decides where a new lane starts
from: a copy of the lane its first step's parent lives in (the main lane when the parent is
unknown), so a sub-agent sees what its caller had done, and two sub-agents never see each
other's calls. Wrapping steps in more spans changes no lane.

Memory: detector state is bounded by the number of distinct signatures, per lane, and a run
keeps at most MAX_LANES lanes besides the main one (least recently used out first: a step of
a dropped lane starts it again from where its parent lives). The ids of steps outside the
main lane are remembered only while they can still be named as a parent: the MAX_IDS most
recently seen. So a live run's memory does not grow with its length; ``Monitor`` and
``analyze`` follow the same rules. The ledger is kept only when asked (``analyze``), as
columns of ints and shared strings (LedgerEntry objects are made when it is read).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any, Final, cast

from .detectors.base import Event, Level, Message, add_seq, make_room
from .detectors.blocker import Blocker, BlockerState
from .detectors.patterns import BatchRepeat, BatchState, Oscillation, OscState
from .detectors.repeat import Failing, MutatingFailure, Repeat, RepeatState
from .detectors.similarity import (
    ACK_TOOLS,
    Cluster,
    NearRepeat,
    ReadRange,
    ReadState,
    ResultStall,
    StallState,
)
from .detectors.streams import MessageLoop, Streak, StreakState, Text
from .findings import _RANK, Analysis, Check, Finding, Ledger, Waste, group_loops, worst
from .keys import Digester, Fault, digester, error_fault, value_digest
from .model import Run
from .policy import Policy, ToolSettings
from .step import Step

__all__ = ["Monitor", "analyze"]

#: Ids of steps outside the main lane remembered as possible parents of a new lane.
MAX_IDS: Final = 4096
#: Lanes kept besides the main one, least recently used out first (bounds a live run's memory
#: when it spawns sub-agent after sub-agent).
MAX_LANES: Final = 256
MAX_FAULTS: Final = 4096  # error fingerprints remembered by call and result (loops repeat them)
MAX_BATCH_SIGS: Final = 1024  # call signatures remembered of one batch (a batch is a few calls)
SERIES_POINTS: Final = 200
#: The call signature of every invalid turn (no valid action), whatever its tool, arguments
#: or error text: a streak of them is one loop.
INVALID_SIG: Final = "(invalid)"

Totals = tuple[int, float, float, float | None]  # steps, tokens, cost, time


class Lane:
    """The state of one actor's sequence: each detector's state plus what changed the world."""

    __slots__ = (
        "batch", "blocker", "epoch", "messages", "mutations", "mutfail", "near", "osc", "reads",
        "repeat", "stall", "streak", "together", "together_sigs",
    )  # fmt: skip

    def __init__(self) -> None:
        self.osc = OscState()
        self.blocker = BlockerState()
        self.repeat = RepeatState()
        self.mutfail: dict[str, Failing] = {}  # tool -> its run of identical failures
        self.batch = BatchState()
        self.stall = StallState()
        self.reads = ReadState()
        self.near: dict[str, list[Cluster]] = {}  # tool -> near-repeat clusters
        self.streak = StreakState()
        self.messages: list[Text] = []  # the assistant's texts since the last tool call
        self.epoch = 0  # bumped by each new successful call to a mutating tool
        # mutating call signatures seen in the scope (a dict: the oldest go past HORIZON)
        self.mutations: dict[str, None] = {}
        self.together: Any = None  # the batch (assistant message) of the last call
        self.together_sigs: set[str] = set()  # the call signatures issued in that batch

    def copy(self) -> Lane:
        twin = Lane()
        twin.osc, twin.repeat, twin.batch = self.osc.copy(), self.repeat.copy(), self.batch.copy()
        twin.mutfail = {tool: failing.copy() for tool, failing in self.mutfail.items()}
        twin.blocker = self.blocker.copy()
        twin.stall, twin.streak = self.stall.copy(), self.streak.copy()
        twin.reads = self.reads.copy()
        twin.near = {
            tool: [cluster.copy() for cluster in clusters] for tool, clusters in self.near.items()
        }
        twin.messages = [text.copy() for text in self.messages]
        twin.epoch, twin.mutations = self.epoch, dict(self.mutations)
        twin.together, twin.together_sigs = self.together, set(self.together_sigs)
        return twin

    def new_turn(self, scope: str) -> None:
        """A user message: what counts per turn starts again.

        In scope "turn" that is cycles, successful repeats and caps, result stalls, re-read
        ranges, near repeats and the mutations seen. In any scope, batches and streaks (a user
        message in between: not consecutive) and the monologue. Failures (repeat's, mutating
        failure's and blockers) always count across the whole run.
        """
        if scope == "turn":
            self.osc = OscState()
            self.repeat.new_turn()
            self.stall = StallState()
            self.reads = ReadState()
            self.near = {}
            self.mutations.clear()
        self.batch = BatchState()
        self.streak = StreakState()
        self.messages = []


class _Plan:
    """What the core loop needs about one tool, resolved once (see ``Monitor._plan``).

    A detector switched off here would return at once for every call to this tool (it is
    disabled for the tool, or the tool is mutating, polling or an acknowledgement that the
    similarity detectors never look at), so the core loop does not call it at all.
    """

    __slots__ = (
        "batch", "blocker", "digest", "mutating", "mutfail", "near", "osc", "prefix", "quiet",
        "quota", "reads", "repeat", "settings", "stall", "streak",
    )  # fmt: skip

    def __init__(self, settings: ToolSettings, quiet: bool) -> None:
        self.settings = settings
        self.quiet = quiet  # mutating, polling or an acknowledgement: no similarity checks
        self.prefix = settings.tool + ":"
        self.digest: Digester = digester(settings.volatile)
        self.mutating = settings.mutating
        self.quota = settings.quota
        on = {name: threshold.enabled for name, threshold in settings.thresholds.items()}
        self.osc = on["oscillation"]
        self.repeat = on["repeat"] and not (settings.polling and settings.max_repeats is None)
        self.mutfail = on["mutating_failure"] and settings.mutating and not settings.polling
        self.blocker = on["blocker"]
        self.batch = on["batch_repeat"]
        self.stall = on["result_stall"]
        self.reads = on["read_range"] and not quiet
        self.near = on["near_repeat"] and not quiet
        self.streak = on["streak"]


class _Incident:
    """A finding while it is still growing: one loop, escalating from warn to stop."""

    __slots__ = (
        "count", "detector", "fired_at", "last_cost", "last_steps", "last_time", "last_tokens",
        "mark", "message", "rule", "seqs", "severity", "signature", "started_at", "stop_at",
        "threshold", "tool",
    )  # fmt: skip

    def __init__(
        self, detector: str, started_at: int, fired_at: int, tool: str | None, signature: str
    ) -> None:
        self.detector = detector
        self.started_at = started_at  # seq of the loop's first iteration
        self.fired_at = fired_at
        self.mark: Totals | None = None  # totals at the first warn
        # the totals at the loop's latest iteration since then (fields, not a Totals: a
        # loop moves on most steps, and these are set without allocating)
        self.last_steps = 0
        self.last_tokens = 0.0
        self.last_cost = 0.0
        self.last_time: float | None = None
        self.severity = "info"
        self.tool = tool
        self.signature = signature
        self.seqs: list[int] = []
        self.count = 0
        self.threshold = 0
        self.message = ""
        self.rule = ""
        self.stop_at: int | None = None  # seq where it crossed the stop threshold

    def last(self) -> Totals:
        """Return the totals at the loop's latest iteration (once it warned)."""
        return (self.last_steps, self.last_tokens, self.last_cost, self.last_time)


def _sorted_seqs(seqs: list[int]) -> tuple[int, ...]:
    """Return the seqs sorted without duplicates (most lists already are: one copy then)."""
    for index in range(1, len(seqs)):
        if seqs[index - 1] >= seqs[index]:
            return tuple(sorted(set(seqs)))
    return tuple(seqs)


def _quota_message(tool: str, calls: int, quota: int) -> str:
    return (
        f"{tool} has been called {calls} times in this run, over its quota of {quota}. Stop "
        "calling it: work with what you have, or report the blocker."
    )


def _budget_message(shown: str, unit: str, limit: float) -> str:
    return (
        f"This run has used {shown} {unit}, over its budget of {limit:g}. Finish now with what "
        "you have, or report what is blocking you."
    )


class Monitor:
    """Watch an agent's steps one at a time and say when it stops making progress.

    ``observe(step)`` returns the findings that fire on that step; ``check(tool, args)`` answers
    before a call whether making it would be a loop; ``analysis()`` summarises so far.
    """

    def __init__(self, policy: Policy | None = None, *, keep_ledger: bool = False) -> None:
        self.policy = policy or Policy()
        self._osc = Oscillation()
        self._repeat = Repeat()
        self._mutfail = MutatingFailure()
        self._blocker = Blocker()
        self._faults: dict[str, Fault] = {}  # call sig + result digest -> error fingerprint
        self._batch = BatchRepeat()
        self._stall = ResultStall()
        self._reads = ReadRange()
        self._near = NearRepeat()
        self._streak = Streak()
        self._message_loop = MessageLoop(self.policy.threshold("message_loop"))
        self._message_on = self._message_loop.threshold.enabled
        self._scope = self.policy.scope
        self._plans: dict[str, _Plan] = {}
        self._ev = Event(self.policy.for_tool("?"))  # refilled for every tool call
        # Lane keys and step ids are strings in the model, but any hashable works (typed Any:
        # the compiled engine takes what plain Python takes)
        self._lanes: dict[Any, Lane] = {None: Lane()}  # lane key (None: the main agent) -> lane
        # id of a step outside the main lane -> its lane's key; least recently seen first
        self._where: dict[Any, Any] = {}
        self._current: Any = None
        self._incidents: dict[tuple[Any, ...], _Incident] = {}  # key (detector first) -> it
        self._fired: list[Finding] = []
        self._live = True  # observe() returns what fires; analyze() only wants the end
        self._hit = 0  # the rank of the worst warn/stop reported on the current step
        self._quota: dict[str, list[int]] = {}  # tool -> first seqs
        self._quota_n: dict[str, int] = {}  # tool -> calls
        self._keep_ledger = keep_ledger
        self._ledger = Ledger()
        self._series: list[tuple[int, float]] = []
        self._stride = 1
        self.steps = 0
        self.tool_calls = 0
        self.unknown_args = 0  # calls whose arguments the trace does not carry
        self.unknown_results = 0  # calls whose result the trace does not carry
        self.repeated = 0
        # the last tool call's place in the ledger: (first seq it repeats, calls in its
        # group), or None when it repeated nothing (what a live run stores as its ledger)
        self.last_repeat: tuple[int, int] | None = None
        # the run's waste as last added up; None once a loop moved (see report and waste)
        self._waste_memo: Waste | None = None
        self._tokens = 0.0
        self._cost = 0.0
        self._has_tokens = False
        self._has_cost = False
        self._time: float | None = None
        self._last_seq = -1
        policy = self.policy
        self._any_budget = bool(policy.max_steps or policy.max_tokens or policy.max_cost)

    # -- lanes ------------------------------------------------------------------------
    def _lane_for(self, step: Step) -> Lane:
        """Return the lane of a step outside the main lane, opening it if it is new."""
        key = step.lane
        lanes = self._lanes
        lane = lanes.get(key)
        if lane is None:  # a new lane (or one dropped): it starts from where its parent lives
            source = lanes.get(self._where.get(step.parent_id)) or lanes[None]
            lane = lanes[key] = source.copy()
            if len(lanes) > MAX_LANES + 1:
                del lanes[_least_used(lanes, key)]
        else:
            lanes[key] = lanes.pop(key)  # used: kept longer (the main lane never goes)
        if step.id is not None:
            where = self._where
            where.pop(step.id, None)
            where[step.id] = key
            if len(where) > MAX_IDS:
                del where[next(iter(where))]
        self._current = key
        return lane

    def _plan(self, tool: str) -> _Plan:
        """Return the tool's plan: its settings and the detectors that can fire for it."""
        plan = self._plans.get(tool)
        if plan is None:
            settings = self.policy.for_tool(tool)
            quiet = settings.mutating or settings.polling or tool.lower() in ACK_TOOLS
            plan = _Plan(settings, quiet)
            if len(self._plans) < 10_000:
                self._plans[tool] = plan
        return plan

    # -- reporting ----------------------------------------------------------------------
    def _totals(self) -> Totals:
        return (self.steps, self._tokens, self._cost, self._time)

    def _waste(self, inc: _Incident) -> Waste:
        """Return what a loop's own steps after its first warn cost, up to its latest one.

        ``_cost_of(((inc.mark, inc.last()),))`` with the same arithmetic, without a sort.
        """
        mark = inc.mark
        if mark is None:
            return Waste()
        tokens, cost, seconds = 0.0, 0.0, 0.0
        tokens += inc.last_tokens - mark[1]
        cost += inc.last_cost - mark[2]
        start, end = mark[3], inc.last_time
        timed = start is not None and end is not None
        if start is not None and end is not None:
            seconds += max(end - start, 0.0)
        return Waste(
            steps=inc.last_steps - mark[0],
            tokens=int(tokens) if self._has_tokens else None,
            cost=round(cost, 6) if self._has_cost else None,
            seconds=round(seconds, 3) if timed else None,
        )

    def _cost_of(self, spans: Iterable[tuple[Totals, Totals]]) -> Waste:
        """Add up spans of the run (mark, last), each step once where spans overlap."""
        steps, tokens, cost, seconds = 0, 0.0, 0.0, 0.0
        timed = False
        end: Totals | None = None  # the end of the merged span so far
        # (by mark: marks at one step are equal, so this is the order of their steps, and
        # a stable sort keeps spans that start together in their order)
        for mark, last in sorted(spans, key=itemgetter(0)):
            if end is not None and mark[0] < end[0]:
                if last[0] <= end[0]:
                    continue  # inside what is counted already
                mark = end  # overlapping: count from where the last one ended
            steps += last[0] - mark[0]
            tokens += last[1] - mark[1]
            cost += last[2] - mark[2]
            if mark[3] is not None and last[3] is not None:
                seconds += max(last[3] - mark[3], 0.0)
                timed = True
            end = last
        return Waste(
            steps=steps,
            tokens=int(tokens) if self._has_tokens else None,
            cost=round(cost, 6) if self._has_cost else None,
            seconds=round(seconds, 3) if timed else None,
        )

    def _finding(self, inc: _Incident) -> Finding:
        return Finding(
            detector=inc.detector,
            severity=inc.severity,
            tool=inc.tool,
            signature=inc.signature,
            seqs=_sorted_seqs(inc.seqs),
            count=inc.count,
            threshold=inc.threshold,
            fired_at=inc.fired_at,
            message=inc.message,
            rule=inc.rule,
            stop_at=inc.stop_at,
            waste=self._waste(inc),
            started_at=inc.started_at,
        )

    def report(
        self,
        key: tuple[Any, ...],
        level: Level,
        count: int,
        tool: str | None,
        signature: str,
        seqs: list[int],
        message: Message,
        args: tuple[Any, ...],
        secondary: bool,
    ) -> None:
        """Record that a detector's count reached ``level``; fire when the severity rises.

        ``key`` names the loop (one incident, one finding): the detector's name first, then
        what identifies the loop for it (a signature and the seq where it began, say).
        ``message(*args)`` is only called when the finding fires or escalates: words cost.
        ``secondary`` detectors stay quiet on a step another finding already explains.
        """
        severity, threshold, rule = level
        inc = self._incidents.get(key)
        if inc is None:
            if secondary and _RANK[severity] <= self._hit:
                return  # (quiet where a finding as severe explains the step)
            start = min(seqs) if seqs else self._last_seq
            inc = _Incident(key[0], start, self._last_seq, tool, signature)
            self._incidents[key] = inc
            rises = True
        else:
            rises = _RANK[severity] > _RANK[inc.severity]
        inc.count = count
        inc.seqs = seqs
        if inc.mark is not None:  # one more iteration of a loop that warned
            inc.last_steps, inc.last_tokens = self.steps, self._tokens
            inc.last_cost, inc.last_time = self._cost, self._time
            self._waste_memo = None
        if severity != "info" and _RANK[severity] > self._hit:
            self._hit = _RANK[severity]
        if not rises:
            return
        inc.severity, inc.threshold, inc.rule = severity, threshold, rule
        inc.message = message(*args)
        if severity == "stop":
            inc.stop_at = self._last_seq
        if severity != "info" and inc.mark is None:
            inc.mark = self._totals()
            inc.last_steps, inc.last_tokens = self.steps, self._tokens
            inc.last_cost, inc.last_time = self._cost, self._time
            self._waste_memo = None
        if self._live:
            self._fired.append(self._finding(inc))

    # -- the loop -----------------------------------------------------------------------
    def observe(self, step: Step) -> list[Finding]:
        """Feed one step (in order); return the findings that fire or escalate on it."""
        if self._live:
            self._fired = []  # a new list each step: the caller may keep the last one
        self._hit = 0
        self.last_repeat = None
        self.steps += 1
        self._last_seq = step.seq
        tokens_in, tokens_out = step.tokens_in, step.tokens_out
        if tokens_in is not None or tokens_out is not None:
            if not self._has_tokens:
                self._has_tokens, self._waste_memo = True, None  # waste counts tokens now
            self._tokens += (tokens_in or 0) + (tokens_out or 0)
        cost = step.cost
        if cost is not None:
            if not self._has_cost:
                self._has_cost, self._waste_memo = True, None
            self._cost += cost
        moment = step.ended_at if step.ended_at is not None else step.started_at
        if moment is not None:
            self._time = float(moment)
        if step.lane is None:
            lane = self._lanes[None]
            self._current = None
        else:
            lane = self._lane_for(step)
        kind = step.kind
        if kind == "tool_call":
            self._tool_call(step, lane)
        elif kind == "user":
            lane.new_turn(self._scope)
        elif kind == "assistant" and self._message_on and step.text:
            self._message_loop.observe(lane.messages, step.seq, step.text, self)
        if self._any_budget:
            self._budgets(step)
        return self._fired

    def _tool_call(self, step: Step, lane: Lane) -> None:
        tool = step.tool or "?"
        plan = self._plans.get(tool)
        if plan is None:
            plan = self._plan(tool)
        # Signatures are computed here, once per call, and shared by every detector.
        args, result = step.args, step.result
        digester = plan.digest
        # Unknown is not equal: a call whose arguments (or result) the trace does not carry
        # gets a signature (or result digest) of its own, so no detector takes two of them
        # for the same call (or the same result). Failure status still counts.
        known_args, known_result = args is not None, result is not None
        if known_args:
            digits = digester.digest(args)
            sig = plan.prefix + digits
        else:
            sig, digits = f"{plan.prefix}?{step.seq}", ""
            self.unknown_args += 1
        canonical = digester.canonical
        if known_result:
            rdig = digester.digest(result)
        else:
            rdig = f"?{step.seq}"
            self.unknown_results += 1
        status = step.status
        # An invalid turn (no valid action) counts as a failed call, and every invalid turn
        # is the same call: a streak of them is one loop, whatever the error text says.
        invalid = status == "invalid"
        error = invalid or status == "error"
        if invalid:
            sig, digits = INVALID_SIG, ""
        # Calls issued together in one assistant message are concurrent, not one after
        # another: the same call twice in one batch saw nothing of the other, so it is no
        # repeat of it (the sequence detectors skip it; a batch issued again is batch_repeat's).
        batch = step.batch_id
        concurrent = False
        if batch is not None:
            if batch != lane.together:
                lane.together, lane.together_sigs = batch, set()
            concurrent = sig in lane.together_sigs
            if not concurrent and len(lane.together_sigs) < MAX_BATCH_SIGS:
                lane.together_sigs.add(sig)
        elif lane.together is not None:
            lane.together, lane.together_sigs = None, set()
        # One Event per monitor, refilled for each call: detectors read it during this call
        # only (none keeps it), so there is no need to allocate one per step.
        ev = self._ev
        ev.seq, ev.tool, ev.sig, ev.rdig = step.seq, tool, sig, rdig
        ev.invalid = invalid
        if error:
            ev.outcome, ev.status = "!error", "error"
            ev.fault = None if invalid else self._fault(sig, rdig, result, args)
        else:
            ev.outcome, ev.status = rdig, "ok"
            ev.fault = None
        if not invalid and lane.blocker.invalid is not None:
            lane.blocker.invalid = None  # a valid action ends a streak of invalid turns
        ev.settings, ev.args, ev.result, ev.batch_id = plan.settings, args, result, step.batch_id
        ev.canonical = canonical
        ev.known_args, ev.known_result = known_args, known_result
        ev.clear_marks()
        ev.quiet = plan.quiet or error
        if plan.mutating and not error and sig not in lane.mutations:
            lane.mutations = make_room(lane.mutations)
            lane.mutations[sig] = None
            lane.epoch += 1  # the world changed: later repeats are re-checks
        ev.epoch = lane.epoch
        # the detectors, in catalogue order: oscillation before repeat (a call inside a
        # cycle is the cycle's); the secondary ones (stall, reads, near) after the others
        sequential = not concurrent
        if plan.osc and sequential:
            self._osc.observe(lane.osc, ev, self)
        # (a success whose result is unknown counts as a new result: skipping it would hide
        # the progress it may stand for, and blanking a result must never make a loop)
        if plan.repeat and not invalid and sequential:
            if known_args:
                self._repeat.observe(lane.repeat, ev, self)
                if ev.cycle_level is not None and ev.cycle_period:
                    self._osc.escalate(lane.osc, ev, ev.cycle_level, self)
            elif error and lane.repeat.fails:
                self._repeat.unknown_failure(lane.repeat, ev)
        if plan.mutfail and not invalid and sequential:  # (an unknown call is another call)
            self._mutfail.observe(lane.mutfail, ev, self)
        if (
            plan.blocker and sequential and (error or lane.blocker.groups)
        ):  # (a success re-arms what fails)
            self._blocker.observe(lane.blocker, ev, self)
        if plan.batch:
            self._batch.observe(lane.batch, ev, self)
        if plan.stall and sequential:  # (an unknown ends a run of the same result)
            self._stall.observe(lane.stall, ev, self)
        if plan.reads and known_args and sequential:
            self._reads.observe(lane.reads, ev, self)
        if plan.near and known_args and known_result and sequential:
            self._near.observe(lane.near, ev, self)
        if plan.streak:
            self._streak.observe(lane.streak, ev, self)
        if lane.messages:
            lane.messages.clear()  # a tool call ends a monologue
        calls = self.tool_calls = self.tool_calls + 1
        if ev.repeat_of is not None:
            self.repeated += 1
            self.last_repeat = (ev.repeat_of, ev.group_count)
        if self._keep_ledger:  # (the plan's tool name: one string for all calls of a tool)
            failed = "invalid" if invalid else "error" if error else "ok"
            self._ledger.add(
                ev.seq,
                plan.settings.tool,
                failed,
                sig,
                digits,
                rdig,
                ev.repeat_of,
                ev.group_count,
            )
        if calls % self._stride == 0:
            self._series.append((ev.seq, round(self.repeated / calls, 4)))
            if len(self._series) >= SERIES_POINTS:
                self._series = self._series[1::2]
                self._stride *= 2
        if plan.quota is not None:
            self._quota_call(tool, ev.seq, plan.quota, plan.settings.rule)

    def _fault(self, sig: str, rdig: str, result: Any, args: Any) -> Fault:
        """Return a failure's fingerprint (a loop's failures are remembered: they repeat)."""
        key = sig + rdig
        fault = self._faults.get(key)
        if fault is None:
            if len(self._faults) >= MAX_FAULTS:
                self._faults.clear()
            fault = self._faults[key] = error_fault(result, args)
        return fault

    def _quota_call(self, tool: str, seq: int, quota: int, rule: str) -> None:
        seqs = self._quota.get(tool)
        if seqs is None:
            seqs = self._quota[tool] = []
        add_seq(seqs, seq)
        calls = self._quota_n[tool] = self._quota_n.get(tool, 0) + 1
        if calls > quota:
            level: Level = ("stop", quota, rule)
            self.report(
                ("budget", "quota", tool), level, calls, tool, f"quota:{tool}", seqs,
                _quota_message, (tool, calls, quota), False,
            )  # fmt: skip

    def _budgets(self, step: Step) -> None:
        policy = self.policy
        checks: tuple[tuple[str, float, float, str], ...] = (
            ("steps", policy.max_steps, self.steps, "steps"),
            ("tokens", policy.max_tokens, self._tokens, "tokens"),
            ("cost", policy.max_cost, self._cost, "cost"),
        )
        for name, limit, used, unit in checks:
            if limit and used > limit:
                shown = f"{used:.4g}" if name == "cost" else f"{int(used)}"
                level: Level = ("stop", int(limit) if name != "cost" else 0, "defaults")
                self.report(
                    ("budget", name), level, int(used), None, f"budget:{name}", [step.seq],
                    _budget_message, (shown, unit, limit), False,
                )  # fmt: skip

    # -- live check ---------------------------------------------------------------------
    def check(self, tool: str, args: Any = None) -> Check:
        """Return whether making this call next would be a loop, without recording it."""
        settings = self._plan(tool).settings
        lane = self._lanes.get(self._current) or self._lanes.get(None) or Lane()
        sig = f"{tool}:{value_digest(args, settings.volatile)}"
        ev = Event(settings)
        ev.seq, ev.tool, ev.sig, ev.args, ev.epoch = self._last_seq + 1, tool, sig, args, lane.epoch
        found: list[Finding] = []
        predictions: list[tuple[str, list[tuple[Any, ...]]]] = []
        thresholds = settings.thresholds
        if thresholds["repeat"].enabled:
            predictions.append(("repeat", self._repeat.predict(lane.repeat, ev)))
        if thresholds["mutating_failure"].enabled:
            predictions.append(("mutating_failure", self._mutfail.predict(lane.mutfail, ev)))
        if thresholds["oscillation"].enabled:
            predictions.append(("oscillation", self._osc.predict(lane.osc, ev)))
        if thresholds["blocker"].enabled:
            predictions.append(("blocker", self._blocker.predict(lane.blocker, ev)))
        for name, predicted in predictions:
            for level, count, seqs, message in predicted:
                severity, threshold, rule = level
                involved = tuple(sorted(set(seqs)))
                found.append(
                    Finding(
                        name,
                        severity,
                        tool,
                        sig,
                        involved,
                        count,
                        threshold,
                        ev.seq,
                        message,
                        rule,
                        started_at=involved[0] if involved else ev.seq,
                    )  # fmt: skip
                )
        policy = self.policy
        if policy.max_steps and self.steps + 1 > policy.max_steps:
            message = f"The run is at its step budget of {policy.max_steps}: finish now."
            found.append(
                Finding(
                    "budget",
                    "stop",
                    None,
                    "budget:steps",
                    (),
                    self.steps + 1,
                    policy.max_steps,
                    ev.seq,
                    message,
                    "defaults",
                )  # fmt: skip
            )
        if settings.quota is not None:
            calls = self._quota_n.get(tool, 0) + 1
            if calls > settings.quota:
                message = f"{tool} is at its quota of {settings.quota} calls: do not call it."
                found.append(
                    Finding(
                        "budget",
                        "stop",
                        tool,
                        f"quota:{tool}",
                        (),
                        calls,
                        settings.quota,
                        ev.seq,
                        message,
                        settings.rule,
                    )  # fmt: skip
                )
        found.sort(key=lambda finding: -_RANK[finding.severity])
        verdict = worst(finding.severity for finding in found)
        message = found[0].message if verdict != "ok" else ""
        return Check(verdict, tuple(found), message)

    # -- results ------------------------------------------------------------------------
    @property
    def findings(self) -> list[Finding]:
        """Return every finding so far, ordered by the step where it fired, each marked with
        its loop (``Finding.loop``: findings over the same calls are one loop); a loop's lead
        carries the loop's waste, each step once."""
        pairs = [(self._finding(inc), inc) for inc in self._incidents.values()]
        pairs.sort(key=_fired_at)
        out = [finding for finding, _ in pairs]
        leads = group_loops(out)
        # a loop of one finding keeps its own waste: only shared leads are added up again
        shared: set[int] = set()
        for index, lead in enumerate(leads):
            out[index].loop = lead
            if lead != index:
                shared.add(lead)
        if shared:
            spans: dict[int, list[tuple[Totals, Totals]]] = {}
            for index, lead in enumerate(leads):
                if lead not in shared:
                    continue
                inc = pairs[index][1]
                if inc.mark is not None:
                    spans.setdefault(lead, []).append((inc.mark, inc.last()))
            for lead, parts in spans.items():
                if len(parts) > 1:
                    out[lead].waste = self._cost_of(parts)
        return out

    @property
    def stall_score(self) -> float:
        """Repeated (no-progress) tool calls / tool calls so far."""
        return round(self.repeated / self.tool_calls, 4) if self.tool_calls else 0.0

    def waste(self) -> Waste:
        """Return what the loops so far cost, each step once where loops overlap (added up
        again only after a loop moved: a live run asks after every append)."""
        memo = self._waste_memo
        if memo is None:
            memo = self._waste_memo = self._cost_of(
                (inc.mark, inc.last()) for inc in self._incidents.values() if inc.mark is not None
            )
        return memo

    def analysis(self) -> Analysis:
        """Return the verdict, stall score, findings and ledger of what was observed.

        A live monitor goes on after this, so the ledger is a copy; ``analyze()`` hands its
        monitor's own ledger over (the monitor ends there).
        """
        findings = self.findings
        score = self.stall_score
        series = list(self._series)
        if self.tool_calls and (not series or series[-1][0] != self._last_seq):
            series.append((self._last_seq, score))
        return Analysis(
            verdict=worst(finding.severity for finding in findings),
            stall_score=score,
            findings=tuple(findings),
            ledger=self._ledger if not self._live else self._ledger.copy(),
            stall_series=tuple(series),
            steps=self.steps,
            tool_calls=self.tool_calls,
            waste=self.waste(),
            unknown_args=self.unknown_args,
            unknown_results=self.unknown_results,
        )


def _fired_at(pair: tuple[Finding, _Incident]) -> int:
    return pair[0].fired_at


def _least_used(lanes: dict[Any, Any], key: Any) -> Any:
    """Return the key of the least recently used lane, not the root's nor ``key``'s."""
    for other in lanes:
        if other is not None and other != key:
            return other
    raise AssertionError("a lane to drop")


def analyze(
    steps_or_run: Run | Iterable[Step], policy: Policy | None = None, *, ledger: bool = True
) -> Analysis:
    """Return the analysis of a whole run (its steps fed through a Monitor, in order).

    ledger=False leaves the progress ledger (one entry per tool call) empty: what only needs
    the verdict and the findings (``loopboard scan``) analyzes a run of any length in the
    memory of its distinct calls."""
    # Read through Any: compiled, `Run.steps` would be checked to be a list, and a long run's
    # steps may be a spool (runs/importers/kit/spool.py) that is only iterable.
    steps = cast(Any, steps_or_run).steps if isinstance(steps_or_run, Run) else steps_or_run
    monitor = Monitor(policy, keep_ledger=ledger)
    monitor._live = False
    observe = monitor.observe
    for step in steps:
        observe(step)
    return monitor.analysis()
