"""Claude Code session JSONL (`~/.claude/projects/<project>/<session>.jsonl`, sub-agents in
`<session>/subagents/agent-<id>.jsonl`), 2.0 to 2.1.2xx.

Two kinds of records share a file (notes §3.5, §3.24):

- **Tree records** carry `uuid`, `parentUuid`, `sessionId`: `user`, `assistant`, `system`,
  `attachment`, `progress`. Every one of them is a link in the `parentUuid` chain (a user
  message may hang under an attachment, an attachment under a system record), so all of them
  are kept while the tree is built, whether or not they become steps.
- **Metadata records** have no `uuid`: `summary`, `custom-title`, `ai-title`, `agent-name`,
  `last-prompt`, `permission-mode`, `mode`, `queue-operation`, `file-history-snapshot`,
  `pr-link`, `worktree-state`, … They come first (a headless file starts with
  `queue-operation`, an interactive one with `permission-mode` or a snapshot, a resumed one
  with `summary` records pointing into another session), between messages, or last. They
  give no steps; they are counted in `metadata["metadata_records"]`, and the newest
  `custom-title` (else `ai-title`, else the `slug`) names the run.
- A record of a type this module does not know is tolerated (Claude Code adds types every
  release): counted in `metadata["skipped_records"]` and named once in a warning.
- A file without a single user or assistant message (metadata records only: an aborted
  start) fails with a TraceError that says so and lists what the file holds: a run with no
  steps would be an empty page in the runs list, and the import reports why nothing came.

Mapping, one run per file (id = `sessionId`):
- Assistant records hold ONE content block each; records with the same `message.id` are one
  API message: its `text` blocks -> one `assistant` step, its `thinking` blocks -> one
  `reasoning` step, each `tool_use` -> a `tool_call` step (id = `toolu_…`, tool = `name`,
  args = `input`, `batch_id` = `message.id`). A synthetic API-error message
  (`isApiErrorMessage: true`) is an assistant step with status "error". A record with
  `isAbortedMidStream: true` was cut off while streaming: its calls that never get a result
  did not run, so they end with status "error"; `metadata["aborted_messages"]` counts them.
- User records: `tool_result` blocks fill the call with the same `tool_use_id` (result = the
  text of `content`, `ended_at` = record time). The result is an error when `is_error` is
  true or when the record (or the block) has a `toolDenialKind` ("permission-rule",
  "user-rejected", "automode-blocked", "interrupted": the call was refused or cut off, even
  without `is_error`). Text -> a `user` step, but `isMeta: true` records (hook feedback,
  command caveats) and `isCompactSummary: true` ones (the summary that opens a compacted
  context) are injected, not typed by the person -> `system` steps, so they do not start a
  new user turn.
- A `tool_result` whose call is not in the file -> a failed-or-ok `tool_call` step of its
  own, tool `"(unknown)"`. A repeated record `uuid` is skipped. A repeated `tool_use` id is
  left to the kit's merge (`kit.finish_run`): the same call written again in its message,
  one copy answered, is one step; a call of a later message gets a `#n` suffix.
- `attachment` records are injected context (tool and skill listings, reminders, memory
  files), not steps, with two exceptions: `hook_blocking_error` (a hook refused a tool call,
  or rejected its outcome) makes the call named by `toolUseID` an error (its result, if it
  has none, is the hook's reason); one whose `toolUseID` names no call (a Stop hook) is a
  `system` step with status "error". `queued_command` (a prompt typed while the agent
  worked) is a `user` step (a `system` step when its `origin.kind` is not "human").
  The others (and a hook block that landed on its call) are counted in
  `metadata["context_records"]`.
- `system` records -> `system` steps when they say something: their `content`, or, for
  `api_error` / `error` / `api_refusal` / `level: "error"` records, the error (status
  "error", with the retry count); `compact_boundary` -> a system step ("Conversation
  compacted"); a `stop_hook_summary` with `hookErrors`. Bookkeeping without text
  (`turn_duration`, a clean `stop_hook_summary`) and `progress` records are counted in
  `metadata["context_records"]`.
- Sub-agents: `isSidechain: true` records go under the `Task`/`Agent` call that started them
  (parent_id = that call's step id; matched through the `parentUuid` chain, including the
  attachment and progress records on it, else by the prompt text, else the one unanswered
  Task call); when such a link exists, main-line steps are chained (parent_id = previous main
  step) so the sub-agent is a sibling branch. Without a link the run stays linear.
- Edit/retry branches (`parentUuid` forks): only the LIVE branch is imported. The live path is
  the newest main-line user/assistant record (the last one written) and its ancestors by
  `parentUuid` (or `logicalParentUuid` across a compaction boundary, whose `parentUuid` is
  null). A user/assistant record whose parent is on the live path but which is not itself on
  it starts an abandoned branch (an edited message or a regenerated response); it and
  everything hanging below it are dropped and counted in `metadata["abandoned_records"]`
  (user/assistant/system records only; the key is absent when nothing was dropped). Not
  branches, so kept: the records of the same API message (`message.id`) as a live one and
  tool results of kept calls (Claude Code chains parallel results to their own `tool_use`
  record, a fork that is no edit); progress/system/attachment records beside the path;
  records after the newest message; sub-agent (sidechain) records hanging off the main line;
  records whose parent is null or not in the file (a root, a file starting mid-tree, an old
  restart): with no common parent there is no fork to tell, so two first messages that both
  have parent null are both kept. A session without forks imports exactly as a plain linear
  file.
- Sub-agent files (`agent-<id>.jsonl`, every message `isSidechain: true`; the first
  `parentUuid` may be null or point outside the file): imported on their own as one linear
  run, the branch rule applied among their own records; id `<sessionId>/agent-<agentId>`,
  name `agent-<agentId>` (agent id from the records' `agentId`, else the file name);
  `metadata["agent_id"]` is set.
- Tokens from `message.usage` (last record of the message): tokens_in = input +
  cache_creation + cache_read input tokens, tokens_out = output tokens (its
  `output_tokens_details.thinking_tokens` is a part of them, not added), on the first step of
  the message. Times from `timestamp`. metadata: model, session_id, version, cwd, git_branch,
  entrypoint, title, permission_mode.
- Errors are explicit only (`is_error`, `toolDenialKind`, hook blocks, API error records):
  Claude Code flags every failed tool result itself (a non-zero Bash exit is `is_error:
  true`), so no text rules are applied; a result without the flag is a success.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from .content import content_text, number, parse_time
from .detect import Claim, Sample, sample_of, share
from .errors import TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import HashSet, Recent, StepSpool
from .reading import JsonlReader, Limits, clip_strings

name = "claude-code"
label = "Claude Code session JSONL"

# metadata record type -> the payload field it carries (None: no field worth checking)
METADATA_TYPES: dict[str, str | None] = {
    "summary": "leafUuid",
    "custom-title": "customTitle",
    "ai-title": "aiTitle",
    "agent-name": "agentName",
    "last-prompt": "lastPrompt",
    "permission-mode": "permissionMode",
    "mode": "mode",
    "queue-operation": "operation",
    "file-history-snapshot": "snapshot",
    "pr-link": "prUrl",
    "frame-link": None,
    "worktree-state": None,
    "relocated": None,
    "bridge-session": "bridgeSessionId",
    "atis-latch": None,
    "started": None,
    "result": None,
}
# metadata types too general to tell Claude Code by themselves (`result`, `mode`, …)
_GENERAL_METADATA = frozenset(("mode", "started", "result", "relocated"))
ERROR_SYSTEM_SUBTYPES = frozenset(("api_error", "error", "api_refusal"))
TASK_TOOLS = {"Task", "Agent"}
AGENT_FILE = re.compile(r"agent-([^./\\]+)\.jsonl")
MAX_COUNTED_KINDS = 50  # distinct record types counted by name; the rest count as "(other)"
MAX_TITLE_CHARS = 500
# A session of any length is read in bounded memory: its steps are spooled (kit.spool; a call
# waiting for its result is held), and what the reader looks back at is bounded too.
MAX_MESSAGES = 4096  # API messages open to more blocks (the newest; an older one is closed)
MAX_ANSWERED = 4096  # answered calls a hook block may still name (the newest)
MAX_OPEN_CALLS = 8192  # calls waiting for a result (the oldest unanswered one is given up)
MAX_SIDECHAIN_LINKS = 65536  # sidechain record uuids remembered with their Task call


# --- detection


def _is_metadata(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("type"), str)
        and record["type"] in METADATA_TYPES
        and "uuid" not in record
        and "message" not in record
    )


def _marked_metadata(record: Any) -> bool:
    """A metadata record that shows Claude Code by itself: its type and its payload field,
    or its `sessionId`, and not one of the general type names."""
    if not _is_metadata(record) or record["type"] in _GENERAL_METADATA:
        return False
    payload = METADATA_TYPES[record["type"]]
    return "sessionId" in record or (payload is not None and payload in record)


def _is_tree_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("type"), str)
        and "sessionId" in record
        and ("uuid" in record or "parentUuid" in record)
    )


def _is_tree_message(record: Any) -> bool:
    return (
        _is_tree_record(record)
        and record["type"] in ("user", "assistant")
        and "parentUuid" in record
        and isinstance(record.get("message"), dict)
    )


def claim(sample: Sample) -> Claim:
    """Claude Code when the records carry `sessionId` with `uuid`/`parentUuid` (the tree
    records), judged after leaving out Claude Code's metadata records (no `uuid`), which may
    come first; a head of Claude Code metadata records only is Claude Code too."""
    if sample.layout == "json" and _is_tree_record(sample.top):
        # one record longer than the 64 KiB head (a pasted image, a huge tool result)
        return Claim(0.7, "the first record, cut by the head, carries sessionId and uuid")
    if sample.layout != "jsonl":
        return Claim.no("not JSONL")
    records = sample.records
    metadata = [r for r in records if _is_metadata(r)]
    rest = [r for r in records if not _is_metadata(r)]
    skipped = f" ({len(metadata)} metadata records left out)" if metadata else ""
    if rest:
        tree = [r for r in rest if _is_tree_record(r)]
        if not tree:
            return Claim.no(f"no record{skipped} carries `sessionId` with `uuid`/`parentUuid`")
        fit = share(rest, _is_tree_record)
        messages = sum(1 for r in tree if _is_tree_message(r))
        types = ", ".join(sorted({r["type"] for r in tree})[:8])
        score = 0.6 + 0.3 * fit + (0.05 if messages else 0.0)
        return Claim(
            min(score, 0.95),
            f"{fit:.0%} of the records{skipped} carry `sessionId` with `uuid`/`parentUuid` "
            f"({types}; {messages} user/assistant messages)",
        )
    if any(_marked_metadata(r) for r in metadata):
        types = ", ".join(sorted({r["type"] for r in metadata})[:8])
        return Claim(0.6, f"only Claude Code metadata records in the first records ({types})")
    return Claim.no("no record carries `sessionId` with `uuid`/`parentUuid`")


def sniff(head: bytes) -> bool:
    """Yes/no form of `claim` (kept for callers that still ask a sniffer)."""
    return claim(sample_of(head)).score >= 0.5


# --- reading


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
    source: str
    run: Run
    line: int | None = None  # the line being read
    # message id -> its blocks so far (the newest MAX_MESSAGES, by their first record)
    messages: Recent[str, _Message] = field(
        default_factory=lambda: Recent(MAX_MESSAGES, refresh=False)
    )
    # tool_use id -> newest call step with it (MAX_OPEN_CALLS + MAX_ANSWERED ids, by the
    # first call with the id: a reused id keeps its place)
    calls: Recent[str, Step] = field(
        default_factory=lambda: Recent(MAX_OPEN_CALLS + MAX_ANSWERED, refresh=False)
    )
    settled: deque = field(default_factory=deque)  # tool_use ids answered, oldest first
    answered: set[int] = field(default_factory=set)  # the answered call steps in `calls` (id())
    uuids: HashSet = field(default_factory=HashSet)
    skipped: Counter = field(default_factory=Counter)  # unknown types, duplicates, orphans
    metadata_records: Counter = field(default_factory=Counter)  # no-uuid metadata records
    context: Counter = field(default_factory=Counter)  # tree records that give no step
    blocked: dict[str, str] = field(default_factory=dict)  # tool_use id -> hook's reason
    aborted: set[str] = field(default_factory=set)  # message ids cut off mid-stream
    # sidechain record uuid -> Task id (the newest MAX_SIDECHAIN_LINKS, by their first link)
    task_of: Recent[str, str] = field(
        default_factory=lambda: Recent(MAX_SIDECHAIN_LINKS, refresh=False)
    )
    branched: bool = False  # some step is a sub-agent's (its lane says under which Task call)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def link_task(self, uuid: str, task: str) -> None:
        self.task_of.put(uuid, task)


def _waiting(step: Step) -> bool:
    """A step the reader may still change: a call without its result (the spool holds it)."""
    return step.kind == "tool_call" and step.result is None


def _count(counter: Counter, kind: Any) -> None:
    """Count a record type by name, with a bound on how many names are kept."""
    key = str(kind)[:100] if kind is not None else "(no type)"
    if key not in counter and len(counter) >= MAX_COUNTED_KINDS:
        key = "(other)"
    counter[key] += 1


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a session (or sub-agent) file."""
    # Passes over a spooled copy, so a session is never held as parsed records, only as its
    # steps: the first pass reads what the file holds and whether its tree forks; only when
    # it does, a second keeps each record's place in the tree (a skeleton) to find the
    # abandoned branches; the last builds the steps.
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        shutil.copyfileobj(stream, spool, 1 << 20)
        spool.seek(0)
        first = JsonlReader(spool, source=source, limits=limits, objects_only=True)
        held = _Holdings()
        for _, record in first:
            held.add(record)
        first.check_not_empty()
        if not held.messages:
            raise _no_messages(held, source, first.skips.count)
        held.children = HashSet()  # the first pass is over: let its hashes go
        abandoned: set[int] = set()
        if held.forked:
            spool.seek(0)
            skeletons = JsonlReader(spool, source=source, limits=limits, objects_only=True)
            abandoned = _abandoned([_skeleton(record) for _, record in skeletons])
        spool.seek(0)
        reader = JsonlReader(spool, source=source, limits=limits, objects_only=True)
        agent_id = _subagent_id(held, source)
        spool = StepSpool(hold=_waiting)
        run = Run(id=_run_id(held.session_id, agent_id, source), format=name, steps=spool)  # type: ignore[arg-type]
        state = _State(limits, source, run)
        dropped = 0
        for position, (line, record) in enumerate(reader):
            state.line = line
            if position in abandoned:
                dropped += record.get("type") in ("user", "assistant", "system")
                continue
            _record(state, record)
    aborted = _end_aborted_calls_and_link_sidechains(state)
    meta = state.meta
    for key, counter in (
        ("skipped_records", state.skipped),
        ("metadata_records", state.metadata_records),
        ("context_records", state.context),
    ):
        if counter:
            meta[key] = dict(counter)
    if dropped:
        meta["abandoned_records"] = dropped
    if aborted:
        meta["aborted_messages"] = aborted
    for kind, count in state.skipped.items():
        if kind not in ("duplicate", "result_without_call"):
            reader.skips.note(
                f"{source}: {count} record(s) of unknown type {kind!r} ignored "
                "(a newer Claude Code version?)"
            )
    run.id, run.metadata = _run_id(meta.get("session_id"), agent_id, source), meta
    run.name = str(meta.get("title") or meta.get("ai_title") or meta.get("slug") or run.id)
    if agent_id is not None:
        meta["agent_id"] = agent_id
        run.name = f"agent-{agent_id}"
    finished = finish_run(reader.skips.apply(run))
    del state, held, abandoned  # what reading needed goes before the run is consumed
    yield finished


