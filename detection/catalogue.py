"""The detector catalogue: the one ordered list of detectors, with their defaults and titles.

The engine runs the detectors in this order on each call (``engine.Monitor``); the policy's
built-in thresholds, the registry of detector classes, the UI titles and the runs list's
filter all derive from this list.
"""

from __future__ import annotations

from typing import Final


class Entry:
    """One detector: its name, built-in (warn, stop) thresholds, info level and title."""

    __slots__ = ("info", "name", "stop", "title", "warn")

    def __init__(
        self, name: str, warn: int | None, stop: int | None, title: str, info: int | None = None
    ) -> None:
        self.name = name
        self.warn = warn  # None: this severity is never reached by default
        self.stop = stop
        self.title = title  # what it means, in the words a person reads in the findings panel
        self.info = info  # an info-level threshold (shown, but no verdict)


CATALOGUE: Final[tuple[Entry, ...]] = (
    Entry("oscillation", 3, 5, "Going back and forth"),  # before repeat: a cycle's call is its
    Entry("repeat", 3, 5, "Same call, nothing new"),
    Entry("mutating_failure", 2, 4, "Failing change retried"),
    Entry("blocker", 3, 5, "Same error, different tries"),  # after the exact rules above
    Entry("batch_repeat", 3, 5, "Same batch of calls again"),
    Entry("result_stall", 3, 6, "Different calls, same result"),
    Entry("read_range", 3, 6, "Same file range read again"),
    Entry("near_repeat", 3, 6, "Nearly the same call"),
    Entry("streak", None, None, "Long streak of one tool", info=8),
    Entry("message_loop", 3, 5, "Repeating itself"),
    # Budgets (step limit, tool quota, tokens, cost) are kept by the engine itself: they are
    # per run, not per path; max_steps, max_tokens, max_cost and quota set them.
    Entry("budget", None, None, "Over budget"),
)

NAMES: Final[tuple[str, ...]] = tuple(entry.name for entry in CATALOGUE)
DEFAULTS: Final[dict[str, tuple[int | None, int | None]]] = {
    entry.name: (entry.warn, entry.stop) for entry in CATALOGUE
}
INFO_DEFAULTS: Final[dict[str, int]] = {
    entry.name: entry.info for entry in CATALOGUE if entry.info is not None
}
TITLES: Final[dict[str, str]] = {entry.name: entry.title for entry in CATALOGUE}


def title(name: str) -> str:
    """Return the plain-words title of a detector (a readable fallback for unknown names)."""
    return TITLES.get(name, name.replace("_", " ").capitalize())
