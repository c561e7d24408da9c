"""OpenAI Chat Completions message lists: API dumps, coding-session exports, tau-bench.

Accepted shapes (detected from content, see `claim`):
- a JSON array of messages, or `{"messages": [...]}` (plus optional `id`, `model`, `title`,
  `system`): one run;
- a JSON array of runs, each an object holding a message list under `messages` or `traj`
  (tau-bench: `{task_id, trial, reward, info, traj}`): one run per element, named
  `task 3 trial 0`, with task_id, trial, reward, the task instruction (`task`), what ended the
  episode (`ended_by`) and `user_cost` in metadata;
- JSONL: one conversation (`{"messages": [...]}` or a message array) per line = one run per
  line; lines that are single messages make one run for the file.
Big arrays are read item by item (ijson), so memory is bounded by one run.

Messages (notes §3.4, §3.26). `content` is a string, null, or an array of parts, read in order:
- text parts (`text`, Responses `input_text`/`output_text`, `refusal`) are joined into the
  message's text; other parts (`image_url`, `input_audio`, `file`, ...) show as `[type]`;
- Anthropic parts converted into the array count as what they are, even without
  `tool_calls`: `tool_use {id, name, input}` -> a tool call, `tool_result {tool_use_id,
  content, is_error}` -> its result, `thinking` and `reasoning` parts -> a reasoning step
  (`redacted_thinking` has no text and adds nothing). The same holds for Responses
  `function_call {call_id, name, arguments}` / `function_call_output {call_id, output}` parts
  and AI SDK `tool-call {toolCallId, toolName, args}` / `tool-result {toolCallId, result}`.
- a `tool` message's content may also be a JSON object: it is the result as it is.
Roles:
- `system`/`developer` -> system step; `user` -> user step; assistant text -> assistant step
  (id `m<index>`), only when there is text, so tool-only turns add no empty messages;
  `reasoning_content`/`reasoning` text -> a reasoning step before it; `usage`
  (`prompt_tokens`/`completion_tokens`) gives tokens on the message's first step.
- each `tool_calls[]` entry -> one tool_call step (id = the call id, tool = function name,
  args = `function.arguments` parsed from its JSON string); calls of one message share
  batch_id `m<index>`. Legacy `function_call {name, arguments}` and `custom` calls are read
  the same way. Arguments that are text but not JSON are kept raw and the call is "invalid"
  (the model wrote no valid call; it stays invalid whatever its result says).
- `tool` (and legacy `function`) messages are results, paired with calls by `tool_call_id`
  (or `name` and position) as described in kit/conversation.py.
- Inlined sub-agents: a role `<base>-subagent-<id>` (`assistant-subagent-a1`,
  `user-subagent-a1`, `tool-subagent-a1`) is read as its base role, on the branch of child
  `<id>`: its steps get parent_id = the sub-agent call (`Task`, `Agent`, `spawn_agent`, ...)
  that started it (see kit/conversation.py), else the run's first step. So a child's calls are
  counted in the child, never as repeats of the parent's. `metadata["subagents"]` counts them.
- Any other role is skipped, counted and reported with a warning that names it.
- Errors: an explicit boolean `is_error` (on a tool message or a `tool_result` part) wins;
  otherwise the text decides: text_errors' common rules (exit codes such as `Exit code 127`
  or `Exit code: 1`, "command not found", tracebacks, ...) and tau-bench's own rule, a result
  starting with `Error:` (any case, leading blanks ignored).
"""

from __future__ import annotations

import json
from typing import Any

from detection.model import Run, Step

from .content import content_text, number, parse_json_text
from .detect import GOOD_ENOUGH, Claim, Sample, sample_of
from .errors import Skips, TraceError
from .kit import Conversation, conversations_parser, result_error
from .message_lists import anthropic_marks, base_role, chat_marks, join, messages_in, no_list
from .reading import Limits

name = "chat"
label = "OpenAI Chat Completions messages (incl. tau-bench)"

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
ALIASES = {"human": "user", "ai": "assistant"}
RESULTS = {"tool", "function"}
LIST_KEYS = ("messages", "traj")
TEXT_PARTS = {"text", "input_text", "output_text", "refusal"}
REASONING_PARTS = {"thinking", "reasoning", "reasoning_text"}
# Calls and results inside content arrays: Anthropic blocks, Responses items and AI SDK parts
# (`tool-call {toolCallId, toolName, args|input}`, `tool-result {toolCallId, result|output}`).
CALL_PARTS = {"tool_use", "server_tool_use", "function_call", "tool_call", "tool-call"}
RESULT_PARTS = {
    "tool_result",
    "web_search_tool_result",
    "function_call_output",
    "tool-result",
}


# --- detection


