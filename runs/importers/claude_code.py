"""Claude Code session JSONL (`~/.claude/projects/<project>/<session>.jsonl`, sub-agents in
`<session>/subagents/agent-<id>.jsonl`).

Mapping, one run per file (id = `sessionId`):
- Assistant records hold ONE content block each; records with the same `message.id` are one
  API message: its `text` blocks -> one `assistant` step, its `thinking` blocks -> one
  `reasoning` step, each `tool_use` -> a `tool_call` step (id = `toolu_…`, tool = `name`,
  args = `input`, `batch_id` = `message.id`).
- User records: `tool_result` blocks fill the call with the same `tool_use_id` (result = the
  text of `content`, `is_error: true` -> status error, `ended_at` = record time); text -> a
  `user` step, but `isMeta: true` records (hook feedback, command caveats: injected, not
  typed by the person) -> `system` steps, so they do not start a new user turn.
- A `tool_result` whose call is not in the file -> a failed-or-ok `tool_call` step of its
  own, tool `"(unknown)"`. A repeated record `uuid` is skipped; a repeated `tool_use` id in
  a later message gets a `#n` suffix so step ids stay unique.
- `system` records -> `system` steps (`content`); `queue-operation`, `file-history-snapshot`,
  `summary` and unknown types are skipped and counted in `metadata["skipped_records"]`.
- Sub-agents: `isSidechain: true` records go under the `Task`/`Agent` call that started them
  (parent_id = that call's step id; matched by the prompt text, else the one unanswered Task
  call); when such a link exists, main-line steps are chained (parent_id = previous main
  step) so the sub-agent is a sibling branch. Without a link the run stays linear.
- Edit/retry branches (`parentUuid` forks): only the LIVE branch is imported. The live path is
  the newest main-line user/assistant record (the last one written) and its ancestors by
  `parentUuid` (or `logicalParentUuid` across a compaction boundary). A user/assistant
  record whose parent is on the live path but which is not itself on it starts an abandoned
  branch (an edited message or a regenerated response); it and everything hanging below it
  are dropped and counted in `metadata["abandoned_records"]` (user/assistant/system records
  only; the key is absent when nothing was dropped). Not branches, so kept: the records of
  the same API message (`message.id`) as a live one and tool results of kept calls (Claude
  Code chains parallel results to their own `tool_use` record, a fork that is no edit);
  progress/system records beside the path; records after the newest message; sub-agent
  (sidechain) records hanging off the main line; records whose parent is null or not in the
  file (a root, a file starting mid-tree, an old restart): with no common parent there is no
  fork to tell, so two first messages that both have parent null are both kept. A session
  without forks imports exactly as a plain linear file.
- Sub-agent files (`agent-<id>.jsonl`, every message `isSidechain: true`; the first
  `parentUuid` may be null or point outside the file): imported on their own as one linear
  run, the branch rule applied among their own records; id `<sessionId>/agent-<agentId>`,
  name `agent-<agentId>` (agent id from the records' `agentId`, else the file name);
  `metadata["agent_id"]` is set.
- Tokens from `message.usage` (last record of the message): tokens_in = input +
  cache_creation + cache_read input tokens, tokens_out = output tokens, on the first step of
  the message. Times from `timestamp`. metadata: model, session_id, version, cwd, git_branch.
- Errors are explicit only (`is_error`); no text rules.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from .builders import finish_run, set_result, text_step, tool_step
from .content import content_text, number, parse_time
from .reading import JsonlReader, Limits, head_values

name = "claude-code"
label = "Claude Code session JSONL"

RECORD_TYPES = {
    "user",
    "assistant",
    "system",
    "queue-operation",
    "summary",
    "file-history-snapshot",
}
TASK_TOOLS = {"Task", "Agent"}
AGENT_FILE = re.compile(r"agent-([^./\\]+)\.jsonl")


def sniff(head: bytes) -> bool:
    """JSONL whose records carry Claude Code's `sessionId` plus `uuid`/`parentUuid` or a
    queue/summary record type."""
    for obj in head_values(head):
        if not isinstance(obj, dict) or obj.get("type") not in RECORD_TYPES:
            return False
        if obj.get("type") == "summary" and "leafUuid" in obj:
            return True
        if "sessionId" in obj and ("parentUuid" in obj or "uuid" in obj):
            return True
        if obj.get("type") != "queue-operation" or "sessionId" not in obj:
            return False
    return False


@dataclass
class _Message:
    """Steps built so far from the records of one assistant API message."""

    text: Step | None = None
    thinking: Step | None = None
    first: Step | None = None
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass
class _State:
    limits: Limits
    steps: list[Step] = field(default_factory=list)
    messages: dict[str, _Message] = field(default_factory=dict)
    calls: dict[str, Step] = field(default_factory=dict)  # tool_use id -> newest call step
    id_counts: Counter = field(default_factory=Counter)
    answered: set[str] = field(default_factory=set)
    uuids: set[str] = field(default_factory=set)
    skipped: Counter = field(default_factory=Counter)
    task_of: dict[str, str] = field(default_factory=dict)  # sidechain record uuid -> Task id
    branch: dict[int, str | None] = field(default_factory=dict)  # id(step) -> Task id
    meta: dict[str, Any] = field(default_factory=dict)


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a session (or sub-agent) file."""
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    records = [record for _, record in reader]
    reader.check_not_empty()
    abandoned = _abandoned(records)
    state = _State(limits)
    dropped = 0
    for position, record in enumerate(records):
        if position in abandoned:
            dropped += record.get("type") in ("user", "assistant", "system")
            continue
        _record(state, record)
    _usage_to_steps(state)
    _link_sidechains(state)
    meta = state.meta
    if state.skipped:
        meta["skipped_records"] = dict(state.skipped)
    if dropped:
        meta["abandoned_records"] = dropped
    run_id = str(meta.get("session_id") or os.path.basename(source) or "run")
    run_name = str(meta.get("slug") or "")
    agent_id = _subagent_id(records, source)
    if agent_id is not None:
        meta["agent_id"] = agent_id
        run_id = f"{meta['session_id']}/agent-{agent_id}" if meta.get("session_id") else agent_id
        run_name = f"agent-{agent_id}"
    run = Run(id=run_id, format=name, steps=state.steps, metadata=meta, name=run_name)
    yield finish_run(reader.skips.apply(run), source=source, limits=limits)


