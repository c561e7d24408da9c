"""Generic tree JSON: nested nodes with `children` (ThinkNode/ToolNode-style search trees).

Accepted shapes: one root node object (one run), a top-level array of root nodes (one run
each), or JSONL with one root per line (one run each). A root may be wrapped as `{"root":
node}` or `{"tree": node}`.

Node -> step, parents before children, children in order (then stably by start time when the
nodes have one):
- type from `type` | `kind` | `node_type`, lower-cased, without a trailing "node"
  (ThinkNode -> think): tool/tool_call/action/function/observation -> tool_call; think/thought/
  reasoning/plan/reflection -> reasoning; llm/assistant/message/response/answer -> assistant;
  user/human/task/query -> user; anything else (agent, root, chain, step) -> system with text =
  the node name. A node without a type that names a tool (`tool`, or `name` plus args) is a
  tool call.
- tool = `tool` | `tool_name` | `name`; args = `args` | `input` | `arguments` | `parameters`
  (JSON text parsed); result = `result` | `output` | `observation`; text = `text` | `thought` |
  `content` | `message` | `name`.
- id = the node's `id` (text), else a path id (`0`, `0.1`, `0.1.2`); a repeated id gets
  "#2", "#3" so every step has its own; parent_id = the parent node's id. A root's own
  `parent_id`/`parent` is kept: a file that starts mid-tree has roots whose parent is not in
  the file, and the model treats those as roots.
- Errors are explicit: `status` in error/failed/failure, a truthy `error`, or `success: false`
  -> "error" (a failed node without a result gets the error as its result). Text is not
  inspected.
- Reading streams: a file that is one root object is walked event by event (only each
  node's own fields are built; a node becomes its step when its object ends, ids are given
  in pre-order at the end), an array of roots root by root, JSONL line by line.
- Tree depth is limited only by max_steps (nodes are walked without recursion); the file's
  JSON nesting may reach 8 x max_depth, deeper files are refused; node values nested deeper
  than max_depth are cut with a marker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from .content import parse_json_text, parse_time
from .detect import Claim, Sample, share
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, check_step_limit, finish_run, with_skips
from .reading import (
    DepthGuard,
    JsonlReader,
    Limits,
    build_value,
    clip_json,
    clip_strings,
    first_byte,
    head_values,
    iter_document,
    looks_like_jsonl,
    skip_value,
    stream_head,
)

name = "tree"
label = "Generic tree JSON (nodes with children)"

KINDS = {
    "tool": "tool_call",
    "toolcall": "tool_call",
    "action": "tool_call",
    "function": "tool_call",
    "functioncall": "tool_call",
    "observation": "tool_call",
    "think": "reasoning",
    "thought": "reasoning",
    "thinking": "reasoning",
    "reasoning": "reasoning",
    "plan": "reasoning",
    "reflection": "reasoning",
    "llm": "assistant",
    "assistant": "assistant",
    "message": "assistant",
    "response": "assistant",
    "answer": "assistant",
    "user": "user",
    "human": "user",
    "task": "user",
    "query": "user",
}
TYPE_KEYS = ("type", "kind", "node_type")
ARG_KEYS = ("args", "input", "arguments", "parameters")
RESULT_KEYS = ("result", "output", "observation")
TEXT_KEYS = ("text", "thought", "content", "message", "name")
WRAPPERS = ("root", "tree")
ERROR_STATUS = {"error", "failed", "failure", "fail"}
# every field node_step and the walk read: the streamed walk builds these and skips the rest
TIME_KEYS = ("started_at", "start_time", "timestamp", "ts", "ended_at", "end_time")
TOKEN_KEYS = ("tokens_in", "input_tokens", "prompt_tokens", "tokens_out", "output_tokens")
NODE_FIELDS = frozenset(
    (*TYPE_KEYS, *ARG_KEYS, *RESULT_KEYS, *TEXT_KEYS, *WRAPPERS, *TIME_KEYS, *TOKEN_KEYS)
    + ("completion_tokens", "cost", "tool", "tool_name", "status", "error", "success", "id")
    + ("run_id", "parent_id", "parent")
)


def _node_type(node: dict) -> str:
    for key in TYPE_KEYS:
        if isinstance(node.get(key), str):
            kind = "".join(c for c in node[key].lower() if c.isalpha())
            return kind.removesuffix("node") or kind
    return ""


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict) and "children" not in value:
        for key in WRAPPERS:
            if isinstance(value.get(key), dict):
                return value[key]
    return value


def _is_node(value: Any) -> bool:
    value = _unwrap(value)
    return (
        isinstance(value, dict)
        and isinstance(value.get("children"), list)
        and (any(k in value for k in TYPE_KEYS) or "name" in value or "tool" in value)
    )


def sniff(head: bytes) -> bool:
    """A node object (or array of them) with a `children` list and a type, name or tool."""
    values = head_values(head, max_lines=2)
    if not values:
        return False
    first = values[0]
    if isinstance(first, list):
        first = first[0] if first else None
    return _is_node(first)  # kept: test_registry and others call it


def claim(sample: Sample) -> Claim:
    """Node objects (a root, an array or JSONL of roots) with a `children` list and a type,
    name or tool; more when the types are ones this reader knows (ThinkNode, ToolNode, …)."""
    roots = [_unwrap(r) for r in sample.records]
    if sample.layout == "json" and isinstance(sample.top, dict):
        roots = [_unwrap(sample.top)]
    roots = [r for item in roots for r in (item if isinstance(item, list) else [item])]
    if not roots:
        return Claim.no("no JSON object or array")
    fit = share(roots, _is_node)
    if fit == 0:
        return Claim.no("no node object with a `children` list and a `type`, `name` or `tool`")
    nodes = [r for r in roots if _is_node(r)]
    nodes += [c for r in nodes for c in r["children"][:20] if isinstance(c, dict)]
    known = share(nodes, lambda n: _node_type(n) in KINDS)
    score = 0.3 + 0.15 * fit + 0.15 * known
    return Claim(
        round(score, 2),
        f"node objects with `children` ({fit:.0%} of the records; {known:.0%} of a known type)",
    )


# --- nodes to steps


def _kind(node: dict) -> str:
    kind = KINDS.get(_node_type(node))
    if kind:
        return kind
    if not _node_type(node) and (
        "tool" in node or ("name" in node and _first(node, ARG_KEYS) is not None)
    ):
        return "tool_call"
    return "system"


def _first(node: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if node.get(key) is not None:
            return node[key]
    return None


def _failed(node: dict) -> bool:
    status = node.get("status")
    return (
        (isinstance(status, str) and status.lower() in ERROR_STATUS)
        or bool(node.get("error"))
        or node.get("success") is False
    )


def _number(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def node_step(node: dict, *, id: str, parent_id: str | None, limits: Limits) -> Step:
    """Return the step for one node (its children are handled by the walk)."""
    kind = _kind(node)
    step = Step(
        seq=0,
        kind=kind,
        id=id,
        parent_id=parent_id,
        started_at=parse_time(_first(node, ("started_at", "start_time", "timestamp", "ts"))),
        ended_at=parse_time(_first(node, ("ended_at", "end_time"))),
        tokens_in=_number(_first(node, ("tokens_in", "input_tokens", "prompt_tokens"))),
        tokens_out=_number(_first(node, ("tokens_out", "output_tokens", "completion_tokens"))),
        cost=_number(node.get("cost")),
    )
    error = _failed(node)
    if kind == "tool_call":
        tool = _first(node, ("tool", "tool_name", "name"))
        step.tool = str(tool)[:200] if tool else "(unknown)"
        step.args = clip_json(parse_json_text(_first(node, ARG_KEYS)), limits)
        result = _first(node, RESULT_KEYS)
        if result is None and error and node.get("error") not in (None, True):
            result = node["error"]
        step.result = clip_json(result, limits)
        step.status = "error" if error else "ok"
    else:
        text = _first(node, TEXT_KEYS)
        step.text = clip_strings(
            text if isinstance(text, str) or text is None else str(text), limits.max_value_chars
        )
        step.status = "error" if error else "ok"
    return step


def run_from_root(root: Any, *, run_id: str, source: str, limits: Limits) -> Run:
    """Return the run of one root node, walking the tree without recursion."""
    root = _unwrap(root)
    if not isinstance(root, dict):
        raise TraceError(f"a root node must be an object, not {type(root).__name__}", source=source)
    run = Run(id=str(root.get("run_id") or run_id), format=name)
    used: dict[str, int] = {}
    own_parent = _first(root, ("parent_id", "parent"))
    stack: list[tuple[Any, str, str | None]] = [
        (root, "0", None if own_parent is None else str(own_parent))
    ]
    while stack:
        node, path, parent_id = stack.pop()
        if not isinstance(node, dict):
            run.warnings.append(f"{source}: node {path} is not an object; skipped")
            run.skipped += 1
            continue
        step_id = _unique_id(node.get("id"), path, used)
        step = node_step(node, id=step_id, parent_id=parent_id, limits=limits)
        add_step(run, step, limits=limits, source=source)
        children = node.get("children") or []
        if not isinstance(children, list):
            children = [children]
        for index in range(len(children) - 1, -1, -1):
            stack.append((children[index], f"{path}.{index}", step_id))
    _order(run)
    return run


def _unique_id(given: Any, path: str, used: dict[str, int]) -> str:
    step_id = path if given is None or isinstance(given, dict | list) else str(given)
    count = used.get(step_id, 0) + 1
    used[step_id] = count
    return step_id if count == 1 else f"{step_id}#{count}"


def _order(run: Run) -> None:
    if any(step.started_at is not None for step in run.steps):
        last = float("-inf")
        keys = []
        for step in run.steps:
            last = step.started_at if step.started_at is not None else last
            keys.append(last)
        run.steps = [run.steps[i] for i in sorted(range(len(run.steps)), key=keys.__getitem__)]
    for seq, step in enumerate(run.steps):
        step.seq = seq


# --- reading the file


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per root node (see the module docstring)."""
    base = os.path.basename(source) or "run"
    skips = Skips()
    if looks_like_jsonl(stream_head(stream)):
        roots = _jsonl_roots(stream, base=base, source=source, limits=limits, skips=skips)
    else:
        roots = _document_roots(stream, base=base, source=source, limits=limits)

    def runs() -> Iterator[Run]:
        for run_id, root, line in roots:
            try:
                if not isinstance(root, Run):  # a single root is already read as it streamed
                    root = run_from_root(root, run_id=run_id, source=source, limits=limits)
                yield finish_run(root)
            except TooManySteps:
                raise
            except TraceError as exc:
                skips.add(TraceError(exc.reason, source=source, line=line, field=exc.field))

    yield from with_skips(runs(), skips, source=source, single_id=(f"{base}:1", base))


