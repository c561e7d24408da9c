"""OpenAI Chat Completions message lists, incl. benchmark harness dumps such as tau-bench.

Accepted shapes (detected from content):
- a JSON array of messages, or `{"messages": [...]}`: one run;
- a JSON array of runs, each an object holding a message list under `messages` or `traj`
  (tau-bench: `{task_id, trial, reward, info, traj}`): one run per element, named
  `task 3 trial 0`, with task_id, trial, reward, the task instruction (`task`), what ended the
  episode (`ended_by`) and `user_cost` in metadata;
- JSONL: one conversation (`{"messages": [...]}` or a message array) per line = one run per
  line; lines that are single messages make one run for the file.
Big arrays are read item by item (ijson), so memory is bounded by one run.

Mapping (a linear run: no parent ids):
- `system`/`developer` -> system step; `user` -> user step; assistant text -> assistant step
  (id `m<index>`), only when there is text, so tool-only turns add no empty messages;
  `reasoning_content`/`reasoning` text -> a reasoning step before it.
- each `tool_calls[]` entry -> one tool_call step (id = the call id, tool = function name,
  args = `function.arguments` parsed from its JSON string, the raw string kept when it is not
  valid JSON); calls of one assistant message share batch_id `m<index>`. Legacy
  `function_call` and `custom` tool calls are read the same way.
- `tool` (and legacy `function`) messages are results, paired with calls by `tool_call_id` as
  described in conversation.py (earliest unanswered call with that id, then position, else a
  step of its own with tool "(unknown)").
- Errors exist only in text: a result whose text starts with `Error:` (any case, leading blanks
  ignored) has status "error"; everything else is "ok".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run

from . import anthropic
from .content import content_text, parse_json_text
from .conversation import Conversation, read_conversations, text_is_error
from .errors import Skips, TraceError
from .reading import Limits, head_values

name = "chat"
label = "OpenAI Chat Completions messages (incl. tau-bench)"

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
MESSAGE_KEYS = ROLES | {
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "function_call",
    "refusal",
    "reasoning_content",
    "reasoning",
    "audio",
    "annotations",
    "id",
}
LIST_KEYS = ("messages", "traj")
FOREIGN_KEYS = {
    "trajectory_format",
    "trajectory",
    "history",
    "sessionId",
    "projectHash",
    "environment",
    "uuid",
    "resourceSpans",
    "children",
}
FOREIGN_INFO = {"exit_status", "mini_version", "submission", "model_stats"}


def _is_message(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("role") in ROLES
        and "type" not in value
        and set(value) <= MESSAGE_KEYS
        and ("content" in value or "tool_calls" in value)
    )


def _message_list(value: dict) -> list | None:
    for key in LIST_KEYS:
        if isinstance(value.get(key), list):
            return value[key]
    return None


def _is_run(value: Any) -> bool:
    if not isinstance(value, dict) or FOREIGN_KEYS & set(value):
        return False
    info = value.get("info")
    if isinstance(info, dict) and FOREIGN_INFO & set(info):
        return False
    messages = _message_list(value)
    if messages is None:
        return "task_id" in value and "trial" in value  # tau-bench, traj not yet in the head
    return bool(messages) and _is_message(messages[0])


def _claims(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and (_is_message(value[0]) or _is_run(value[0]))
    return _is_run(value) or _is_message(value)


def sniff(head: bytes) -> bool:
    """A message array, `{"messages": [...]}`, an array of runs, or JSONL of those."""
    values = head_values(head)
    if not values or not _claims(values[0]):
        return False
    return not any(anthropic.has_anthropic_marks(value) for value in values)


# --- mapping one message list onto a run


def _add_calls(conversation: Conversation, message: dict, batch_id: str) -> None:
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TraceError("tool_calls must be a list", field="tool_calls")
    if isinstance(message.get("function_call"), dict):
        calls = [*calls, {"function": message["function_call"]}]
    for call in calls:
        if not isinstance(call, dict):
            raise TraceError("a tool call must be an object", field="tool_calls")
        function = call.get("function") or call.get("custom") or {}
        if not isinstance(function, dict):
            raise TraceError("tool_calls[].function must be an object", field="tool_calls")
        args = function.get("arguments", function.get("input"))
        conversation.call(
            function.get("name"), parse_json_text(args), call_id=call.get("id"), batch_id=batch_id
        )


def add_message(conversation: Conversation, message: Any, index: int) -> None:
    """Add one Chat Completions message to the run (raises TraceError on a bad message)."""
    if not isinstance(message, dict):
        raise TraceError(f"a message must be an object, not {type(message).__name__}")
    role = message.get("role")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise TraceError("content must be text or a list of parts", field="content")
    if role in ("system", "developer", "user"):
        conversation.message(
            "user" if role == "user" else "system", content_text(content), id=f"m{index}"
        )
    elif role == "assistant":
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning.strip():
            conversation.message("reasoning", reasoning, id=f"m{index}.reasoning")
        text = content_text(content)
        if text:
            conversation.message("assistant", text, id=f"m{index}")
        _add_calls(conversation, message, f"m{index}")
    elif role in ("tool", "function"):
        text = None if content is None else content_text(content)  # no content: no result
        conversation.result(
            text,
            call_id=message.get("tool_call_id"),
            error=text_is_error(text),
            name=message.get("name"),
            where=f"message {index}: ",
        )
    else:
        raise TraceError(f"unknown role {role!r}", field="role")


def add_messages(conversation: Conversation, messages: Any, *, where: str) -> None:
    """Add a message list; a bad message is skipped and reported, the rest still count."""
    if not isinstance(messages, list):
        raise TraceError("expected a list of messages", source=conversation.source)
    conversation.add_each(
        messages, lambda message, index: add_message(conversation, message, index),
        field=f"{where}messages",
    )  # fmt: skip


def _metadata(obj: dict) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in ("task_id", "trial", "reward", "model", "agent", "env", "task"):
        if isinstance(obj.get(key), str | int | float) and not isinstance(obj.get(key), bool):
            meta[key] = obj[key]
    info = obj.get("info")
    if isinstance(info, dict):
        task = info.get("task")
        if isinstance(task, dict) and isinstance(task.get("instruction"), str):
            meta["task"] = task["instruction"]
        if isinstance(info.get("source"), str):
            meta["ended_by"] = info["source"]
        if isinstance(info.get("user_cost"), int | float):
            meta["user_cost"] = info["user_cost"]
    return meta


def _run_from_object(
    obj: Any, *, default_id: str, source: str, limits: Limits, skips: Skips
) -> Run:
    if isinstance(obj, list):
        run = Run(id=default_id, format=name)
        add_messages(Conversation(run, limits=limits, skips=skips, source=source), obj, where="")
        return run
    if not isinstance(obj, dict):
        raise TraceError(
            f"expected a conversation object or array, got {type(obj).__name__}", source=source
        )
    messages = _message_list(obj)
    if messages is None:
        raise TraceError("no message list (`messages` or `traj`)", source=source)
    meta = _metadata(obj)
    run_id, run_name = default_id, ""
    for key in ("id", "run_id", "session_id"):
        if isinstance(obj.get(key), str | int) and not isinstance(obj.get(key), bool):
            run_id = str(obj[key])
            break
    else:
        if "task_id" in meta:
            run_id = f"task-{meta['task_id']}-trial-{meta.get('trial', 0)}"
    if "task_id" in meta:
        run_name = f"task {meta['task_id']} trial {meta.get('trial', 0)}"
    run = Run(id=run_id, format=name, name=run_name, metadata=meta)
    add_messages(Conversation(run, limits=limits, skips=skips, source=source), messages, where="")
    return run


# --- reading the file


def _is_loose_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and _message_list(value) is None


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the runs of one chat file (see the module docstring for the shapes)."""
    yield from read_conversations(
        stream,
        source=source,
        limits=limits,
        format=name,
        is_message=_is_loose_message,
        add_message=add_message,
        run_from_object=_run_from_object,
    )
