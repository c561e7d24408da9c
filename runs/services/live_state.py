"""Each web process's Monitors of live runs: a bounded LRU cache in front of the stored steps.

The durable state of a live run is its row (`Run.next_seq`, `Run.version`) and its stored
steps; a `Watch` is only what this process has already read of them. Before it answers, a
watch catches up by reading the steps it has not seen (seq >= `seen`), so each step is
observed once per process: O(1) amortized per step, O(n) once after a restart or an eviction.
Any process can answer for any run, and a lost or stale watch costs time, never correctness.

The projects' engine policies are cached here too, by the policy version (the id of the
project's latest PolicyChange: every save through `policy.save_policy`, from the Tuning page,
the API or the admin, makes one), so an append does not read and validate the policy again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from django.conf import settings

import detection
from detection.findings import worst

from ..models import Project, Step
from . import policy, storage

_cache: OrderedDict[int, Watch] = OrderedDict()
_guard = threading.Lock()  # guards the dict; each watch has its own lock for its monitor
_policies: dict[int, tuple[int, detection.Policy]] = {}  # project id -> (version, policy)


@dataclass(eq=False)
class Watch:
    """One live run's Monitor in this process and how far it has read the run."""

    policy: detection.Policy
    monitor: detection.Monitor
    seen: int = 0  # the next seq to observe: every step before it was observed
    verdict: str = "ok"  # the worst severity fired so far (info counts as ok)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, step: detection.Step) -> list[detection.Finding]:
        """Observe one step (the next seq) and return what fires on it."""
        fired = self.monitor.observe(step)
        self.seen = step.seq + 1
        for finding in fired:
            self.verdict = worst((self.verdict, finding.severity))
        return fired

    def catch_up(self, run_id: int, next_seq: int) -> None:
        """Observe the stored steps of the run this watch has not seen yet, in order, given
        the run's `next_seq` as read (no query when the watch is up to date; a `next_seq`
        read before another request of this process appended is behind it: nothing to do)."""
        if self.seen >= next_seq:
            return
        rows = (
            Step.objects.filter(run_id=run_id, seq__gte=self.seen)
            .order_by("seq")
            .values_list(*storage.STEP_FIELDS)
            .iterator(chunk_size=5000)
        )
        for row in rows:
            self.observe(storage.engine_step(*row))

    def reset(self) -> None:
        """Forget what was observed: the next catch-up reads the run from the start."""
        self.monitor, self.seen, self.verdict = detection.Monitor(self.policy), 0, "ok"


def engine_policy(project: Project, version: int) -> detection.Policy:
    """Return the project's engine policy at this version (`policy.current_version`), read
    from the database only when this process has not read that version yet.

    Only the latest version read is kept per project, so a version that goes back (its
    PolicyChange deleted) is read again too. Raises policy.PolicyInvalid as
    `policy.engine_policy` does (an invalid policy is never cached).
    """
    found = _policies.get(project.pk)
    if found is not None and found[0] == version:
        return found[1]
    loaded = policy.engine_policy(project)
    with _guard:
        _policies[project.pk] = (version, loaded)
        if len(_policies) > max(settings.LOOPBOARD_LIVE_CACHE_RUNS, 1):
            _policies.pop(next(iter(_policies)))
    return loaded


def watch(run_id: int, engine_policy: detection.Policy) -> Watch:
    """Return this process's watch of a live run, a new one if it has none or if the
    project's policy changed since (the new one reads the run again)."""
    with _guard:
        found = _cache.get(run_id)
        if found is not None and (found.policy is engine_policy or found.policy == engine_policy):
            _cache.move_to_end(run_id)
            return found
        found = Watch(engine_policy, detection.Monitor(engine_policy))
        _cache[run_id] = found
        while len(_cache) > max(settings.LOOPBOARD_LIVE_CACHE_RUNS, 1):
            _cache.popitem(last=False)
        return found


def forget(run_id: int, stale: Watch) -> None:
    """Drop a watch that may have seen steps that were then rolled back; whoever still holds
    it reads the run again from the start (call it with the watch's lock held)."""
    stale.reset()
    with _guard:
        if _cache.get(run_id) is stale:
            del _cache[run_id]


def clear() -> None:
    """Drop every watch (as a restart does)."""
    with _guard:
        _cache.clear()
        _policies.clear()
