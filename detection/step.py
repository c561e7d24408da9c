"""One step of a run (see detection/model.py for the trace model it belongs to)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("user", "assistant", "tool_call", "system", "reasoning")


@dataclass(slots=True)
class Step:
    """One thing that happened in a run: a message or a tool call with its result.

    The engine reads every field of every step, so the class is compiled with the engine
    (a C struct: no dictionary lookups to read a field). Fields that come from trace files
    are declared ``Any`` so that the compiled class takes what plain Python takes (an int
    where a float is meant, say); the comment after each gives the type the model promises.
    """

    seq: int  # position in the run, 0-based, in the order things happened
    kind: str  # one of KINDS
    id: Any = None  # str | None: the source's own id
    parent_id: Any = None  # str | None: builds the tree; None for a root (a flat trace: a chain)
    tool: Any = None  # str | None: tool_call: the tool name
    args: Any = None  # tool_call: arguments (JSON value, usually a dict)
    result: Any = None  # tool_call: what the tool returned (JSON value or text)
    status: Any = (
        "ok"  # str: "ok", "error", or "invalid" (no valid action: counts as a failed call)
    )
    batch_id: Any = None  # str | None: the assistant message that issued this call
    text: Any = None  # str | None: user/assistant/system/reasoning text
    started_at: Any = None  # float | None: epoch seconds
    ended_at: Any = None  # float | None: epoch seconds
    tokens_in: Any = None  # int | None (some sources give a float)
    tokens_out: Any = None  # int | None
    cost: Any = None  # float | None
    # str | None: the actor (a sub-agent) whose action this is; None: the run's main agent
    lane: Any = None

    @property
    def is_tool_call(self) -> bool:
        """Whether this step is a tool call (with its result), not a message."""
        return self.kind == "tool_call"
