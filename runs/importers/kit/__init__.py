"""The importer kit: the one set of building blocks every importer builds its runs with.

- `steps`: build a step (`tool_step`, `text_step`, `set_result`), add it to its run
  (`add_step`; `check_step_limit`, behind it, is the one check of the step limit) and
  finish a run (`finish_run`: one call is one step, unique ids, steps numbered 0..);
- `merge`: the rule by which the copies a source writes of one call become one step;
- `conversation`: a run built message by message (`Conversation`: results paired with their
  calls, inlined sub-agents as branches) and files of conversations (`read_conversations`),
  for the message-list formats and the formats that read like them.
"""

from __future__ import annotations

from .conversation import (
    Conversation,
    conversations_parser,
    result_error,
    starts_subagent,
    with_skips,
)
from .steps import (
    add_step,
    check_step_limit,
    finish_run,
    set_result,
    text_step,
    tool_step,
)

__all__ = [
    "Conversation",
    "add_step",
    "check_step_limit",
    "conversations_parser",
    "finish_run",
    "result_error",
    "set_result",
    "starts_subagent",
    "text_step",
    "tool_step",
    "with_skips",
]
