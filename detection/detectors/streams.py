"""Same-tool streak (info) and message loop (the agent talking to itself)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ..keys import digest
from .base import Event, Level, Tally, jaccard, short, words

if TYPE_CHECKING:
    from ..engine import Monitor
    from ..policy import Threshold

TEXT_SIMILAR: Final = 0.85
MAX_TEXTS: Final = 8
MAX_STREAK_SIGS: Final = 64


class StreakState:
    __slots__ = ("calls", "first_seq", "sigs", "tool")

    def __init__(self) -> None:
        self.tool: str | None = None
        self.calls = 0
        self.sigs: set[str] = set()  # distinct calls in the streak (capped)
        self.first_seq = 0

    def copy(self) -> StreakState:
        twin = StreakState()
        twin.tool, twin.calls, twin.first_seq = self.tool, self.calls, self.first_seq
        twin.sigs = set(self.sigs)
        return twin


def _streak_message(tool: str, calls: int, first: int) -> str:
    return (
        f"{tool} has been called {calls} times in a row since step {first} with varying or "
        "unrecorded arguments. Fine for paging or batch edits; if you are searching harder for something "
        "that is not there, step back and try another approach."
    )


class Streak:
    """Many calls in a row to one tool with varying arguments: shown, never a verdict."""

    name = "streak"

    def observe(self, state: StreakState, ev: Event, out: Monitor) -> None:
        if state.tool != ev.tool:
            state.tool, state.calls, state.first_seq = ev.tool, 1, ev.seq
            state.sigs.clear()
            state.sigs.add(ev.sig)
            return
        state.calls += 1
        if len(state.sigs) < MAX_STREAK_SIGS:
            state.sigs.add(ev.sig)
        threshold = ev.settings.thresholds["streak"]
        if threshold.info is None or state.calls != threshold.info or len(state.sigs) < 2:
            return
        info: Level = ("info", threshold.info, threshold.warn_rule)
        out.report(
            ("streak", ev.tool, state.first_seq), info, state.calls, ev.tool,
            f"{ev.tool}:streak", [state.first_seq, ev.seq], _streak_message,
            (ev.tool, state.calls, state.first_seq), False,
        )  # fmt: skip


class Text(Tally):
    """One assistant message of the current monologue and the times it was said."""

    __slots__ = ("_tokens", "text")

    def __init__(self, text: str, seq: int) -> None:
        super().__init__(seq)
        self.text = text  # normalised: lower case, one space between words
        self._tokens: set[str] | None = None  # its words, once compared with another

    def tokens(self) -> set[str]:
        found = self._tokens
        if found is None:
            found = self._tokens = words(self.text)
        return found

    def copy(self) -> Text:
        twin = Text(self.text, self.first_seq)
        twin._tokens = self._tokens
        self.copy_tally(twin)
        return twin


_WS: Final = re.compile(r"\s+")


def _message_message(count: int, first: int, text: str) -> str:
    return (
        f"You have written the same message {count} times since step {first} without doing "
        f"anything in between (\u201c{short(text, 60)}\u201d). Saying it again will not move "
        "the task on: call a tool to make progress, ask the user a question, or finish."
    )


class MessageLoop:
    """The same (or nearly the same) assistant text again with no tool call in between.

    Its state is the lane's list of the monologue's texts; a tool call clears it (the engine
    does that, it is no detector call).
    """

    name = "message_loop"

    def __init__(self, threshold: Threshold) -> None:
        self.threshold = threshold

    def observe(self, state: list[Text], seq: int, raw: str, out: Monitor) -> None:
        text = _WS.sub(" ", raw.strip().lower())
        if not text:
            return
        said = Text(text, seq)
        for entry in state:
            if entry.text == text or (
                abs(len(entry.text) - len(text)) < 0.3 * max(len(text), 1)
                and jaccard(entry.tokens(), said.tokens()) >= TEXT_SIMILAR
            ):
                seqs = entry.again(seq)
                level = self.threshold.level(entry.count)
                if level is not None:
                    signature = "text:" + digest(entry.text)
                    out.report(
                        ("message_loop", signature, entry.first_seq), level, entry.count, None,
                        signature, seqs, _message_message,
                        (entry.count, entry.first_seq, raw), False,
                    )  # fmt: skip
                return
        state.append(said)
        if len(state) > MAX_TEXTS:
            del state[0]
