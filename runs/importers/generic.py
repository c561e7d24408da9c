"""A heuristic reader for unknown JSON or JSONL files that hold tool-call-like objects.

Offered by name only (`--format generic`, the upload page, `POST /api/traces?format=generic`):
detection never picks it, but an unknown file's error suggests it when `claim` finds calls.
It reads what it can recognise and says so: every run's `metadata["read_by"]` names the
fields it used and counts what it could not place, and the run page and `loopboard scan`
show that. It must never invent a call, so every rule below asks for evidence.

Where it looks. A JSONL file is read line by line; a JSON document is streamed (ijson): the
items of its outermost arrays, at any depth under wrapper objects (`{"data": {"conversation":
[...]}}`), are read one at a time. Inside each record or item it walks nested objects and
arrays, `Limits.max_depth` levels at most, in document order.

What counts:

- **A call**: an object with a tool name (`name`, `tool_name`, `toolName`, `tool`,
  `function_name`, `functionName`, or `function.name`) *and* an arguments field (`arguments`,
  `args`, `input`, `parameters`, `tool_input`, `toolInput`; `function.arguments`; not
  `params`, which configuration objects use too: `{"name": "includes", "params": {}}` is a
  scorer),
  or a name and an explicit call type (`type` `tool_use`, `tool_call`, `toolCall`,
  `function_call`, or any type ending in `_call`/`_tool_use`). Arguments held as JSON text
  are parsed (content.parse_json_text); other arguments that are not an object are kept
  under their field name (`{"input": "<patch text>"}`), except JSON text that does not parse,
  which is kept as it is (visibly broken).
  The call's ids (`id`, `call_id`, `tool_call_id`, `tool_use_id`, `tool_id`, `toolCallId`, …)
  are kept for its result. What a call holds (its arguments, its own result) is data and is
  never searched for further calls. A call that carries its own result (`result`, `output`,
  `response`, `tool_output`, `tool_response`, `result_json`) gets it there; a later copy of a call (same id,
  name and arguments) that carries a result gives the call that result.
- **Not a call**: a tool *definition* (arguments that are a JSON schema: `properties`,
  `type: "object"`, or an `input_schema`), and any object with a message role.
- **A result**: an object (not a call) with a result type (`tool_result`, `toolResult`,
  `function_call_output`, any type ending in `_result`/`_output`), or a result role (`tool`,
  `function`, `toolResult`, `tool_result`, `ipython`), or a link field (`tool_call_id`,
  `tool_use_id`, `call_id`, `toolCallId`, `toolUseId`, `tool_id`, `callId`) with a value
  (`content`, `output`, `result`, `response`, `error`, `text`), or a bare `id` naming an
  unanswered call with a `response`/`output`/`result`. It goes to the earliest unanswered
  call with its link id; a result without a link goes to the earliest unanswered call of
  the latest batch (the calls of one message), by order. Errors: an explicit flag wins
  (`is_error`, `isError`, `status: "error"`, `success: false`, a non-zero `exit_code`);
  otherwise the shared text rules (text_errors.error_rule) decide.
- **A message**: an object whose `role` (or, without a role, `type`) is a user, assistant or
  system word (`user`/`human`; `assistant`/`model`/`ai`/`gemini`/`agent`; `system`/
  `developer`) and that has text (`content` text or text parts, or `text`). Its text becomes
  a step; its other fields (`tool_calls`, content blocks) are searched for calls.

What it refuses to guess, and counts instead (`read_by["unplaced"]`, with a warning each):

- a result whose link matches no call, or a result with no link and no call waiting;
- an object that looks like a call but lacks a field (an explicit call type with no name, a
  name with `run_type: "tool"`/`type: "tool"` but no arguments field). These are typed as
  calls by the file itself, so when a run holds any, the calls found may be neither all of
  its calls nor their only description (a LangSmith tool run beside the model's request for
  it): the run is refused, with the count, rather than read in part;
- an object with an arguments object but no tool name (`{"action": "run", "args": {…}}`):
  the file names its calls by a field this reader does not know. Calls found *beside* such
  arguments in the same object (say in a copy of the model's raw response) may describe the
  same action under another name, so they are not counted either ("shadowed"), nor are
  later copies with the same call id, nor their results.

Copies are not new calls: a call whose id names a call already read, with the same name
and arguments, is that call again (an execution-start event, a re-appended record), and a
result for a call already answered is that result again; a call with no
id that carries its own result and has the name and arguments of a call still waiting is
that call's execution (it gives the waiting call its result); a message list that starts with a message already read (a model
input re-sent at every step, an API log's request) re-sends that context, so the messages of
it already read are skipped; a call with no id of its own inside an event that names an
already-read call by id is that call again.

Runs: a record (JSONL line, top-level array item) that holds a message list is a run of its
own, unless its list begins with the whole list of the previous record (an API log
re-sending the context: the same run) or the records before it were single messages or
events (then the list is a checkpoint or a context of that run). Records that are single
messages or events make one run for the file. A file where no call is found fails with what would be needed: the
reader never returns a run that only looks read.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from detection.model import Run, Step

from . import text_errors
from .content import content_text, parse_json_text
from .detect import Claim, Sample
from .errors import Skips, TraceError
from .kit import add_step, finish_run, text_step, tool_step
from .reading import (
    DepthGuard,
    JsonlReader,
    Limits,
    clip_json,
    document_depth,
    first_byte,
    looks_like_jsonl,
    stream_head,
)

name = "generic"
label = "any JSON/JSONL with tool calls (read heuristically)"

NAME_KEYS = ("name", "tool_name", "toolName", "tool", "function_name", "functionName")
ARG_KEYS = ("arguments", "args", "input", "parameters", "tool_input", "toolInput")
ID_KEYS = (
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "tool_id",
    "toolCallId",
    "toolUseId",
    "toolId",
    "callId",
)
LINK_KEYS = ID_KEYS[1:]
RESULT_VALUE_KEYS = ("content", "output", "result", "response", "tool_output", "error", "text")
INLINE_RESULT_KEYS = (
    "result",
    "output",
    "response",
    "tool_output",
    "tool_response",
    "result_json",
)
CALL_TYPES = {"tool_use", "tool_call", "toolcall", "function_call", "functioncall"}
RESULT_TYPES = {"tool_result", "toolresult", "function_result", "tool_response"}
RESULT_ROLES = {"tool", "function", "toolresult", "tool_result", "ipython"}
ROLE_WORDS = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "model": "assistant",
    "ai": "assistant",
    "gemini": "assistant",
    "agent": "assistant",
    "system": "system",
    "developer": "system",
}
TEXT_PARTS = {"text", "input_text", "output_text"}
ERROR_STATUS = {"error", "failed", "failure", "errored"}
REQUEST_WINDOW = 200  # steps searched for the request an execution record answers
PARENT_LINKS = (("uuid", "parentUuid"), ("id", "parentId"), ("id", "parent_id"))
_NAME = re.compile(r"^[^\s\x00-\x1f][^\x00-\x1f]{0,199}$")


# --- what one object is


def _type(obj: dict) -> str:
    value = obj.get("type")
    return value.lower().replace("-", "_") if isinstance(value, str) else ""


def _is_call_type(kind: str) -> bool:
    return kind in CALL_TYPES or kind.endswith(("_call", "_tool_use"))


def _is_result_type(kind: str) -> bool:
    return kind in RESULT_TYPES or kind.endswith(("_result", "_output"))


def _role(obj: dict) -> str | None:
    """The message role word of an object (`role`, else `type`), lower-cased, or None."""
    role = obj.get("role")
    if isinstance(role, str):
        return role.lower()
    kind = _type(obj)
    return kind if kind in ROLE_WORDS else None


def _tool_name(obj: dict) -> tuple[str, str] | None:
    """(field, name) of a tool name on this object, if any."""
    for key in NAME_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and _NAME.match(value):
            return key, value
    return None


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict) and (
        "properties" in value or value.get("type") == "object" or "$schema" in value
    )


@dataclass(slots=True)
class CallShape:
    """A call as found: its name, arguments, ids and the fields they came from."""

    tool: str
    args: Any
    ids: list[str]
    fields: str  # e.g. "name+arguments", "function.name+function.arguments"
    result: Any = None
    has_result: bool = False
    error: bool = False


def _ids(obj: dict) -> list[str]:
    found = []
    for key in ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            found.append(str(value))
    return found


def _args_of(obj: dict) -> tuple[str, Any] | None:
    for key in ARG_KEYS:
        if key in obj:
            return key, obj[key]
    return None


def _as_args(key: str, value: Any) -> Any:
    value = parse_json_text(value)
    if value is None:
        return {}
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        return value  # JSON text that does not parse: kept as it is, visibly broken
    return value if isinstance(value, dict) else {key: value}


def call_shape(obj: dict) -> CallShape | None | bool:
    """The call this object is, None if it is none, False if it is a tool definition."""
    if _role(obj) is not None and _role(obj) in ROLE_WORDS.keys() | RESULT_ROLES:
        return None  # a message or a result names a tool, it is not a call
    kind = _type(obj)
    if "input_schema" in obj or "inputSchema" in obj:
        return False
    function = obj.get("function")
    if isinstance(function, dict):
        named = _tool_name(function)
        if named is not None and named[0] == "name":
            args = _args_of(function)
            if args is not None and (args[0] == "parameters" or _is_schema(args[1])):
                return False
            if args is not None or _is_call_type(kind) or kind == "function":
                key, value = args if args is not None else ("arguments", None)
                return CallShape(
                    named[1], _as_args(key, value), _ids(obj), f"function.name+function.{key}"
                )
    named = _tool_name(obj)
    if named is None:
        return None
    if _is_result_type(kind):
        return None
    args = _args_of(obj)
    if args is not None:
        if _is_schema(args[1]) and ("description" in obj or args[0] == "parameters"):
            return False
        shape = CallShape(named[1], _as_args(*args), _ids(obj), f"{named[0]}+{args[0]}")
    elif _is_call_type(kind):
        shape = CallShape(named[1], {}, _ids(obj), f"{named[0]}+type {kind}")
    else:
        return None
    for key in INLINE_RESULT_KEYS:
        if key in obj and obj[key] is not None:
            shape.result, shape.has_result = obj[key], True
            shape.error = _explicit_error(obj, value_key=key) or (
                _explicit_error(obj, value_key=key) is None and _text_error(obj[key])
            )
            break
    return shape


def _explicit_error(obj: dict, *, value_key: str) -> bool | None:
    """What an object's own flags say about failure: True, False, or None (no flag)."""
    for key in ("is_error", "isError"):
        if isinstance(obj.get(key), bool):
            return obj[key]
    status = obj.get("status")
    if isinstance(status, str) and status.lower() in ERROR_STATUS:
        return True
    if isinstance(obj.get("success"), bool):
        return not obj["success"]
    for holder in (obj, obj.get("metadata")):
        if isinstance(holder, dict):
            for key in ("exit_code", "exitCode", "returncode"):
                code = holder.get(key)
                if isinstance(code, int) and not isinstance(code, bool):
                    return code != 0
    error = obj.get("error")
    if value_key != "error" and error not in (None, "", False, {}, []):
        return True
    return None


