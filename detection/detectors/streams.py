"""Same-tool streak (info) and message loop (the agent talking to itself)."""

from __future__ import annotations

import re
from typing import Any

from ..keys import digest
from .base import Event, Lane, Reporter, add_seq, jaccard, short, words

TEXT_SIMILAR = 0.85
MAX_TEXTS = 8


class Streak:
    """Many calls in a row to one tool with varying arguments: shown, never a verdict."""

    name = "streak"

    def new_state(self) -> list[Any]:
        return [None, 0, set(), 0]  # tool, calls, distinct sigs (capped), first seq

    def new_turn(self, state: list[Any], scope: str) -> list[Any]:
        return self.new_state()

    def observe(self, state: list[Any], ev: Event, lane: Lane, out: Reporter) -> None:
        if state[0] != ev.tool:
            state[:] = [ev.tool, 1, {ev.sig}, ev.seq]
            return
        state[1] += 1
        if len(state[2]) < 64:
            state[2].add(ev.sig)
        settings = ev.settings
        assert settings is not None
        threshold = settings.thresholds["streak"]
        if threshold.info is None or state[1] != threshold.info or len(state[2]) < 2:
            return

        def message() -> str:
            return (
                f"{ev.tool} has been called {state[1]} times in a row since step {state[3]} with "
                "varying arguments. Fine for paging or batch edits; if you are searching harder "
                "for something that is not there, step back and try another approach."
            )

        out.report(
            "streak", (ev.tool, state[3]), ("info", threshold.info, threshold.warn_rule),
            state[1], ev.tool, f"{ev.tool}:streak", [state[3], ev.seq], message,
        )  # fmt: skip


_WS = re.compile(r"\s+")


class MessageLoop:
    """The same (or nearly the same) assistant text again with no tool call in between."""

    name = "message_loop"

    def __init__(self) -> None:
        self.threshold: Any = None  # set by the engine from the policy

    def new_state(self) -> list[list[Any]]:
        return []  # [normalised text, words, count, first seq, seqs]

    def new_turn(self, state: list[list[Any]], scope: str) -> list[list[Any]]:
        return []  # a user message in between: not a monologue

    def observe(self, state: list[list[Any]], ev: Event, lane: Lane, out: Reporter) -> None:
        if ev.kind == "tool_call":
            state.clear()
            return
        if ev.kind != "assistant" or not ev.text:
            return
        text = _WS.sub(" ", ev.text.strip().lower())
        if not text:
            return
        tokens = words(text)
        for entry in state:
            if entry[0] == text or (
                abs(len(entry[0]) - len(text)) < 0.3 * max(len(text), 1)
                and jaccard(entry[1], tokens) >= TEXT_SIMILAR
            ):
                entry[2] += 1
                add_seq(entry[4], ev.seq)
                level = self.threshold.level(entry[2])
                if level is not None:

                    def message(count: int = entry[2], first: int = entry[3]) -> str:
                        return (
                            f"You have written the same message {count} times since step "
                            f"{first} without doing anything in between "
                            f"(\u201c{short(ev.text, 60)}\u201d). Saying it again will not move "
                            "the task on: call a tool to make progress, ask the user a question, "
                            "or finish."
                        )

                    signature = "text:" + digest(entry[0])
                    out.report(
                        "message_loop", (signature, entry[3]), level, entry[2], None,
                        signature, entry[4], message,
                    )  # fmt: skip
                return
        state.append([text, tokens, 1, ev.seq, [ev.seq]])
        if len(state) > MAX_TEXTS:
            del state[0]
