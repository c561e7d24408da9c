"""OpenAI Responses API items: an item array, `{"output": [...]}`, `{"input": [...]}`, JSONL.

Accepted shapes: a JSON array of items (one run); a Response object `{"id", "object":
"response", "model", "output": [...], "usage"}` or a request body `{"input": [...],
"instructions"?}` (or both `input` and `output`: input first) = one run; an array of such
objects = one run each; JSONL of items = one run for the file; JSONL of Response/request
objects = one run per line. Codex rollout JSONL (`{"type": "response_item", "payload"}`) is a
different format. Detection (`claim`): typed items or a Response object decide it; untyped
role messages with `input_text` parts are Responses only when nothing chat-only is beside.

Mapping (a linear run: no parent ids):
- `message` (role, content text or parts `input_text`/`output_text`/`refusal`) -> a
  user/assistant/system step (`developer` -> system); `instructions` -> a system step first.
- `reasoning` -> a reasoning step with the summary (and content) text; skipped when it has
  no text (encrypted only).
- `function_call {name, arguments: JSON string, call_id}` -> tool_call (args parsed, the raw
  string kept when it is not JSON); `custom_tool_call {name, input}` -> tool_call with the
  input text as args; `local_shell_call`/`computer_call {call_id, action}` -> tool_call with the
  action as args. `*_output {call_id, output}` items are their results, paired as described
  in kit/conversation.py (earliest unanswered call with that id, then position, else "(unknown)").
- Built-in tools that carry their own result (`web_search_call`, `file_search_call`,
  `code_interpreter_call`, `image_generation_call`, `mcp_call`) -> one complete tool_call.
- batch_id: calls with no user message or tool output between them were issued together
  (parallel calls of one model turn) and share a batch id (`b<index>` of the first item).
- Errors: an item `status` of "failed"/"incomplete" or an `error` field -> "error"; JSON
  output with a `metadata.exit_code` -> "error" when it is not 0; otherwise the text decides:
  text_errors' common rules (`Exit code: N` with N != 0 in its spellings, "command not
  found", tracebacks, ...) and output starting `Error:` (any case).
- `function_call` arguments that are text but not JSON are kept raw; the call is "invalid".
- Response `usage` and `model` go to run metadata (`tokens_in`, `tokens_out`, `model`).
"""

from __future__ import annotations

import json
from typing import Any

from detection.model import Run, Step

from .content import content_text, number, parse_json_text
from .detect import GOOD_ENOUGH, Claim, Sample, sample_of
from .errors import Skips, TraceError
from .kit import Conversation, conversations_parser, result_error
from .message_lists import Messages, chat_marks, join
from .reading import Limits

name = "responses"
label = "OpenAI Responses API items"

CALLS = {"function_call", "custom_tool_call", "local_shell_call", "computer_call"}
OUTPUTS = {f"{kind}_output" for kind in CALLS}
SELF_CONTAINED = {
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
}
ITEM_TYPES = CALLS | OUTPUTS | SELF_CONTAINED | {"message", "reasoning", "item_reference"}
PART_TYPES = {"input_text", "output_text", "refusal", "input_image", "input_file", "summary_text"}
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _is_item(value: Any) -> bool:
    """An item with a Responses type; a message needs content parts (native has text)."""
    if not isinstance(value, dict) or "payload" in value:
        return False
    kind = value.get("type")
    if kind == "message" or (kind is None and "role" in value):
        content = value.get("content")
        return (
            value.get("role") in ROLES
            and isinstance(content, list)
            and bool(content)
            and isinstance(content[0], dict)
            and content[0].get("type") in PART_TYPES
        )
    return kind in ITEM_TYPES - {"message"} and ("call_id" in value or "id" in value)