def _is_message(record: dict[str, Any]) -> bool:
    return record.get("type") in ("user", "assistant")


def _subagent_id(records: list[dict[str, Any]], source: str) -> str | None:
    """Return the agent id of a sub-agent file (all its messages are sidechain), else None."""
    messages = [r for r in records if _is_message(r)]
    if not messages or not all(r.get("isSidechain") is True for r in messages):
        return None
    for record in messages:
        if isinstance(record.get("agentId"), str) and record["agentId"]:
            return record["agentId"]
    match = AGENT_FILE.match(os.path.basename(source))
    if match:
        return match.group(1)
    session = next((r.get("sessionId") for r in messages if r.get("sessionId")), None)
    return str(session) if session else "agent"


def _parent_uuid(record: dict[str, Any]) -> str | None:
    parent = record.get("parentUuid")
    if not isinstance(parent, str) or not parent:
        parent = record.get("logicalParentUuid")  # a compaction boundary links back this way
    return parent if isinstance(parent, str) and parent else None


def _abandoned(records: list[dict[str, Any]]) -> set[int]:
    """Return the positions of the records on abandoned edit/retry branches (see docstring)."""
    by_uuid: dict[str, int] = {}
    for position, record in enumerate(records):
        uuid = record.get("uuid")
        if isinstance(uuid, str) and uuid not in by_uuid:
            by_uuid[uuid] = position
    firsts = set(by_uuid.values())
    messages = [p for p in sorted(firsts) if _is_message(records[p])]
    if not messages:
        return set()
    main_side = not any(not records[p].get("isSidechain") for p in messages)
    main = [p for p in messages if bool(records[p].get("isSidechain")) == main_side]
    live: set[int] = set()  # the live path: the newest main-line message and its ancestors
    position: int | None = main[-1]
    while position is not None and position not in live:
        live.add(position)
        position = by_uuid.get(_parent_uuid(records[position]) or "")
    forks = {by_uuid.get(_parent_uuid(records[p]) or "") for p in live}  # have a live child
    live_messages = {_message_id(records[p]) for p in live if _is_message(records[p])} - {None}
    status: dict[int, Any] = {}  # "live" | "kept" | "abandoned" | anchor: position of a live one
    kept_calls: set[str] = set()
    dropped: set[int] = set()
    for position in sorted(firsts):
        record = records[position]
        state = _branch_status(records, position, live, status, by_uuid, forks)
        if state == "abandoned" and _rescued(record, live_messages, kept_calls):
            state = "kept"
        status[position] = state
        if state == "abandoned":
            dropped.add(position)
        else:
            kept_calls.update(_tool_use_ids(record))
    return dropped