def claim(sample: Sample) -> Claim:
    """Score a file as chat messages: chat-only fields decide it against Anthropic/Responses.

    0.8 (0.85 for tau-bench runs): messages with fields only Chat Completions writes (a `tool`
    or `function` role, `tool_calls`, `tool_call_id`, `function_call`, a system/developer role
    in the list, `image_url`/`input_audio`/`file` parts, `reasoning_content`, sub-agent roles);
    0.45: plain role/content messages with nothing of any API's own (chat takes those);
    0.3: messages that show Anthropic blocks or Responses parts and nothing chat-only.
    """
    found = messages_in(sample, LIST_KEYS)
    if found.foreign:
        return Claim.no(f"a record has {found.foreign}: another format's file")
    own = [m for m in found.messages if "type" not in m]
    if not found.messages:
        return Claim.no(no_list(found, "`messages`/`traj`"))
    if not own:
        return Claim.no(
            "every record with a `role` also has a `type` (Responses items or native events, "
            "not chat messages)"
        )
    marks, others = chat_marks(found), anthropic_marks(found)
    responses_parts = _responses_parts(own)
    fit = found.fit
    tau = any("task_id" in h and "traj" in h for h in found.holders)
    if marks:
        score = 0.85 if tau else 0.8
        reason = f"messages carry chat-only fields: {join(marks)}"
        if others:
            reason += f" (beside Anthropic parts {join(others, 2)}, as converted exports write)"
    elif others or responses_parts:
        score = 0.3
        shown = join(others or responses_parts, 3)
        reason = (
            f"a message list, but with {shown} and no chat-only field (role tool, tool_calls, "
            "function_call, a system role in the list)"
        )
    else:
        score, reason = 0.45, "plain role/content messages, no tool field of any API"
    if fit < 0.5:
        score *= fit * 2
        reason += f"; only {found.fitting} of {found.records} records are messages"
    return Claim(round(score, 3), reason)


def _responses_parts(messages: list[dict]) -> list[str]:
    kinds = {
        part.get("type")
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict)
    }
    return [f'"{kind}" parts' for kind in ("input_text", "output_text") if kind in kinds]


def sniff(head: bytes) -> bool:
    """Whether `claim` takes these first bytes on its own (kept for callers of the old API)."""
    return claim(sample_of(head)).score >= GOOD_ENOUGH


# --- mapping one message list onto a run


def _int(value: Any) -> int | None:
    return None if value is None else number(value)


def _arguments(raw: Any) -> tuple[Any, bool]:
    """Return (args, valid): JSON text parsed; text that is not JSON kept raw and invalid."""
    args = parse_json_text(raw)
    if isinstance(raw, str) and raw.strip() and args is raw:
        try:
            json.loads(raw)
        except ValueError:
            return raw, False
    return args, True


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
        if "arguments" in function:
            args, valid = _arguments(function["arguments"])
        else:
            args, valid = function.get("input"), True
        step = conversation.call(
            function.get("name"), args, call_id=call.get("id"), batch_id=batch_id
        )
        if not valid:
            step.status = "invalid"


class _Blocks:
    """Walks one message's content parts in order, flushing text before calls/reasoning."""

    def __init__(self, conversation: Conversation, kind: str, index: int) -> None:
        self.conversation, self.kind, self.index = conversation, kind, index
        self.texts: list[str] = []

    def flush(self) -> None:
        if self.texts:
            text = "\n".join(self.texts)
            self.texts.clear()
            if self.kind != "assistant" or text.strip():
                self.conversation.message(self.kind, text, id=f"m{self.index}")

    def add(self, content: Any) -> None:
        if content is None:
            return
        for part in [content] if isinstance(content, str) else content:
            self.part(part)
        self.flush()

    def part(self, part: Any) -> None:
        conversation = self.conversation
        if isinstance(part, str):
            self.texts.append(part)
            return
        if not isinstance(part, dict):
            raise TraceError("a content part must be an object or text", field="content")
        kind = part.get("type")
        if kind in REASONING_PARTS:
            text = _reasoning_text(part)
            if text:
                self.flush()
                conversation.message("reasoning", text, id=f"m{self.index}.reasoning")
        elif kind in CALL_PARTS:
            self.flush()
            raw = _first(part, ("input", "arguments", "args"))
            args, valid = _arguments(raw) if "input" not in part else (raw, True)
            step = conversation.call(
                _first(part, ("name", "toolName")),
                args,
                call_id=_first(part, ("call_id", "toolCallId", "tool_call_id", "id")),
                batch_id=f"m{self.index}",
            )
            if not valid:
                step.status = "invalid"
        elif kind in RESULT_PARTS:
            self.flush()
            result = _first(part, ("content", "output", "result"))  # none: no result
            text = None if result is None else _result_text(result)
            conversation.result(
                text,
                call_id=_first(part, ("tool_use_id", "call_id", "toolCallId", "tool_call_id")),
                error=result_error(text, _first(part, ("is_error", "isError"))),
                name=part.get("toolName"),
                where=f"message {self.index}: ",
            )
        elif kind == "redacted_thinking":
            return  # encrypted reasoning: nothing to show
        else:
            text = content_text([part])
            if text:
                self.texts.append(text)