def _run_id(session_id: Any, agent_id: str | None, source: str) -> str:
    """A session's id, a sub-agent's `<session>/agent-<id>`."""
    if agent_id is not None:
        return f"{session_id}/agent-{agent_id}" if session_id else agent_id
    return str(session_id or os.path.basename(source) or "run")


SPOOL_IN_MEMORY = 8 * 1024 * 1024  # a bigger session is spooled to a temporary file
_SKELETON_KEYS = ("type", "uuid", "parentUuid", "logicalParentUuid", "isSidechain", "agentId")


def _skeleton(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of a record that place it in the tree (what `_abandoned` reads): a few short values instead of the whole record. Strings are
    interned: each uuid is written twice (as a uuid, then as the next record's parent), and
    types and session ids on every record."""
    slim = {key: _interned(record[key]) for key in _SKELETON_KEYS if key in record}
    if "sessionId" in record:
        slim["sessionId"] = _interned(record["sessionId"])
    message = record.get("message")
    if isinstance(message, dict):
        blocks = [
            {key: _interned(block[key]) for key in ("type", "id", "tool_use_id") if key in block}
            for block in _content(record)
            if isinstance(block, dict)
            and block.get("type") in ("tool_use", "server_tool_use", "tool_result")
        ]
        slim["message"] = {"id": _interned(message.get("id")), "content": blocks}
    elif "message" in record:
        slim["message"] = message
    return slim


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


@dataclass
class _Holdings:
    """What the first pass learns of a file: its record types, whether it has messages and
    whether they are all a sub-agent's, and whether the tree forks (two records with one
    parent), which is when abandoned branches must be looked for."""

    kinds: Counter = field(default_factory=Counter)
    only_metadata: bool = True
    messages: int = 0
    sidechain_only: bool = True
    agent_id: str | None = None
    session_id: str | None = None
    children: HashSet = field(default_factory=HashSet)  # parents seen with one child
    forked: bool = False

    def add(self, record: dict[str, Any]) -> None:
        _count(self.kinds, record.get("type"))
        self.only_metadata = self.only_metadata and _is_metadata(record)
        if _is_message(record):
            self.messages += 1
            self.sidechain_only = self.sidechain_only and record.get("isSidechain") is True
            agent, session = record.get("agentId"), record.get("sessionId")
            if self.agent_id is None and isinstance(agent, str) and agent:
                self.agent_id = agent
            if self.session_id is None and session:
                self.session_id = str(session)
        parent = _parent_uuid(record) if "uuid" in record else None
        if parent is not None and not self.forked:
            if parent in self.children:
                self.forked = True
            else:
                self.children.add(parent)


def _no_messages(held: _Holdings, source: str, skipped: int) -> TraceError:
    """The error for a file without one user or assistant message, saying what it holds."""
    held_kinds = ", ".join(f"{count} {kind}" for kind, count in held.kinds.most_common(8))
    if held.only_metadata:
        what = "only Claude Code metadata records"
    else:
        what = "no user or assistant message"
    bad = f"; {skipped} invalid line(s) skipped" if skipped else ""
    return TraceError(
        f"no messages: the file holds {what} ({held_kinds}{bad}), as a session that was opened "
        "but never got a prompt does; there is no run to import",
        source=source,
    )


def _is_message(record: dict[str, Any]) -> bool:
    return record.get("type") in ("user", "assistant")


def _subagent_id(held: _Holdings, source: str) -> str | None:
    """Return the agent id of a sub-agent file (all its messages are sidechain), else None."""
    if not held.messages or not held.sidechain_only:
        return None
    if held.agent_id:
        return held.agent_id
    match = AGENT_FILE.match(os.path.basename(source))
    if match:
        return match.group(1)
    return held.session_id or "agent"


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
    if isinstance(uuid, str) and not state.uuids.add(uuid):
        _count(state.skipped, "duplicate")
        return
    if _is_metadata(record):
        _metadata(state, record)
        return
    _note_meta(state.meta, record)
    if kind == "assistant":
        _assistant(state, record)
    elif kind == "user":
        _user(state, record)
    elif kind == "system":
        _system(state, record)
    elif kind == "attachment":
        _attachment(state, record)
    elif kind == "progress":
        _count(state.context, "progress")
        _follow(state, record)
    else:
        _count(state.skipped, kind)
        _follow(state, record)


def _metadata(state: _State, record: dict[str, Any]) -> None:
    """A metadata record: counted; titles and modes kept (the newest one wins)."""
    kind = record["type"]
    _count(state.metadata_records, kind)
    for key, target in (
        ("customTitle", "title"),
        ("aiTitle", "ai_title"),
        ("agentName", "agent_name"),
        ("permissionMode", "permission_mode"),
        ("prUrl", "pr_url"),
    ):
        value = record.get(key)
        if isinstance(value, str) and value:
            state.meta[target] = clip_strings(value, MAX_TITLE_CHARS)
    if kind == "mode" and isinstance(record.get("mode"), str):
        state.meta["mode"] = clip_strings(record["mode"], MAX_TITLE_CHARS)
    if isinstance(record.get("sessionId"), str) and "session_id" not in state.meta:
        state.meta["session_id"] = record["sessionId"]


def _note_meta(meta: dict[str, Any], record: dict[str, Any]) -> None:
    meta.setdefault("agent", "claude-code")
    for key, target in (
        ("sessionId", "session_id"),
        ("version", "version"),
        ("cwd", "cwd"),
        ("gitBranch", "git_branch"),
        ("slug", "slug"),
        ("entrypoint", "entrypoint"),
    ):
        value = record.get(key)
        if value and target not in meta and isinstance(value, str | int | float):
            meta[target] = clip_strings(value, MAX_TITLE_CHARS)
    message = record.get("message")
    model = (
        message.get("model")
        if isinstance(message, dict) and record.get("type") == "assistant"
        else None
    )
    if isinstance(model, str) and model and not model.startswith("<"):
        meta.setdefault("model", model)


def _add(state: _State, record: dict[str, Any], step: Step) -> Step:
    step.started_at = step.started_at or parse_time(record.get("timestamp"))
    add_step(state.run, step, limits=state.limits, source=state.source, line=state.line)
    task = _task_for(state, record, step)
    if task is not None:  # a sub-agent's step: `_link_sidechains` hangs it under its Task call
        step.lane = f"agent:{task}"
        state.branched = state.branched or bool(task)
    return step


def _follow(state: _State, record: dict[str, Any]) -> None:
    """Carry a sub-agent's Task link through a tree record that gives no step."""
    uuid, parent = record.get("uuid"), record.get("parentUuid")
    if record.get("isSidechain") and isinstance(uuid, str) and isinstance(parent, str):
        task = state.task_of.get(parent)
        if task is not None:
            state.link_task(uuid, task)


def _assistant(state: _State, record: dict[str, Any]) -> None:
    message = record.get("message") if isinstance(record.get("message"), dict) else {}
    msg_id = str(message.get("id") or record.get("uuid") or len(state.steps))
    entry = state.messages.get(msg_id)
    if entry is None:
        entry = _Message()
        state.messages.put(msg_id, entry)
    if isinstance(message.get("usage"), dict):
        entry.usage = message["usage"]
    if record.get("isAbortedMidStream") is True:
        state.aborted.add(msg_id)
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        step = _assistant_block(state, record, entry, msg_id, block)
        if step is not None and entry.first is None:
            entry.first = step
    if record.get("isApiErrorMessage") is True and entry.text is not None:
        entry.text.status = "error"
    _usage_to_step(entry)
    if not blocks:
        _follow(state, record)


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
            current.text = clip_strings(
                f"{current.text}\n{text}" if current.text else text, limits.max_value_chars
            )
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
        # A reused id stays as it is: kit.finish_run merges a copy of the call into it (one
        # result between them, the same message) and gives another call with the id `#n`.
        step = tool_step(
            tool=str(block.get("name") or ""),
            args=block.get("input"),
            limits=limits,
            id=call_id,
            batch_id=msg_id,
        )
        earlier = state.calls.get(call_id)
        if earlier is not None:
            state.answered.discard(id(earlier))  # (answered holds only steps in `calls`)
        gone = state.calls.put(call_id, step)  # the newest call with this id answers its results
        if gone is not None:  # the oldest: no result came for it (`answered` goes with it)
            state.answered.discard(id(gone[1]))
        return _add(state, record, step)
    return None


def _user(state: _State, record: dict[str, Any]) -> None:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    kind = "system" if record.get("isMeta") or record.get("isCompactSummary") else "user"
    if isinstance(content, str):
        _add(state, record, text_step(kind, content, limits=state.limits, id=record.get("uuid")))
        return
    texts = []
    results = 0
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            _tool_result(state, record, block)
            results += 1
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    if texts:
        _add(
            state,
            record,
            text_step(kind, "\n".join(texts), limits=state.limits, id=record.get("uuid")),
        )
    elif not results:
        _follow(state, record)


def _denied(record: dict[str, Any], block: dict[str, Any]) -> bool:
    """Whether the user or a rule refused the call (or cut it off): `toolDenialKind`, on the
    record (where Claude Code writes it) or on the block."""
    return any(
        isinstance(where.get("toolDenialKind"), str) and where["toolDenialKind"]
        for where in (record, block)
    )


def _tool_result(state: _State, record: dict[str, Any], block: dict[str, Any]) -> None:
    call_id = str(block.get("tool_use_id") or "")
    call = state.calls.get(call_id)
    result = block.get("content")
    result = content_text(result) if isinstance(result, list) else result
    ended = parse_time(record.get("timestamp"))
    if call is None or id(call) in state.answered:
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
        _count(state.skipped, "result_without_call")
    else:
        _follow(state, record)
        _settle(state, call_id)
        state.answered.add(id(call))
    error = block.get("is_error") is True or _denied(record, block) or call_id in state.blocked
    set_result(call, result, error=error, limits=state.limits, ended_at=ended)


def _settle(state: _State, call_id: str) -> None:
    """An answered call stays findable (a hook block may name it) while it is among the
    MAX_ANSWERED answered most recently."""
    state.settled.append(call_id)
    if len(state.settled) > MAX_ANSWERED:
        old = state.settled.popleft()
        call = state.calls.get(old)
        if call is not None and id(call) in state.answered:
            _forget_call(state, old)


def _forget_call(state: _State, call_id: str) -> None:
    """A call no later record can name any more (it left `calls`: `answered` goes with it)."""
    call = state.calls.pop(call_id)
    state.answered.discard(id(call))


def _system(state: _State, record: dict[str, Any]) -> None:
    """A system record: a step when it says something (see the module rules)."""
    subtype = record.get("subtype")
    subtype = subtype if isinstance(subtype, str) else None
    error = subtype in ERROR_SYSTEM_SUBTYPES or record.get("level") == "error"
    text = content_text(record.get("content"))
    if error:
        text = _system_error_text(record, text)
    elif not text and subtype == "compact_boundary":
        text = "Conversation compacted"
    elif not text and subtype == "stop_hook_summary" and record.get("hookErrors"):
        errors = record["hookErrors"]
        errors = errors if isinstance(errors, list) else [errors]
        text = "Stop hook errors: " + "; ".join(content_text(e) for e in errors[:20])
    if not text:
        _count(state.context, f"system:{subtype}" if subtype else "system")
        _follow(state, record)
        return
    step = text_step("system", text, limits=state.limits, id=record.get("uuid"))
    if error:
        step.status = "error"
    _add(state, record, step)


def _system_error_text(record: dict[str, Any], text: str) -> str:
    """The words of an api_error/error system record: its content, else its error's message,
    with the retry count when it has one."""
    subtype = str(record.get("subtype") or "error")
    if not text:
        text = _error_message(record.get("error")) or _error_message(record.get("cause"))
    words = f"{subtype.replace('_', ' ')}: {text}" if text else subtype.replace("_", " ")
    attempt, most = number(record.get("retryAttempt")), number(record.get("maxRetries"))
    if attempt:
        words += f" (retry {attempt} of {most})" if most else f" (retry {attempt})"
    return words


def _error_message(error: Any, depth: int = 0) -> str:
    """The message inside an API error value (nested `error` objects, or text)."""
    if isinstance(error, str):
        return error
    if not isinstance(error, dict) or depth > 4:
        return ""
    for key in ("message", "error"):
        found = _error_message(error.get(key), depth + 1)
        if found:
            status = number(error.get("status"))
            return f"{status} {found}" if status and depth == 0 else found
    status = number(error.get("status"))
    return f"status {status}" if status else ""


def _attachment(state: _State, record: dict[str, Any]) -> None:
    """An attachment record: injected context, except hook refusals and queued prompts."""
    attachment = record.get("attachment")
    attachment = attachment if isinstance(attachment, dict) else {}
    kind = attachment.get("type")
    if kind == "hook_blocking_error":
        _hook_block(state, record, attachment)
    elif kind == "queued_command" and isinstance(attachment.get("prompt"), str):
        origin = attachment.get("origin")
        who = origin.get("kind") if isinstance(origin, dict) else None
        step_kind = "user" if who in (None, "human") else "system"
        _add(
            state,
            record,
            text_step(step_kind, attachment["prompt"], limits=state.limits, id=record.get("uuid")),
        )
    else:
        _count(state.context, "attachment")
        _follow(state, record)


def _hook_block(state: _State, record: dict[str, Any], attachment: dict[str, Any]) -> None:
    """A hook refused a tool call (or rejected its outcome): the call named by `toolUseID`
    is an error; without such a call, the refusal is a system step."""
    blocking = attachment.get("blockingError")
    if isinstance(blocking, dict):
        blocking = blocking.get("blockingError")
    reason = content_text(blocking) or content_text(attachment.get("content"))
    hook = attachment.get("hookName") or attachment.get("hookEvent") or "hook"
    text = f"{content_text(hook)} blocked: {reason}" if reason else f"{content_text(hook)} blocked"
    call_id = attachment.get("toolUseID")
    call_id = str(call_id) if call_id is not None else ""
    call = state.calls.get(call_id) if call_id else None
    if call_id:
        state.blocked[call_id] = text
    if call is None:
        step = text_step("system", text, limits=state.limits, id=record.get("uuid"))
        step.status = "error"
        _add(state, record, step)
        return
    _count(state.context, "attachment")
    _follow(state, record)
    if call.result is None:
        call.result = clip_strings(text, state.limits.max_value_chars)
    call.status = "error"


def _end_aborted_calls_and_link_sidechains(state: _State) -> int:
    """The passes over the whole session, once it is read: calls of a message cut off
    mid-stream that never got a result did not run (errors); each sub-agent's steps are
    chained under its Task call (`_link_sidechains`). One pass over a spooled session, none
    when neither applies. Return how many messages were cut off."""
    aborted = state.aborted
    if not aborted and not state.branched:
        return 0

    def passing(steps: Iterator[Step]) -> Iterator[Step]:
        linked = _link_sidechains(steps) if state.branched else steps
        for step in linked:
            if step.kind == "tool_call" and step.batch_id in aborted and step.result is None:
                step.status = "error"
            yield step

    if isinstance(state.run.steps, StepSpool):
        state.run.steps = state.run.steps.rewrite(passing)
    else:
        state.run.steps = list(passing(iter(state.run.steps)))
    return len(aborted)


def _task_for(state: _State, record: dict[str, Any], step: Step) -> str | None:
    """Return the Task call id a sidechain record belongs to, when it can be told."""
    if not record.get("isSidechain"):
        return None
    uuid, parent = record.get("uuid"), record.get("parentUuid")
    task = state.task_of.get(parent) if isinstance(parent, str) else None
    if task is None:
        open_tasks = [
            s for s in state.calls.values() if s.tool in TASK_TOOLS and id(s) not in state.answered
        ]
        prompt = step.text if step.kind == "user" else None
        matching = [
            s
            for s in open_tasks
            if prompt and isinstance(s.args, dict) and s.args.get("prompt") == prompt
        ]
        if matching:
            task = matching[-1].id
        elif len(open_tasks) == 1:
            task = open_tasks[0].id
    if task is not None and isinstance(uuid, str):
        state.link_task(uuid, task)
    return task


def _usage_to_step(entry: _Message) -> None:
    """A message's tokens (its usage as read so far: the last record's wins) on its first
    step."""
    if entry.first is None or not entry.usage:
        return
    usage = entry.usage
    parts = [
        number(usage.get(k))
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    entry.first.tokens_in = (
        sum(p or 0 for p in parts) if any(p is not None for p in parts) else None
    )
    entry.first.tokens_out = number(usage.get("output_tokens"))


def _link_sidechains(steps: Iterator[Step]) -> Iterator[Step]:
    """Hang each sub-agent's steps (their lane names their Task call: `_add`), chained, under
    that call; every step gets an id (`step-<position>`) when it has none."""
    last: dict[str, str | None] = {}
    for position, step in enumerate(steps):
        if step.id is None:
            step.id = f"step-{position}"
        lane = step.lane
        if isinstance(lane, str) and lane.startswith("agent:"):
            task = lane[len("agent:") :]
            step.parent_id = last.get(task, task)
            last[task] = step.id
        yield step