def _branch_status(
    records: list[dict[str, Any]],
    position: int,
    live: set[int],
    status: dict[int, Any],
    by_uuid: dict[str, int],
    forks: set[int | None],
) -> Any:
    """Return the branch status of one record from its parent's (parents come first)."""
    if position in live:
        return "live"
    record = records[position]
    parent = by_uuid.get(_parent_uuid(record) or "")
    if parent is None or parent not in status:
        return "kept"  # a root, or a parent outside the file (or written later): cannot tell
    parent_state = status[parent]
    if isinstance(parent_state, int):  # beside the live path: judge from the live record
        parent, parent_state = parent_state, "live"
    if parent_state != "live":
        return parent_state  # a branch's records share its fate
    if bool(record.get("isSidechain")) != bool(records[parent].get("isSidechain")):
        return "kept"  # a sub-agent starting from the main line
    if parent not in forks:
        return "kept"  # continues after the newest message (e.g. a closing system record)
    if not _is_message(record):
        return parent  # a progress/system record beside the live path: not a branch by itself
    return "abandoned"


def _message_id(record: dict[str, Any]) -> str | None:
    message = record.get("message")
    msg_id = message.get("id") if isinstance(message, dict) else None
    return msg_id if record.get("type") == "assistant" and isinstance(msg_id, str) else None


def _content(record: dict[str, Any]) -> list[Any]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _tool_use_ids(record: dict[str, Any]) -> list[str]:
    return [
        str(b["id"])
        for b in _content(record)
        if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use") and b.get("id")
    ]