def _jsonl_roots(
    stream: IO[bytes], *, base: str, source: str, limits: Limits, skips: Skips
) -> Iterator[tuple[str, Any, int | None]]:
    reader = JsonlReader(
        stream, source=source, limits=limits, skips=skips, max_depth=_file_depth(limits)
    )
    for line, value in reader:
        if isinstance(value, list):  # a line holding an array of roots
            for index, root in enumerate(value):
                yield f"{base}:{line}#{index}", root, line
        else:
            yield f"{base}:{line}", value, line


def _file_depth(limits: Limits) -> int:
    """Return the JSON nesting a tree file may reach: every tree level is two JSON levels
    (node, children), so trees get 8 x max_depth."""
    return limits.max_depth * 8


def _document_roots(
    stream: IO[bytes], *, base: str, source: str, limits: Limits
) -> Iterator[tuple[str, Any, int | None]]:
    start = first_byte(stream)
    if not start:
        raise TraceError("empty file", source=source)
    depth = _file_depth(limits)
    if start == b"{":
        yield base, _stream_root(stream, run_id=base, source=source, limits=limits), None
        return
    if start != b"[":
        raise TraceError("expected a JSON object or array of tree nodes", source=source, line=1)
    for index, value in enumerate(
        iter_document(stream, "item", source=source, limits=limits, max_depth=depth)
    ):
        yield f"{base}#{index}", value, None