def _first(part: dict, keys: tuple[str, ...]) -> Any:
    """The value of the first of these keys that the part has (None when it has none)."""
    return next((part[key] for key in keys if part.get(key) is not None), None)


def _result_text(result: Any) -> Any:
    """A result's text; a JSON object or number (AI SDK `result`) is kept as it is."""
    if isinstance(result, str | list) or (isinstance(result, dict) and "type" in result):
        return content_text(result)
    return result


def _reasoning_text(part: dict) -> str:
    for key in ("thinking", "text", "reasoning", "content", "summary"):
        value = part.get(key)
        if isinstance(value, str | list) and value:
            text = content_text(value)
            if text.strip():
                return text
    return ""


def _text_of(content: Any) -> str:
    """The plain text of a content (its text parts only), for matching a sub-agent prompt."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") in TEXT_PARTS
        and isinstance(part.get("text"), str)
    )


def _add_tool_result(conversation: Conversation, message: dict, content: Any, index: int) -> None:
    where = f"message {index}: "
    parts = content if isinstance(content, list) else []
    results = [p for p in parts if isinstance(p, dict) and p.get("type") in RESULT_PARTS]
    if results and message.get("tool_call_id") is None:  # a converted Anthropic result
        blocks = _Blocks(conversation, "user", index)
        for part in results:
            blocks.part(part)
        return
    text = None if content is None else _result_text(content)  # no content: no result
    flag = message.get("is_error")
    if not isinstance(flag, bool) and len(results) == 1:
        flag = results[0].get("is_error")
    conversation.result(
        text,
        call_id=message.get("tool_call_id"),
        error=result_error(text, flag),
        name=message.get("name"),
        where=where,
    )


def add_message(conversation: Conversation, message: Any, index: int) -> None:
    """Add one Chat Completions message to the run (raises TraceError on a bad message)."""
    if not isinstance(message, dict):
        raise TraceError(f"a message must be an object, not {type(message).__name__}")
    raw_role = message.get("role")
    role, child = base_role(raw_role)
    role = ALIASES.get(role or "", role)
    content = message.get("content")
    if isinstance(content, dict) and isinstance(content.get("type"), str):
        content = [content]  # one typed part given bare
    if content is not None and not isinstance(content, str | list) and role not in RESULTS:
        raise TraceError("content must be text or a list of parts", field="content")
    if role not in ROLES:
        raise TraceError(
            f"unknown role {raw_role!r} (read: system, developer, user, assistant, tool, "
            "function, and <role>-subagent-<id>); message skipped",
            field="role",
        )
    conversation.parent = None if child is None else conversation.branch(child, _text_of(content))
    first = len(conversation.run.steps)
    if role in ("system", "developer", "user"):
        _Blocks(conversation, "user" if role == "user" else "system", index).add(content)
    elif role == "assistant":
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        text = content_text(reasoning) if isinstance(reasoning, str | list) else ""
        if text.strip():
            conversation.message("reasoning", text, id=f"m{index}.reasoning")
        _Blocks(conversation, "assistant", index).add(content)
        _add_calls(conversation, message, f"m{index}")
        _usage(conversation.run.steps[first:], message.get("usage"))
    else:
        _add_tool_result(conversation, message, content, index)


def _usage(steps: list[Step], usage: Any) -> None:
    if not steps or not isinstance(usage, dict):
        return
    steps[0].tokens_in = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    steps[0].tokens_out = _int(usage.get("completion_tokens", usage.get("output_tokens")))


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


def _message_list(value: dict) -> list | None:
    for key in LIST_KEYS:
        if isinstance(value.get(key), list):
            return value[key]
    return None


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
    for key in ("id", "run_id", "session_id", "conversation_id"):
        if isinstance(obj.get(key), str | int) and not isinstance(obj.get(key), bool):
            run_id = str(obj[key])
            break
    else:
        if "task_id" in meta:
            run_id = f"task-{meta['task_id']}-trial-{meta.get('trial', 0)}"
    if "task_id" in meta:
        run_name = f"task {meta['task_id']} trial {meta.get('trial', 0)}"
    elif isinstance(obj.get("title"), str):
        run_name = obj["title"][:200]
    run = Run(id=run_id, format=name, name=run_name, metadata=meta)
    conversation = Conversation(run, limits=limits, skips=skips, source=source)
    system = obj.get("system")
    if isinstance(system, str | list) and system:
        conversation.message("system", content_text(system), id="system")
    add_messages(conversation, messages, where="")
    return run


# --- reading the file


def _is_loose_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and _message_list(value) is None


parse = conversations_parser(
    name, is_message=_is_loose_message, add_message=add_message, run_from_object=_run_from_object
)