def _item_list(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and (
        isinstance(value.get("input"), list | str) or isinstance(value.get("output"), list)
    ):
        return [*_as_list(value.get("input")), *_as_list(value.get("output"))]
    return None


def _as_list(value: Any) -> list:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return value if isinstance(value, list) else []


def _typed(item: dict) -> bool:
    """An item only the Responses API writes: a typed call/output/reasoning item with an id,
    or a message whose content parts are Responses parts (`input_text`, `output_text`)."""
    kind = item.get("type")
    if kind == "message":
        return _is_item(item)
    return kind in ITEM_TYPES and ("call_id" in item or "id" in item)


def claim(sample: Sample) -> Claim:
    """Score a file as Responses items: typed items or a Response object decide it.

    0.85: typed items (`function_call`, `function_call_output`, `reasoning`, `message` with
    `input_text`/`output_text` parts, ...) or a Response object (`object: "response"`);
    0.6: untyped role messages whose parts are Responses parts and nothing chat-only (an
    `input` list of easy input messages); 0.3: such parts beside chat-only fields (a chat
    export with converted parts, which chat takes); 0 otherwise.
    """
    records = sample.records
    if any(isinstance(r, dict) and "payload" in r for r in records):
        return Claim.no("records wrap items in `payload` (a Codex rollout)")
    items: list[dict] = []
    fitting, response = 0, False
    for record in records:
        if isinstance(record, dict) and record.get("object") == "response":
            response = True
        inner = _item_list(record) if isinstance(record, dict | list) else None
        if isinstance(record, dict) and "type" not in record and "role" not in record:
            found = [i for i in inner or [] if isinstance(i, dict)]
        elif isinstance(record, list):
            found = [i for i in record if isinstance(i, dict)]
        else:
            found = [record] if isinstance(record, dict) else []
        items.extend(found)
        fitting += bool(response or any(_typed(i) or "role" in i for i in found))
    fit = fitting / len(records) if records else 0.0
    typed = [i for i in items if "type" in i and _typed(i)]
    kinds = sorted({i["type"] for i in typed}, key=lambda k: (k == "message", k))
    untyped = [i for i in items if "type" not in i and "role" in i]
    parts = sorted(
        {
            part["type"]
            for i in untyped
            if isinstance(i.get("content"), list)
            for part in i["content"]
            if isinstance(part, dict) and part.get("type") in PART_TYPES
        }
    )
    chat = chat_marks(Messages(messages=untyped))
    if response or typed:
        shown = [f'"{k}" items' for k in kinds]
        if response:
            shown.insert(0, 'a Response object (`object: "response"`)')
        score, reason = 0.85, f"Responses-only items: {join(shown)}"
    elif parts and not chat:
        score = 0.6
        reason = (
            f"role messages with Responses parts {join([f'{p!r}' for p in parts], 3)} "
            "and no chat-only field"
        )
    elif parts:
        score = 0.3
        reason = f"Responses parts, but chat-only fields {join(chat, 3)} decide for chat"
    else:
        return Claim.no(
            "no Responses item (typed `function_call`, `function_call_output`, `reasoning`, "
            "`message` with `input_text` parts) and no Response object"
        )
    if fit < 0.5:
        score *= fit * 2
        reason += f"; only {fitting} of {len(records)} records are items"
    return Claim(round(score, 3), reason)


def sniff(head: bytes) -> bool:
    """Whether `claim` takes these first bytes on its own (kept for callers of the old API)."""
    return claim(sample_of(head)).score >= GOOD_ENOUGH


# --- mapping items onto a run


def output_is_error(output: Any) -> bool:
    """Return whether a tool output reports an error in its text (see the module rules)."""
    if not isinstance(output, str):
        return False
    value = parse_json_text(output)
    if isinstance(value, dict) and isinstance(value.get("metadata"), dict):
        code = number(value["metadata"].get("exit_code"))
        if code is not None:  # an exit code field is explicit: it wins over the text
            return code != 0
    return result_error(output)


def _failed(item: dict) -> bool:
    return item.get("status") in ("failed", "incomplete") or bool(item.get("error"))


class _Items:
    """Feeds items into a Conversation, keeping the batch of the current model turn."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.batch: str | None = None

    def add(self, item: Any, index: int) -> None:
        if not isinstance(item, dict):
            raise TraceError(f"an item must be an object, not {type(item).__name__}")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            self._message(item, index)
        elif kind == "reasoning":
            text = content_text([*_as_parts(item.get("summary")), *_as_parts(item.get("content"))])
            if text and text.strip():
                self.conversation.message("reasoning", text, id=_id(item, index))
        elif kind in CALLS:
            self._call(item, index)
        elif kind in OUTPUTS:
            self.batch = None
            output = item.get("output")
            text = output if isinstance(output, str | None) else content_text(output)
            self.conversation.result(
                text,
                call_id=item.get("call_id"),
                error=_failed(item) or output_is_error(text),
                where=f"item {index}: ",
            )
        elif kind in SELF_CONTAINED:
            step = self._call(item, index)
            self.conversation.complete(step, _self_result(item), error=_failed(item))
        elif kind != "item_reference":
            raise TraceError(f"unknown item type {kind!r}", field="type")

    def _message(self, item: dict, index: int) -> None:
        role = item.get("role")
        if role not in ROLES:
            raise TraceError(f"unknown role {role!r}", field="role")
        content = item.get("content")
        if not isinstance(content, str | list):
            raise TraceError("content must be text or a list of parts", field="content")
        if ROLES[role] != "assistant":
            self.batch = None
        elif self.batch is None:
            self.batch = _id(item, index)
        self.conversation.message(ROLES[role], content_text(content), id=_id(item, index))

    def _call(self, item: dict, index: int) -> Step:
        if self.batch is None:
            self.batch = f"b{index}"
        kind = item["type"]
        if kind == "function_call" or kind == "mcp_call":
            args = parse_json_text(item.get("arguments"))
        elif kind == "custom_tool_call":
            args = item.get("input")
        elif kind in ("code_interpreter_call",):
            args = {"code": item.get("code")}
        else:
            args = item.get("action", item.get("queries"))
        tool = item.get("name") or kind.removesuffix("_call")
        if kind == "mcp_call" and item.get("server_label"):
            tool = f"{item['server_label']}.{tool}"
        step = self.conversation.call(
            tool, args, call_id=item.get("call_id") or item.get("id"), batch_id=self.batch
        )
        raw = item.get("arguments")
        if kind == "function_call" and isinstance(raw, str) and raw.strip() and args is raw:
            try:
                json.loads(raw)
            except ValueError:
                step.status = "invalid"  # the model wrote arguments that are not JSON
        return step


def _self_result(item: dict) -> Any:
    for key in ("output", "outputs", "results", "result", "error"):
        if item.get(key) is not None:
            return item[key]
    return item.get("status")


def _as_parts(value: Any) -> list:
    return value if isinstance(value, list) else []


def _id(item: dict, index: int) -> str:
    return str(item.get("id") or f"i{index}")


def add_item(conversation: Conversation, item: Any, index: int) -> None:
    """Add one item to a run (loose JSONL items keep their batch state on the conversation)."""
    feeder = conversation.state.get("items")
    if feeder is None:
        feeder = conversation.state["items"] = _Items(conversation)
    feeder.add(item, index)


def _run_from_object(
    obj: Any, *, default_id: str, source: str, limits: Limits, skips: Skips
) -> Run:
    items = _item_list(obj)
    if items is None:
        raise TraceError("expected an item array or an object with `input`/`output`", source=source)
    meta: dict[str, Any] = {}
    run_id = default_id
    if isinstance(obj, dict):
        if isinstance(obj.get("model"), str):
            meta["model"] = obj["model"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            for key, field in (("input_tokens", "tokens_in"), ("output_tokens", "tokens_out")):
                if isinstance(usage.get(key), int):
                    meta[field] = usage[key]
        if isinstance(obj.get("id"), str):
            run_id = obj["id"]
    run = Run(id=run_id, format=name, metadata=meta)
    conversation = Conversation(run, limits=limits, skips=skips, source=source)
    if isinstance(obj, dict) and isinstance(obj.get("instructions"), str):
        conversation.message("system", obj["instructions"], id="instructions")
    conversation.add_each(items, _Items(conversation).add, field="items")
    return run


def _is_loose_item(value: Any) -> bool:
    return isinstance(value, dict) and (
        value.get("type") in ITEM_TYPES or ("type" not in value and "role" in value)
    )


parse = conversations_parser(
    name, is_message=_is_loose_item, add_message=add_item, run_from_object=_run_from_object
)