# --- one root object, read as it streams


@dataclass(slots=True)
class _Open:
    """A node whose object is still being read."""

    pos: int  # its place in pre-order
    path: str
    fields: dict[str, Any] = field(default_factory=dict)
    children: int = 0  # children seen so far
    in_children: bool = False  # reading its `children` array
    wrapper: bool = False  # a `{"root": node}` wrapper, not a node


def _stream_root(stream: IO[bytes], *, run_id: str, source: str, limits: Limits) -> Run:
    """Return the run of a file that is one root node, read event by event.

    Only the nodes' own fields are built (children are walked, not built into the root), so
    a big tree is never held as JSON: each node becomes its step when its object ends. Ids
    are given in pre-order at the end, as run_from_root gives them.
    """
    import ijson

    reader = DepthGuard(stream, source=source, max_depth=_file_depth(limits))
    events = ijson.basic_parse(reader, use_float=True)
    try:
        return _walk(events, run_id=run_id, source=source, limits=limits)
    except StopIteration:
        raise TraceError("invalid JSON: premature EOF (truncated file?)", source=source) from None
    except ijson.JSONError as exc:
        raise reader.error(exc) from None


def _walk(events: Iterator[tuple[str, Any]], *, run_id: str, source: str, limits: Limits) -> Run:
    run = Run(id=run_id, format=name)
    nodes: list[list[Any]] = []  # pre-order: [step, given id, path, parent position]
    stack: list[_Open] = []

    def open_node(path: str, parent: int | None) -> None:
        # a node's step is built when the node ends; it counts from when the node begins
        check_step_limit(len(nodes) + 1, run.id, limits=limits, source=source)
        nodes.append([None, None, path, parent])
        stack.append(_Open(len(nodes) - 1, path))

    event, _ = next(events)
    if event != "start_map":
        raise TraceError("a root node must be an object", source=source)
    open_node("0", None)
    while stack:
        node = stack[-1]
        event, value = next(events)
        if node.in_children:
            if event == "end_array":
                node.in_children = False
            elif event == "start_map":
                node.children += 1
                open_node(f"{node.path}.{node.children - 1}", node.pos)
            else:
                skip_value(event, events)
                node.children += 1
                run.warnings.append(
                    f"{source}: node {node.path}.{node.children - 1} is not an object; skipped"
                )
                run.skipped += 1
            continue
        if event == "end_map":
            stack.pop()
            if not node.wrapper:
                step = node_step(node.fields, id="", parent_id=None, limits=limits)
                nodes[node.pos][0], nodes[node.pos][1] = step, node.fields.get("id")
                if node.pos == 0:
                    own = _first(node.fields, ("parent_id", "parent"))
                    nodes[0][3] = own
                    run.id = str(node.fields.get("run_id") or run.id)
            continue
        key = value
        event, value = next(events)
        if node.wrapper:
            skip_value(event, events)
        elif key == "children" and event == "start_array":
            node.in_children = True
        elif key == "children" and event == "start_map":  # one child, not in a list
            node.children += 1
            open_node(f"{node.path}.0", node.pos)
        elif (
            key in WRAPPERS and event == "start_map" and node.pos == 0 and len(stack) == 1
            and not node.children and len(nodes) == 1
        ):  # fmt: skip
            node.wrapper = True  # {"root": node}: the node is inside, the rest is skipped
            nodes.clear()
            open_node("0", None)
        elif key in NODE_FIELDS:
            node.fields[key] = build_value(event, value, events, None)
        else:
            skip_value(event, events)
    for _ in events:  # trailing content after the root is an error
        pass
    used: dict[str, int] = {}
    ids: list[str] = []
    for step, given, path, parent in nodes:
        step.id = _unique_id(given, path, used)
        ids.append(step.id)
        if isinstance(parent, int) and step is not nodes[0][0]:
            step.parent_id = ids[parent]
        else:
            step.parent_id = None if parent is None else str(parent)
        add_step(run, step, limits=limits, source=source)
    _order(run)
    return run
