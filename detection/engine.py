"""The core: one streaming engine behind both ``Monitor`` (live) and ``analyze`` (postmortem).

Each step goes through ``Monitor.observe``: its signatures are computed once, it is placed on
its path (lane) of the run tree, every enabled detector reads it with that lane's state, and
the budgets, ledger and stall score are updated. ``analyze`` is the same loop over a whole
run, so a live agent and the dashboard always agree.

Paths: when steps carry ``parent_id``, a step sees the earlier steps whose parent is one of its
ancestors (see detection/model.py). Each bucket of siblings gets a lane; a new bucket starts as
a copy of the lane its parent lives in, so sibling sub-trees never see each other's calls. When
a lane will never be used again (known in ``analyze``, which sees the whole run), the copy is
a move instead.

Memory: detector state is bounded by the number of distinct signatures; the number of lanes
and remembered step ids are capped; the ledger is kept only when asked (``analyze``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .detectors import DETECTORS
from .detectors.base import Event, Lane, add_seq
from .detectors.similarity import ACK_TOOLS
from .findings import _RANK, Analysis, Check, Finding, LedgerEntry, Waste, worst
from .keys import digester, value_digest
from .model import Run, Step
from .policy import Policy, ToolSettings

__all__ = ["Monitor", "analyze"]

MAX_LANES = 4096
MAX_IDS = 200_000
SERIES_POINTS = 200


class _Plan:
    """What the core loop needs about one tool, resolved once (see ``Monitor._plan``)."""

    __slots__ = ("digest", "mutating", "observers", "prefix", "quiet", "quota", "settings")

    def __init__(
        self, settings: ToolSettings, quiet: bool, observers: tuple[tuple[str, Any], ...]
    ) -> None:
        self.settings = settings
        self.quiet = quiet  # mutating, polling or an acknowledgement: no similarity checks
        self.prefix = settings.tool + ":"
        self.digest = digester(settings.volatile)  # value_digest for this tool's volatile keys
        self.mutating = settings.mutating
        self.quota = settings.quota
        self.observers = observers  # (state name, bound observe), in catalogue order


class _Incident:
    """A finding while it is still growing: one loop, escalating from warn to stop."""

    __slots__ = (
        "count", "detector", "fired_at", "mark", "message", "rule", "seqs", "severity",
        "signature", "stop_at", "threshold", "tool",
    )  # fmt: skip

    def __init__(self, detector: str, fired_at: int) -> None:
        self.detector = detector
        self.fired_at = fired_at
        self.mark: tuple[int, float, float, float | None] | None = None  # totals at first warn
        self.severity = "info"
        self.tool: str | None = None
        self.signature = ""
        self.seqs: list[int] = []
        self.count = 0
        self.threshold = 0
        self.message = ""
        self.rule = ""
        self.stop_at: int | None = None  # seq where it crossed the stop threshold


class Monitor:
    """Watch an agent's steps one at a time and say when it stops making progress.

    ``observe(step)`` returns the findings that fire on that step; ``check(tool, args)`` answers
    before a call whether making it would be a loop; ``analysis()`` summarises so far.
    """

    def __init__(self, policy: Policy | None = None, *, keep_ledger: bool = False) -> None:
        self.policy = policy or Policy()
        self._detectors = {name: cls() for name, cls in DETECTORS.items()}
        self._message_loop = self._detectors["message_loop"]
        self._message_loop.threshold = self.policy.threshold("message_loop")
        self._message_on = self._message_loop.threshold.enabled
        self._plans: dict[str, _Plan] = {}
        self._ev = Event(0, "tool_call")  # reused for every tool call (see _tool_call)
        self._lanes: dict[str | None, Lane] = {None: self._new_lane()}
        self._where: dict[str, str | None] = {}  # step id -> key of the lane it lives in
        self._current: str | None = None
        self._incidents: dict[tuple[str, Any], _Incident] = {}
        self._fired: list[Finding] = []
        self._hit = False  # a warn/stop was reported on the current step
        self._quota: dict[str, list[int]] = {}  # tool -> first seqs
        self._quota_n: dict[str, int] = {}  # tool -> calls
        self._keep_ledger = keep_ledger
        self._ledger: list[LedgerEntry] = []
        self._series: list[tuple[int, float]] = []
        self._stride = 1
        self._run_mark: tuple[int, float, float, float | None] | None = None
        self.steps = 0
        self.tool_calls = 0
        self.repeated = 0
        self._tokens = 0.0
        self._cost = 0.0
        self._has_tokens = self._has_cost = False
        self._time: float | None = None
        self._last_seq = -1
        policy = self.policy
        self._any_budget = bool(policy.max_steps or policy.max_tokens or policy.max_cost)

    # -- lanes ------------------------------------------------------------------------
    def _new_lane(self) -> Lane:
        return Lane({name: det.new_state() for name, det in self._detectors.items()})

    def _lane_for(self, step: Step, move: bool) -> Lane:
        parent = step.parent_id
        key: str | None = None
        if parent is not None and parent in self._where:
            key = parent
        lane = self._lanes.get(key)
        if lane is None:
            source_key = self._where.get(parent) if parent is not None else None
            source = self._lanes.get(source_key)
            if source is None:
                lane = self._new_lane()
            elif move:
                lane = self._lanes.pop(source_key)
            else:
                lane = source.copy()
            self._lanes[key] = lane
            if len(self._lanes) > MAX_LANES:
                oldest = next(k for k in self._lanes if k is not None and k != key)
                del self._lanes[oldest]
        if step.id is not None:
            self._where[step.id] = key
            if len(self._where) > MAX_IDS:
                del self._where[next(iter(self._where))]
        self._current = key
        return lane

    def _plan(self, tool: str) -> _Plan:
        """Return the tool's plan: its settings and the detectors that can fire for it.

        A detector left out here would return at once for every call to this tool (it is
        disabled for the tool, or the tool is mutating, polling or an acknowledgement that
        the similarity detectors never look at), so the core loop does not call it at all.
        """
        plan = self._plans.get(tool)
        if plan is None:
            settings = self.policy.for_tool(tool)
            quiet = settings.mutating or settings.polling or tool.lower() in ACK_TOOLS
            skip = set()
            if settings.polling and settings.max_repeats is None:
                skip.add("repeat")
            if not settings.mutating or settings.polling:
                skip.add("mutating_failure")
            if quiet:
                skip.update(("near_repeat", "read_range"))
            observers = tuple(
                (name, det.observe)
                for name, det in self._detectors.items()
                if name not in skip
                and (settings.thresholds[name].enabled or name == "message_loop")
            )
            plan = _Plan(settings, quiet, observers)
            if len(self._plans) < 10_000:
                self._plans[tool] = plan
        return plan

    # -- reporting ----------------------------------------------------------------------
    def _totals(self) -> tuple[int, float, float, float | None]:
        return (self.steps, self._tokens, self._cost, self._time)

    def _waste(self, mark: tuple[int, float, float, float | None] | None) -> Waste:
        if mark is None:
            return Waste()
        steps, tokens, cost, time = mark
        seconds = None
        if time is not None and self._time is not None:
            seconds = round(max(self._time - time, 0.0), 3)
        return Waste(
            steps=self.steps - steps,
            tokens=int(self._tokens - tokens) if self._has_tokens else None,
            cost=round(self._cost - cost, 6) if self._has_cost else None,
            seconds=seconds,
        )

    def _finding(self, inc: _Incident) -> Finding:
        return Finding(
            detector=inc.detector,
            severity=inc.severity,
            tool=inc.tool,
            signature=inc.signature,
            seqs=tuple(sorted(set(inc.seqs))),
            count=inc.count,
            threshold=inc.threshold,
            fired_at=inc.fired_at,
            message=inc.message,
            rule=inc.rule,
            stop_at=inc.stop_at,
            waste=self._waste(inc.mark),
        )

    def report(
        self,
        detector: str,
        key: Any,
        level: tuple[str, int, str],
        count: int,
        tool: str | None,
        signature: str,
        seqs: list[int],
        message: Any,
        *,
        secondary: bool = False,
    ) -> None:
        """Record that a detector's count reached ``level``; fire when the severity rises."""
        severity, threshold, rule = level
        inc = self._incidents.get((detector, key))
        if inc is None:
            if secondary and self._hit:
                return  # this step is already explained by another finding
            inc = self._incidents[(detector, key)] = _Incident(detector, self._last_seq)
            inc.tool, inc.signature = tool, signature
            rises = True
        else:
            rises = _RANK[severity] > _RANK[inc.severity]
        inc.count, inc.seqs = count, seqs
        if severity != "info":
            self._hit = True
        if not rises:
            return
        if callable(message):  # detectors may pass a function: words cost, build them once
            message = message()
        inc.severity, inc.threshold, inc.rule, inc.message = severity, threshold, rule, message
        if severity == "stop":
            inc.stop_at = self._last_seq
        if severity != "info" and inc.mark is None:
            inc.mark = self._totals()
            if self._run_mark is None:
                self._run_mark = inc.mark
        self._fired.append(self._finding(inc))

    # -- the loop -----------------------------------------------------------------------
    def observe(self, step: Step) -> list[Finding]:
        """Feed one step (in order); return the findings that fire or escalate on it."""
        return self._observe(step, False)

    def _observe(self, step: Step, move: bool) -> list[Finding]:
        self._fired = []
        self._hit = False
        self.steps += 1
        self._last_seq = step.seq
        if step.tokens_in is not None or step.tokens_out is not None:
            self._has_tokens = True
            self._tokens += (step.tokens_in or 0) + (step.tokens_out or 0)
        if step.cost is not None:
            self._has_cost = True
            self._cost += step.cost
        moment = step.ended_at if step.ended_at is not None else step.started_at
        if moment is not None:
            self._time = moment
        if step.parent_id is None and step.id is None and None in self._lanes:
            lane = self._lanes[None]  # a linear run: one path, nothing to record
            self._current = None
        else:
            lane = self._lane_for(step, move)
        kind = step.kind
        if kind == "tool_call":
            self._tool_call(step, lane)
        elif kind == "user":
            scope = self.policy.scope
            for name, det in self._detectors.items():
                lane.states[name] = det.new_turn(lane.states[name], scope)
            if scope == "turn":
                lane.mutations.clear()
        elif kind == "assistant" and self._message_on:
            ev = Event(step.seq, kind, text=step.text)
            self._message_loop.observe(lane.states["message_loop"], ev, lane, self)
        if self._any_budget:
            self._budgets(step)
        return self._fired

    def _tool_call(self, step: Step, lane: Lane) -> None:
        tool = step.tool or "?"
        plan = self._plans.get(tool) or self._plan(tool)
        settings = plan.settings
        # Signatures are computed here, once per call, and shared by every detector.
        digest = plan.digest
        sig = plan.prefix + digest(step.args)
        rdig = digest(step.result)
        error = step.status == "error"
        # One Event per monitor, refilled for each call: detectors read it during this call
        # only (none keeps it), so there is no need to allocate one per step.
        ev = self._ev
        ev.seq, ev.tool, ev.sig, ev.rdig = step.seq, tool, sig, rdig
        ev.outcome, ev.status = ("!error", "error") if error else (rdig, "ok")
        ev.settings, ev.args, ev.result, ev.batch_id = (
            settings,
            step.args,
            step.result,
            step.batch_id,
        )
        ev.repeat_of, ev.group_count, ev.in_cycle = None, 1, False
        ev.quiet = plan.quiet or error
        if plan.mutating and not error and sig not in lane.mutations:
            lane.mutations.add(sig)
            lane.epoch += 1  # the world changed: later repeats are re-checks
        states = lane.states
        for name, observe in plan.observers:
            observe(states[name], ev, lane, self)
        self.tool_calls += 1
        if ev.repeat_of is not None:
            self.repeated += 1
        if self._keep_ledger:
            progress = f"{sig}:{rdig}:{ev.status}"
            self._ledger.append(
                LedgerEntry(ev.seq, tool, sig, progress, ev.repeat_of, ev.group_count)
            )
        if self.tool_calls % self._stride == 0:
            self._series.append((ev.seq, round(self.repeated / self.tool_calls, 4)))
            if len(self._series) >= SERIES_POINTS:
                self._series = self._series[1::2]
                self._stride *= 2
        if plan.quota is not None:
            self._quota_call(ev, settings)

    def _quota_call(self, ev: Event, settings: ToolSettings) -> None:
        name = ev.tool or "?"
        seqs = self._quota.setdefault(name, [])
        add_seq(seqs, ev.seq)
        calls = self._quota_n[name] = self._quota_n.get(name, 0) + 1
        if settings.quota is not None and calls > settings.quota:

            def message() -> str:
                return (
                    f"{ev.tool} has been called {calls} times in this run, over its quota of "
                    f"{settings.quota}. Stop calling it: work with what you have, or report "
                    "the blocker."
                )

            level = ("stop", settings.quota, settings.rule)
            self.report(
                "budget", ("quota", ev.tool), level, calls, ev.tool, f"quota:{ev.tool}",
                seqs, message,
            )  # fmt: skip

    def _budgets(self, step: Step) -> None:
        policy = self.policy
        checks = (
            ("steps", policy.max_steps, self.steps, "steps"),
            ("tokens", policy.max_tokens, self._tokens, "tokens"),
            ("cost", policy.max_cost, self._cost, "cost"),
        )
        for name, limit, used, unit in checks:
            if limit and used > limit:
                shown = f"{used:.4g}" if name == "cost" else f"{int(used)}"
                message = (
                    f"This run has used {shown} {unit}, over its budget of {limit:g}. Finish "
                    "now with what you have, or report what is blocking you."
                )
                self.report(
                    "budget", name, ("stop", int(limit) if name != "cost" else 0, "defaults"),
                    int(used), None, f"budget:{name}", [step.seq], message,
                )  # fmt: skip

    # -- live check ---------------------------------------------------------------------
    def check(self, tool: str, args: Any = None) -> Check:
        """Return whether making this call next would be a loop, without recording it."""
        settings = self._plan(tool).settings
        lane = self._lanes.get(self._current) or self._lanes.get(None) or self._new_lane()
        sig = f"{tool}:{value_digest(args, settings.volatile)}"
        ev = Event(self._last_seq + 1, "tool_call", tool, sig, settings=settings, args=args)
        found: list[Finding] = []
        for name in ("repeat", "mutating_failure", "oscillation"):
            if not settings.thresholds[name].enabled:
                continue
            det = self._detectors[name]
            for level, count, seqs, message in det.predict(lane.states[name], ev, lane):
                severity, threshold, rule = level
                found.append(
                    Finding(
                        name,
                        severity,
                        tool,
                        sig,
                        tuple(sorted(set(seqs))),
                        count,
                        threshold,
                        ev.seq,
                        message,
                        rule,
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
        """Return every finding so far, ordered by the step where it fired."""
        out = [self._finding(inc) for inc in self._incidents.values()]
        out.sort(key=lambda finding: finding.fired_at)
        return out

    def analysis(self) -> Analysis:
        """Return the verdict, stall score, findings and ledger of what was observed."""
        findings = self.findings
        score = round(self.repeated / self.tool_calls, 4) if self.tool_calls else 0.0
        series = list(self._series)
        if self.tool_calls and (not series or series[-1][0] != self._last_seq):
            series.append((self._last_seq, score))
        return Analysis(
            verdict=worst(finding.severity for finding in findings),
            stall_score=score,
            findings=tuple(findings),
            ledger=tuple(self._ledger),
            stall_series=tuple(series),
            steps=self.steps,
            tool_calls=self.tool_calls,
            waste=self._waste(self._run_mark),
        )


def _moves(steps: list[Step]) -> set[int]:
    """Return the indexes of steps whose new lane may take over its source lane.

    Replays the lane bookkeeping of ``Monitor._lane_for`` without state: a fork is a move
    when its source lane is never used again (a chain of parent links, as in Claude Code).
    """
    where: dict[str, str | None] = {}
    exists: set[str | None] = {None}
    last_use: dict[str | None, int] = {}
    forks: list[tuple[int, str | None]] = []
    for index, step in enumerate(steps):
        parent = step.parent_id
        key = parent if parent is not None and parent in where else None
        if key not in exists:
            exists.add(key)
            source = where[key]  # type: ignore[index]
            forks.append((index, source))
            last_use[source] = index
        last_use[key] = index
        if step.id is not None:
            where[step.id] = key
    return {index for index, source in forks if last_use[source] == index}


def analyze(steps_or_run: Run | Iterable[Step], policy: Policy | None = None) -> Analysis:
    """Return the analysis of a whole run (its steps fed through a Monitor, in order)."""
    steps = steps_or_run.steps if isinstance(steps_or_run, Run) else list(steps_or_run)
    moves = _moves(steps) if any(step.parent_id is not None for step in steps) else set()
    monitor = Monitor(policy, keep_ledger=True)
    observe = monitor._observe
    for index, step in enumerate(steps):
        observe(step, index in moves)
    return monitor.analysis()