def _text_error(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get("error") not in (None, "", False, {}, []):
            return True
        value = value.get("output", value.get("content", ""))
    text = value if isinstance(value, str) else content_text(value) if value else ""
    return text_errors.is_error(text)


def message_text(obj: dict) -> str | None:
    """The text of a message object: `content` text or text parts, else `text`."""
    content = obj.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif (
                isinstance(part, dict)
                and isinstance(part.get("text"), str)
                and (_type(part) in TEXT_PARTS or "type" not in part)
            ):
                texts.append(part["text"])
        return "\n".join(texts) if texts else None
    if isinstance(obj.get("text"), str):
        return obj["text"]
    return None


def _fingerprint(value: Any) -> bytes:
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        data = repr(value).encode("utf-8", "replace")
    return hashlib.blake2b(data, digest_size=16).digest()


def _is_message_like(value: Any) -> bool:
    return isinstance(value, dict) and _role(value) in ROLE_WORDS.keys() | RESULT_ROLES


# --- building a run


@dataclass(slots=True)
class ReadBy:
    """What a run was read by: the fields used and what could not be placed."""

    call_fields: dict[str, int] = field(default_factory=dict)
    result_links: dict[str, int] = field(default_factory=dict)
    unplaced: dict[str, int] = field(default_factory=dict)
    copies: int = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    def as_metadata(self) -> dict[str, Any]:
        return {
            "heuristic": True,
            "call_fields": sorted(self.call_fields),
            "result_link": sorted(self.result_links),
            "unplaced": sum(self.unplaced.values()),
            "unplaced_by_reason": dict(sorted(self.unplaced.items())),
            "copies_skipped": self.copies,
        }

    def summary(self) -> str:
        """One sentence for the run page and `loopboard scan`."""
        calls = ", ".join(sorted(self.call_fields)) or "none"
        links = ", ".join(sorted(self.result_links)) or "none"
        unplaced = sum(self.unplaced.values())
        return (
            f"read heuristically: calls from {calls}; results linked by {links}; "
            f"{unplaced} object{'s' if unplaced != 1 else ''} could not be placed"
        )


class Builder:
    """The steps of one run, found object by object (see the module rules)."""

    def __init__(self, run: Run, *, limits: Limits, source: str) -> None:
        self.run, self.limits, self.source = run, limits, source
        self.read_by = ReadBy()
        self.skips = Skips()
        self.open: dict[str, list[Step]] = {}  # call id -> unanswered calls, earliest first
        self.answered: set[int] = set()  # seq of answered calls
        self.known_ids: set[str] = set()  # ids of every call read
        self.by_id: dict[str, list[Step]] = {}  # call id -> every call read with it
        self.shadowed: set[str] = set()  # ids of calls not counted (see the module rules)
        self.batch: list[Step] = []
        self.batch_id: str | None = None
        self.batches = 0
        self.seen: dict[bytes, int] = {}  # message fingerprint -> most times in one list
        self.where = ""
        self.line: int | None = None  # the JSONL line being read
        self.calls = 0
        self.typed_unreadable = 0  # objects typed as calls that cannot be read as calls
        # records that carry their own id and a parent link: (id, parent, first, end step)
        self.tree: list[tuple[str | None, str | None, int, int]] = []
        self.parent_field = ""

    # -- walking

    def record(self, value: Any, where: str) -> None:
        """Read one record (a JSONL line, an array item of a document)."""
        self.where = where
        line = WHERE_LINE.match(where)
        self.line = int(line[1]) if line else None
        self.batch_id = None
        first = len(self.run.steps)
        self._visit(value, 1, shadow=False, parent_link=None)
        if isinstance(value, dict):
            for own, parent in PARENT_LINKS:
                if parent in value and isinstance(value.get(own), str | int):
                    up = value[parent]
                    up = str(up) if isinstance(up, str | int) and not isinstance(up, bool) else None
                    self.tree.append((str(value[own]), up, first, len(self.run.steps)))
                    self.parent_field = self.parent_field or parent
                    break

    def _visit(self, node: Any, depth: int, *, shadow: bool, parent_link: str | None) -> None:
        if depth > self.limits.max_depth:
            return
        if isinstance(node, list):
            self._visit_list(node, depth, shadow=shadow)
        elif isinstance(node, dict):
            self._visit_object(node, depth, shadow=shadow, parent_link=parent_link)

    def _visit_list(self, items: list, depth: int, *, shadow: bool) -> None:
        state = ListState(self)
        for item in items:
            if state.is_copy(item):
                continue
            self._visit(item, depth + 1, shadow=shadow, parent_link=None)

    def _visit_object(
        self, obj: dict, depth: int, *, shadow: bool, parent_link: str | None
    ) -> None:
        shape = call_shape(obj)
        if shape is False:
            return  # a tool definition
        if shape is not None:
            self._call(shape, shadow=shadow, parent_link=parent_link)
            return
        role = _role(obj)
        kind = _type(obj)
        link = next((str(obj[k]) for k in LINK_KEYS if isinstance(obj.get(k), str | int)), None)
        if role in RESULT_ROLES or _is_result_type(kind):
            self._result(obj, link)
            return
        if role not in ROLE_WORDS and link is not None and any(k in obj for k in RESULT_VALUE_KEYS):
            self._result(obj, link)
            return
        if role not in ROLE_WORDS and isinstance(obj.get("id"), str | int):
            bare = str(obj["id"])
            if self.open.get(bare) and any(k in obj for k in INLINE_RESULT_KEYS):
                self._result(obj, bare, link_field="id")
                return
        if _is_call_type(kind):
            self.typed_unreadable += 1
            self._unplaced("call-typed object without a tool name", f"type {kind!r}")
            return
        if (obj.get("run_type") == "tool" or kind == "tool") and _tool_name(obj) is not None:
            self.typed_unreadable += 1
            self._unplaced(
                "tool-typed object without an arguments field", f"tool {_tool_name(obj)[1]!r}"
            )
            return
        text_key = None
        if role in ROLE_WORDS:
            text = message_text(obj)
            if text is not None:
                text_key = "content" if "content" in obj else "text"
                self._message(ROLE_WORDS[role], text)
        args = _args_of(obj)
        nameless = (
            args is not None
            and isinstance(args[1], dict)
            and args[1]
            and not _is_schema(args[1])
            and call_shape(args[1]) is None
            and role not in ROLE_WORDS
        )
        if nameless:
            self._unplaced("arguments without a tool name", f"field {args[0]!r}")
        own_link = link or parent_link
        for key, value in obj.items():
            if key == text_key and isinstance(value, str):
                continue
            if nameless and key == args[0]:
                continue  # the arguments of something unnamed: data, not calls
            self._visit(value, depth + 1, shadow=shadow or nameless, parent_link=own_link)

    # -- steps

    def _add(self, step: Step) -> Step:
        step.seq = len(self.run.steps)
        return add_step(self.run, step, limits=self.limits, source=self.source, line=self.line)

    def _message(self, kind: str, text: str) -> None:
        if kind == "assistant":
            self.batches += 1
            self.batch_id = f"m{self.batches}"
        if text.strip():
            self._add(text_step(kind, text, limits=self.limits))

    def _call(self, shape: CallShape, *, shadow: bool, parent_link: str | None) -> None:
        ids = shape.ids
        if not ids and parent_link is not None and parent_link in self.known_ids:
            self.read_by.copies += 1  # an event about a call already read
            return
        if shadow or any(i in self.shadowed for i in ids):
            self.shadowed.update(ids)
            self._unplaced(
                "call beside arguments without a tool name (may describe the same action)",
                f"tool {shape.tool!r}",
            )
            return
        earlier = self._read_before(ids, shape) if ids else None
        if earlier is not None:  # the same call again (an execution start, a re-append)
            if shape.has_result and earlier.seq not in self.answered:
                self._settle(self._take(earlier), shape.result, error=shape.error)
                self.read_by.count(self.read_by.result_links, "the call's id (a later event)")
            else:
                self.read_by.copies += 1
            return
        if not ids and shape.has_result:
            waiting = self._waiting_request(shape)
            if waiting is not None:  # the execution of a call the model asked for earlier
                self._settle(self._take(waiting), shape.result, error=shape.error)
                self.read_by.count(self.read_by.result_links, "name+arguments (an execution)")
                return
        if self.batch_id is None:
            self.batches += 1
            self.batch_id = f"m{self.batches}"
        step = self._add(
            tool_step(
                tool=shape.tool,
                args=shape.args,
                limits=self.limits,
                id=ids[0] if ids else None,
                batch_id=self.batch_id,
            )
        )
        self.calls += 1
        self.read_by.count(self.read_by.call_fields, shape.fields)
        if self.batch and self.batch[-1].batch_id != self.batch_id:
            self.batch = []
        self.batch.append(step)
        self.known_ids.update(ids)
        for call_id in ids:
            self.by_id.setdefault(call_id, []).append(step)
        if shape.has_result:
            self._settle(step, shape.result, error=shape.error)
            self.read_by.count(self.read_by.result_links, "inline (the call's own result)")
            return
        for call_id in ids:
            self.open.setdefault(call_id, []).append(step)

    def _read_before(self, ids: list[str], shape: CallShape) -> Step | None:
        args = clip_json(shape.args, self.limits)
        for call_id in ids:
            for step in self.by_id.get(call_id, []):
                if step.tool == shape.tool[:200] and step.args == args:
                    return step
        return None

    def _waiting_request(self, shape: CallShape) -> Step | None:
        """The earliest unanswered call of the last REQUEST_WINDOW steps with this name and
        these arguments."""
        args = clip_json(shape.args, self.limits)
        for step in self.run.steps[-REQUEST_WINDOW:]:
            if (
                step.kind == "tool_call"
                and step.seq not in self.answered
                and step.tool == shape.tool[:200]
                and step.args == args
            ):
                return step
        return None

    def _result(self, obj: dict, link: str | None, *, link_field: str | None = None) -> None:
        value_key = next((k for k in RESULT_VALUE_KEYS if k in obj), None)
        value = obj.get(value_key) if value_key else None
        if link is not None and link in self.shadowed:
            self._unplaced("result of a call not counted", f"call {link!r}")
            return
        step = self._match(link, obj)
        if step is None and link is not None and link in self.known_ids:
            self.read_by.copies += 1  # the result of a call already answered, sent again
            return
        if step is None:
            what = f"call {link!r}" if link is not None else "no call id"
            self._unplaced("result matching no call", what)
            return
        flag = _explicit_error(obj, value_key=value_key or "")
        error = flag if flag is not None else _text_error(value)
        self._settle(step, value, error=error)
        self.batch_id = None  # a call after a result is a new turn, not one of a batch
        used = link_field or next((k for k in LINK_KEYS if str(obj.get(k)) == link), None)
        self.read_by.count(self.read_by.result_links, used or "order")

    def _match(self, link: str | None, obj: dict) -> Step | None:
        if link is not None:
            waiting = self.open.get(link)
            return self._take(waiting[0]) if waiting else None
        wanted = _tool_name(obj)
        for step in self.batch:
            if step.seq not in self.answered and (wanted is None or step.tool == wanted[1]):
                return self._take(step)
        return None

    def _take(self, step: Step) -> Step:
        for waiting in self.open.values():
            if step in waiting:
                waiting.remove(step)
        return step

    def _settle(self, step: Step, result: Any, *, error: bool) -> None:
        self.answered.add(step.seq)
        step.result = clip_json(result, self.limits)
        step.status = "error" if error else "ok"

    def _unplaced(self, reason: str, what: str) -> None:
        self.read_by.count(self.read_by.unplaced, reason)
        self.skips.note(f"{self.source}{self.where}: {reason} ({what}); not placed")

    def _drop_abandoned_branches(self) -> None:
        """Keep only the live branch's calls where a chain of records forks (see the rules)."""
        chained = sum(
            1 for (_, parent, _, _), before in zip(self.tree[1:], self.tree, strict=False)
            if parent is not None and parent == before[0]
        )  # fmt: skip
        linked = sum(1 for _, parent, _, _ in self.tree if parent is not None)
        if not linked or chained * 2 < linked:
            return  # not a chain of turns (a span tree, say): siblings are no branches
        children: dict[str | None, list[str]] = {}
        ranges: dict[str, list[tuple[int, int]]] = {}
        for own, parent, first, end in self.tree:
            if own not in ranges:
                children.setdefault(parent, []).append(own)  # type: ignore[arg-type]
            ranges.setdefault(own, []).append((first, end))  # type: ignore[arg-type]
        steps = self.run.steps

        def subtree(root: str) -> list[str]:
            found, stack, seen = [], [root], set()
            while stack:
                node = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                found.append(node)
                stack.extend(children.get(node, []))
            return found

        def holds_calls(nodes: list[str]) -> bool:
            return any(
                steps[i].kind == "tool_call"
                for node in nodes
                for first, end in ranges[node]
                for i in range(first, end)
            )

        live: list[str] = []
        node: str | None = self.tree[-1][0]
        parents = {own: parent for own, parent, _, _ in self.tree}
        while node is not None and node in parents and node not in live:
            live.append(node)
            node = parents[node]
        on_path = set(live)
        dropped: set[int] = set()
        for node in live:
            for child in children.get(node, []):
                if child in on_path:
                    continue
                nodes = subtree(child)
                if holds_calls(nodes):
                    for each in nodes:
                        for first, end in ranges[each]:
                            dropped.update(range(first, end))
        if not dropped:
            return
        for index in sorted(dropped):
            if steps[index].kind == "tool_call":
                self.calls -= 1
                self._unplaced(
                    f"call on an abandoned branch (a `{self.parent_field}` fork off the live "
                    "branch)",
                    f"tool {steps[index].tool!r}",
                )
        self.run.steps = [step for index, step in enumerate(steps) if index not in dropped]
        for seq, step in enumerate(self.run.steps):
            step.seq = seq

    def finish(self) -> Run:
        run = self.run
        if self.tree:
            self._drop_abandoned_branches()
        run.metadata["read_by"] = self.read_by.as_metadata()
        run.metadata["read_by"]["summary"] = self.read_by.summary()
        self.skips.apply(run)
        return finish_run(run)


class ListState:
    """One message list being read: whether it re-sends messages already read.

    A list whose first message was read before (in an earlier list of the run) re-sends that
    context; each of its messages is skipped while it has not occurred more often in this
    list than in any earlier one, so a message the agent really repeated still counts.
    """

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.first = True
        self.resent = False
        self.counts: dict[bytes, int] = {}

    def is_copy(self, item: Any) -> bool:
        if not _is_message_like(item):
            self.first = False
            return False
        seen = self.builder.seen
        mark = _fingerprint(item)
        if self.first:
            self.resent = mark in seen
            self.first = False
        times = self.counts.get(mark, 0) + 1
        self.counts[mark] = times
        copy = self.resent and times <= seen.get(mark, 0)
        if times > seen.get(mark, 0):
            seen[mark] = times
        if copy:
            self.builder.read_by.copies += 1
        return copy


def first_message_list(value: Any, depth: int = 0, max_depth: int = 8) -> list | None:
    """The first list of messages nested in a record (not the record itself), if any."""
    if depth > max_depth or _is_message_like(value):
        return None
    if isinstance(value, list):
        if depth > 0 and value and _is_message_like(value[0]):
            return value
        items = value
    elif isinstance(value, dict):
        items = list(value.values())
    else:
        return None
    for item in items:
        found = first_message_list(item, depth + 1, max_depth)
        if found is not None:
            return found
    return None


# --- reading a file


def _records(stream: IO[bytes], *, source: str, limits: Limits, skips: Skips):  # type: ignore[no-untyped-def]
    """(where, value) for each JSONL line, or each outermost array item of a document."""
    if looks_like_jsonl(stream_head(stream)):
        reader = JsonlReader(stream, source=source, limits=limits, skips=skips)
        for line, value in reader:
            if isinstance(value, list) and value and not _is_message_like(value[0]):
                for index, item in enumerate(value):  # a line holding an array of records
                    yield f":{line}[{index}]" if line > 1 else f":[{index}]", item
            else:
                yield f":{line}", value
        if reader.valid <= 0:
            reader.check_not_empty()
        return
    start = first_byte(stream)
    if not start:
        raise TraceError("empty file", source=source)
    if start not in (b"{", b"["):
        raise TraceError("not JSON: generic reads JSON or JSONL files only", source=source, line=1)
    yield from _array_items(stream, source=source, limits=limits)


def _array_items(stream: IO[bytes], *, source: str, limits: Limits):  # type: ignore[no-untyped-def]
    """The items of the outermost arrays of a JSON document, built one at a time (ijson).

    Objects outside any array are wrappers: walked through, not kept. A scalar item is
    passed over. Each item comes with where it is: `messages[3]`, `[0]`.
    """
    import ijson

    guard = DepthGuard(stream, source=source, max_depth=document_depth(limits))
    builder: Any = None
    depth = 0  # nesting inside the item being built
    stack: list[list] = []  # open containers outside items: ["map"|"array", key or index]
    try:
        for prefix, event, value in ijson.parse(guard, use_float=True):
            if builder is not None:
                builder.event(event, value)
                if event in ("start_map", "start_array"):
                    depth += 1
                elif event in ("end_map", "end_array"):
                    depth -= 1
                if depth == 0:
                    yield f": {_where(prefix, stack)}", builder.value
                    builder = None
                continue
            if event == "map_key":
                stack[-1][1] = value
                continue
            in_array = bool(stack) and stack[-1][0] == "array"
            if event in ("end_map", "end_array"):
                stack.pop()
                continue
            if in_array:
                stack[-1][1] += 1
                if event in ("start_map", "start_array"):
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                    depth = 1
                continue
            if event == "start_map":
                stack.append(["map", None])
            elif event == "start_array":
                stack.append(["array", -1])
    except ijson.JSONError as exc:
        raise guard.error(exc) from None


def _where(prefix: str, stack: list[list]) -> str:
    keys = [str(key) for kind, key in stack[:-1] if kind == "map" and key is not None]
    return f"{'.'.join(keys)}[{stack[-1][1]}]" if stack else prefix


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the runs found heuristically (see the module docstring); fail when none is."""
    base = os.path.basename(source) or "run"
    skips = Skips()  # bad lines: counted on the next run yielded
    current: Builder | None = None
    held: Run | None = None
    previous_list: list[bytes] = []
    runs = 0
    last_reason = ""
    events = False  # the run holds records that are single messages or events

    def close(builder: Builder | None) -> Run | None:
        nonlocal last_reason
        if builder is None:
            return None
        if builder.calls and not builder.typed_unreadable:
            return builder.finish()
        last_reason = _why_none(builder)
        if builder.run.steps:
            skips.note(f"{source}: run {builder.run.id!r}: no tool call found ({last_reason})")
        return None

    for where, value in _records(stream, source=source, limits=limits, skips=skips):
        conversation = first_message_list(value)
        if conversation is not None:
            marks = [_fingerprint(m) for m in conversation if isinstance(m, dict)]
            continues = (
                current is not None
                and (
                    events  # a list inside a file of events: a checkpoint or context, same run
                    or (len(previous_list) >= 2 and marks[: len(previous_list)] == previous_list)
                )
            )
            previous_list = marks
            if not continues:
                done = close(current)
                current = _builder(f"{base}{where.replace(' ', '')}", limits, source)
                if done is not None:
                    if held is not None:
                        yield _with_skips(held, skips)
                    held, runs = done, runs + 1
        elif current is None:
            current = _builder(base, limits, source)
        before = len(current.run.steps)  # type: ignore[union-attr]
        current.record(value, where)  # type: ignore[union-attr]
        if conversation is None and len(current.run.steps) > before:  # type: ignore[union-attr]
            events = True
    done = close(current)
    if done is not None:
        if held is not None:
            yield _with_skips(held, skips)
        held, runs = done, runs + 1
    if held is None:
        if skips.first is not None and current is None:
            raise skips.first
        reason = last_reason or _why_none(current)
        raise TraceError(f"generic found no tool call: {reason}", source=source)
    if runs == 1:
        held.id = held.name = base
    yield _with_skips(held, skips)


WHERE_LINE = re.compile(r":(\d+)")  # where a JSONL record is: ":<line>" or ":<line>[i]"


def _builder(run_id: str, limits: Limits, source: str) -> Builder:
    return Builder(Run(id=run_id, format=name), limits=limits, source=source)


def _with_skips(run: Run, skips: Skips) -> Run:
    skips.apply(run)
    skips.count, skips.warnings = 0, []
    return run


def _why_none(builder: Builder | None) -> str:
    if builder is None:
        return "the file holds no JSON object"
    unplaced = builder.read_by.unplaced
    needed = (
        "an object with a tool name (name, tool_name, toolName, tool, function.name) and "
        "arguments (arguments, args, input, parameters, tool_input) or a call type (tool_use, "
        "tool_call, function_call)"
    )
    if unplaced:
        detail = "; ".join(f"{count} {reason}" for reason, count in sorted(unplaced.items()))
        if builder.typed_unreadable and builder.calls:
            return (
                f"it found {builder.calls} calls, but the file also types objects as tool "
                f"calls that it cannot read ({detail}), so the calls it found may be neither "
                "all of them nor their only description"
            )
        return f"it would need {needed}; found instead: {detail}"
    return f"no object has a tool name with arguments; it would need {needed}"


# --- detection (offered by name only: the registry never picks generic by itself)


def claim(sample: Sample) -> Claim:
    """Score what a heuristic read of the first records would find (0 when no call)."""
    if sample.layout not in ("jsonl", "json"):
        return Claim.no("not JSON or JSONL")
    builder = Builder(Run(id="sample", format=name), limits=Limits(), source="")
    values = [sample.document] if sample.layout == "json" else sample.records
    try:
        for value in values:
            builder.record(value, "")
    except TraceError:
        pass
    if not builder.calls or builder.typed_unreadable:
        return Claim.no(_why_none(builder))
    read_by = builder.read_by
    fields = ", ".join(sorted(read_by.call_fields))
    links = sum(read_by.result_links.values())
    how = ", ".join(sorted(read_by.result_links)) or "none"
    unplaced = sum(read_by.unplaced.values())
    reason = (
        f"found {builder.calls} tool-call-like object{'s' if builder.calls != 1 else ''} "
        f"({fields}), {links} result{'s' if links != 1 else ''} linked by {how}"
        + (
            f"; {unplaced} object{'s' if unplaced != 1 else ''} could not be placed"
            if unplaced
            else ""
        )
    )
    return Claim(0.3 if not unplaced else 0.2, reason)