def _rescued(record: dict[str, Any], live_messages: set[Any], kept_calls: set[str]) -> bool:
    """Off-path records that still belong to the live branch: another block of a live API
    message, or the result of a kept call (parallel results chain to their own tool_use)."""
    if record.get("type") == "assistant":
        return _message_id(record) in live_messages
    results = [
        b.get("tool_use_id")
        for b in _content(record)
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    return bool(results) and all(isinstance(r, str) and r in kept_calls for r in results)


def _record(state: _State, record: dict[str, Any]) -> None:
    kind = record.get("type")
    uuid = record.get("uuid")
    if isinstance(uuid, str):
        if uuid in state.uuids:
            state.skipped["duplicate"] += 1
            return
        state.uuids.add(uuid)
    _note_meta(state.meta, record)
    if kind == "assistant":
        _assistant(state, record)
    elif kind == "user":
        _user(state, record)
    elif kind == "system":
        text = content_text(record.get("content"))
        _add(state, record, text_step("system", text, limits=state.limits, id=uuid))
    else:
        state.skipped[str(kind)] += 1


def _note_meta(meta: dict[str, Any], record: dict[str, Any]) -> None:
    meta.setdefault("agent", "claude-code")
    for key, target in (
        ("sessionId", "session_id"),
        ("version", "version"),
        ("cwd", "cwd"),
        ("gitBranch", "git_branch"),
        ("slug", "slug"),
    ):
        if record.get(key) and target not in meta:
            meta[target] = record[key]
    model = (
        (record.get("message") or {}).get("model") if record.get("type") == "assistant" else None
    )
    if isinstance(model, str) and model and not model.startswith("<"):
        meta.setdefault("model", model)


def _add(state: _State, record: dict[str, Any], step: Step) -> Step:
    step.started_at = step.started_at or parse_time(record.get("timestamp"))
    state.steps.append(step)
    state.branch[id(step)] = _task_for(state, record, step)
    return step


def _assistant(state: _State, record: dict[str, Any]) -> None:
    message = record.get("message") or {}
    msg_id = str(message.get("id") or record.get("uuid") or len(state.steps))
    entry = state.messages.setdefault(msg_id, _Message())
    if isinstance(message.get("usage"), dict):
        entry.usage = message["usage"]
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        step = _assistant_block(state, record, entry, msg_id, block)
        if step is not None and entry.first is None:
            entry.first = step


def _assistant_block(
    state: _State, record: dict[str, Any], entry: _Message, msg_id: str, block: dict[str, Any]
) -> Step | None:
    kind = block.get("type")
    limits = state.limits
    if kind in ("text", "thinking"):
        text = block.get("text") if kind == "text" else block.get("thinking")
        text = text if isinstance(text, str) else ""
        current = entry.text if kind == "text" else entry.thinking
        if current is not None:
            current.text = f"{current.text}\n{text}" if current.text else text
            return None
        step_kind, suffix = ("assistant", "") if kind == "text" else ("reasoning", "/thinking")
        step = _add(
            state,
            record,
            text_step(step_kind, text, limits=limits, id=msg_id + suffix, batch_id=msg_id),
        )
        if kind == "text":
            entry.text = step
        else:
            entry.thinking = step
        return step
    if kind in ("tool_use", "server_tool_use"):
        call_id = str(block.get("id") or f"{msg_id}/{len(state.steps)}")
        count = state.id_counts[call_id]
        state.id_counts[call_id] += 1
        unique = call_id if count == 0 else f"{call_id}#{count + 1}"
        step = tool_step(
            tool=str(block.get("name") or ""),
            args=block.get("input"),
            limits=limits,
            id=unique,
            batch_id=msg_id,
        )
        state.calls[call_id] = step  # the newest call with this id answers its results
        return _add(state, record, step)
    return None


def _user(state: _State, record: dict[str, Any]) -> None:
    content = (record.get("message") or {}).get("content")
    kind = "system" if record.get("isMeta") else "user"
    if isinstance(content, str):
        _add(state, record, text_step(kind, content, limits=state.limits, id=record.get("uuid")))
        return
    texts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            _tool_result(state, record, block)
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    if texts:
        _add(
            state,
            record,
            text_step(kind, "\n".join(texts), limits=state.limits, id=record.get("uuid")),
        )


def _tool_result(state: _State, record: dict[str, Any], block: dict[str, Any]) -> None:
    call_id = str(block.get("tool_use_id") or "")
    call = state.calls.get(call_id)
    result = block.get("content")
    result = content_text(result) if isinstance(result, list) else result
    ended = parse_time(record.get("timestamp"))
    if call is None or call.id in state.answered:
        call = _add(
            state,
            record,
            tool_step(
                tool="(unknown)",
                args={},
                limits=state.limits,
                id=f"{call_id}/result" if call_id else None,
            ),
        )
        state.skipped["result_without_call"] += 1
    state.answered.add(str(call.id))
    set_result(
        call, result, error=block.get("is_error") is True, limits=state.limits, ended_at=ended
    )


def _task_for(state: _State, record: dict[str, Any], step: Step) -> str | None:
    """Return the Task call id a sidechain record belongs to, when it can be told."""
    if not record.get("isSidechain"):
        return None
    uuid, parent = record.get("uuid"), record.get("parentUuid")
    task = state.task_of.get(parent) if isinstance(parent, str) else None
    if task is None:
        open_tasks = [
            s for s in state.calls.values() if s.tool in TASK_TOOLS and s.id not in state.answered
        ]
        prompt = step.text if step.kind == "user" else None
        matching = [s for s in open_tasks if prompt and (s.args or {}).get("prompt") == prompt]
        if matching:
            task = matching[-1].id
        elif len(open_tasks) == 1:
            task = open_tasks[0].id
    if task is not None and isinstance(uuid, str):
        state.task_of[uuid] = task
    return task


def _usage_to_steps(state: _State) -> None:
    for entry in state.messages.values():
        if entry.first is None or not entry.usage:
            continue
        usage = entry.usage
        parts = [
            number(usage.get(k))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        if any(p is not None for p in parts):
            entry.first.tokens_in = sum(p or 0 for p in parts)
        entry.first.tokens_out = number(usage.get("output_tokens"))


def _link_sidechains(state: _State) -> None:
    """Chain main-line steps and hang sub-agent steps under their Task call, if any link."""
    if not any(state.branch.get(id(step)) for step in state.steps):
        return
    for position, step in enumerate(state.steps):
        if step.id is None:
            step.id = f"step-{position}"
    last: dict[str | None, str | None] = {}
    for step in state.steps:
        task = state.branch.get(id(step))
        step.parent_id = last.get(task, task)
        last[task] = step.id
