"""Small builders for detection tests: steps from a few words."""

from __future__ import annotations

from typing import Any

from detection import Step


class Trace:
    """Build a run step by step: ``t.call("search", {"q": 1}, "r")``, ``t.user("hi")``."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def _add(self, **fields: Any) -> Step:
        step = Step(seq=len(self.steps), **fields)
        self.steps.append(step)
        return step

    def call(
        self, tool: str, args: Any = None, result: Any = "ok", status: str = "ok", **extra: Any
    ) -> Step:
        return self._add(
            kind="tool_call",
            tool=tool,
            args=args if args is not None else {},
            result=result,
            status=status,
            **extra,
        )

    def user(self, text: str = "please continue", **extra: Any) -> Step:
        return self._add(kind="user", text=text, **extra)

    def say(self, text: str, **extra: Any) -> Step:
        return self._add(kind="assistant", text=text, **extra)


def pattern(letters: str, *, same_results: bool = True) -> list[Step]:
    """Return one call per letter: the letter is the tool, same args; results per letter."""
    trace = Trace()
    for index, letter in enumerate(letters):
        result = f"result of {letter}" if same_results else f"result {index}"
        trace.call(letter.lower(), {"arg": letter}, result)
    return trace.steps


def detectors(analysis: Any, *, at_least: str = "warn") -> set[str]:
    """Return the names of detectors with a finding at or above a severity."""
    rank = {"info": 1, "warn": 2, "stop": 3}
    return {f.detector for f in analysis.findings if rank[f.severity] >= rank[at_least]}
