"""OpenAI Codex CLI rollout JSONL (`~/.codex/sessions/…/rollout-<ts>-<uuid>.jsonl`), 0.2x–0.149.

Every line is `{timestamp, type, payload}` (0.149 adds an `ordinal`: read, not needed, since
lines are already in order). Types: `session_meta`, `turn_context`, `response_item`,
`event_msg`, and the context records `compacted` and `world_state`; other types are
tolerated, skipped and counted in metadata["skipped_records"]. One run per file:

- **Run id**: the first `session_meta`'s `id` (or `session_id`). A resumed or forked rollout
  holds several `session_meta` lines (a fork copies its parent's history, parent's
  `session_meta` included, after its own); they stay one run, because the file is one
  rollout: the first line is the file's own session (the uuid in the file name), its fields
  win, and every distinct id is listed in metadata["session_ids"] (`forked_from_id` too).
  `source` `{subagent: …}` (a spawned agent's rollout) -> metadata "source": "subagent",
  "subagent" (the object) and "parent_thread_id" when it names one; `agent_nickname`,
  `agent_role`, `git`, `thread_source`, `history_mode` -> metadata. `collab_agent_spawn_end`
  events -> metadata["spawned_agents"] (the sub-agents' own rollouts hold their steps).
- `turn_context` -> metadata model/effort/approval_policy (first seen, `models` lists all;
  `collaboration_mode.settings.model` / `reasoning_effort` when the plain fields are absent).
- `response_item` `message`: role `user` -> `user` step, except harness-injected context
  (text starting `<environment_context>`, `<user_instructions>`, `# AGENTS.md`) and role
  `developer`/`system` -> `system` steps; role `assistant` -> `assistant` step.
  `reasoning` (summary texts, joined by newlines) -> `reasoning` step.
- One message is written up to three times: the response item, an `event_msg`
  (`user_message` / `agent_message`) and, from 0.149, an `item_completed` event
  (`UserMessage` / `AgentMessage` item). The first copy becomes the step; a later copy with
  the same text (whitespace collapsed) from another of the three sources is dropped.
  Reasoning is paired part by part with `agent_reasoning` events: a `reasoning` item with
  several `summary` parts comes with one event per part (or one event holding them all),
  before or after the item. Parts already seen as events are dropped from the item (all
  seen: no step); events repeating a part of a stepped item are dropped; consecutive
  `agent_reasoning` events of one response, with no item yet, form one step.
- Calls, linked to their output by `call_id` (a reused id is left to the kit's merge: a copy
  of the call joins it, another call with that id gets `#n`):
  `function_call` (tool = `name`, args = parsed JSON `arguments`; arguments that are not
  JSON -> status "invalid"), `custom_tool_call` (apply_patch: args `{"input": <patch>}`),
  `local_shell_call` (tool `local_shell`, args = `action`), `web_search_call` (tool
  `web_search`, args = `action`, no output item: result None, `status: "failed"` -> error).
  `function_call_output` / `custom_tool_call_output` fill the result; `output` is a string,
  an object (`{type: "input_text", text}`, `{content, success}`, `{content, isError}`) or a
  content list, all read as text.
- **Unified exec** (0.100+): `exec_command {cmd, workdir, …}` and `write_stdin
  {session_id, chars, yield_time_ms}` (empty `chars` = a poll). Their output is framed:
  `Chunk ID / Wall time / Process exited with code N | Process running with session ID N /
  Original token count / Output:`. The result is that text without the `Chunk ID` and
  `Wall time` lines (they change on every call and would hide a repeat), so a poll's result
  is the new output since the last poll plus the process state: a poll with new output has
  a new result, which the engine reads as progress (same call, new result), while polls that
  keep getting the same output are the same call with the same result, a repeat.
  `Process exited with code N` decides the status (N != 0: error). `Process running with
  session ID N` leaves the call ok and opens session N; the exit code of that command comes
  in a later `write_stdin` output for session N (another call id), and is given to the
  `exec_command` step too (status, ended_at), while each poll stays its own step.
  Older framing `Exit code: N\\nWall time: …\\nOutput:` reads the same; older JSON
  `{"output", "metadata": {"exit_code"}}` -> result = `output`, exit code != 0 -> error.
- Explicit signals win over text: `exec_command_end.exit_code` (and `status` "failed" /
  "declined"), `patch_apply_end.success`, `mcp_tool_call_end.result` (`Ok.isError`, `Err`),
  a tool item of `item_completed` (`exit_code`, `status`, `result.isError`), matched to the
  call by `call_id` whether they come before or after its output (`exec_command_end` also
  by `process_id` = session). An `mcp_tool_call_end` whose call is not in the file becomes
  a step (tool `server__tool`). Only without a signal do the text rules decide
  (`text_errors.CODEX` + the common table: sandbox denials, "apply_patch verification
  failed", "aborted by user after …", "write_stdin failed: …"); "failed to parse function
  arguments" and "unsupported call" mark the call "invalid" (no valid action).
- `batch_id`: the model response that issued the call: consecutive model items (reasoning,
  assistant message, calls) with no output or user message between them share "resp-<n>".
- `token_count` -> `info.last_token_usage` on the first step of the latest response
  (tokens_in = input_tokens, tokens_out = output_tokens: `cached_input_tokens` is part of
  the input and `reasoning_output_tokens` part of the output, never added);
  `total_token_usage` -> metadata.
- `turn_aborted` -> a `system` step "turn aborted: <reason>", and calls of that turn still
  without output become errors. `error` events -> a `system` step "error: <message>".
- Context, not turns (counted in metadata["context_records"]): `compacted`, `world_state`,
  `ghost_snapshot`, and the events `task_started`, `task_complete`, `context_compacted`,
  `exec_command_begin`, approval requests and other `item_completed` items.
- **Any length**: the steps go into a step spool (kit.spool), so a rollout is read in the
  memory of the spool's window. A step the reader may still change when it leaves the window
  is held (`_State.holds`): a call waiting for its output, a command whose exec session still
  runs, the response's first step. What the reader looks back at is bounded: MAX_OPEN_CALLS
  calls waiting for output (an output for an older one reads as a call not in the file), the
  newest MAX_OPEN_CALLS + MAX_ANSWERED calls an event may give a status, MAX_SIGNALS
  statuses kept for a call id, MAX_SESSIONS running sessions, MAX_COPIES texts per source
  awaiting their copy. An event that names an answered call more than a window (2,048 to
  4,096 steps) after it changes nothing; a rollout within these bounds reads as it would
  held whole.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_json_text, parse_time
from .detect import Claim, Sample, sample_of, share
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .kit.spool import HashSet, Recent, StepSpool
from .reading import JsonlReader, Limits, clip_json, clip_strings

name = "codex"
label = "OpenAI Codex CLI rollout JSONL"

LINE_TYPES = {
    "session_meta",
    "turn_context",
    "response_item",
    "event_msg",
    "compacted",
    "world_state",
}
CONTEXT_TYPES = {"compacted", "world_state"}
CALL_TYPES = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
OUTPUT_TYPES = {"function_call_output", "custom_tool_call_output"}
CONTEXT_ITEMS = {"ghost_snapshot", "compaction", "compaction_summary"}
CONTEXT_EVENTS = {
    "task_started",
    "task_complete",
    "turn_started",
    "turn_complete",
    "context_compacted",
    "exec_command_begin",
    "exec_command_output_delta",
    "patch_apply_begin",
    "mcp_tool_call_begin",
    "exec_approval_request",
    "apply_patch_approval_request",
    "collab_agent_spawn_begin",
    "agent_reasoning_section_break",
    "agent_reasoning_raw_content",
    "web_search_begin",
    "web_search_end",
    "item_started",
}
INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<user_shell_command>")
PENDING_REASONING = 50  # reasoning items whose parts may still come back as events
MAX_LISTED = 100  # session ids / spawned agents kept in metadata
ORIGINS = ("item", "event", "completed")  # where a copy of a message comes from
# A rollout of any length is read in bounded memory: its steps are spooled (kit.spool; a
# step the reader may still change is held: see `_State.holds`), and what the reader looks
# back at is bounded too.
MAX_OPEN_CALLS = 8192  # calls waiting for their output (the oldest is given up)
MAX_ANSWERED = 4096  # calls an event may still give a status to, beyond the open ones
MAX_SIGNALS = 8192  # explicit statuses from events kept for their call id (the newest)
MAX_SESSIONS = 1024  # running exec sessions waiting for their exit code (the newest)
MAX_COPIES = 4096  # texts per source waiting for their copy from another (the newest)

# The unified-exec framing: header lines, then "Output:" and the text.
_FRAME = re.compile(
    r"(?:Chunk ID|Wall time|Original token count|Total output lines):.*"
    r"|Process exited with code (?P<exit>-?\d+)\s*"
    r"|Process running with session ID (?P<session>\S+)\s*"
    r"|Exit code:\s*(?P<code>-?\d+)\s*"
)
_VOLATILE_LINE = re.compile(r"(?:Chunk ID|Wall time):")
MAX_FRAME_LINES = 8

# Text that says the model gave no valid action (the call never ran).
INVALID = re.compile(
    r"\A\s*(?:failed to parse function arguments|unsupported call|unsupported custom tool call)"
)


# --- detection


def _envelope(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("type"), str) and "payload" in record


def _codex_record(record: Any) -> bool:
    return _envelope(record) and record["type"] in LINE_TYPES


def _marker(record: dict[str, Any]) -> bool:
    """A field only Codex writes: session_meta's originator/cli_version, or a Codex item."""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return False
    kind = record["type"]
    if kind == "session_meta":
        return "cli_version" in payload or "originator" in payload
    if kind == "response_item":
        return payload.get("type") in CALL_TYPES | OUTPUT_TYPES | {"reasoning", "message"}
    if kind == "event_msg":
        return isinstance(payload.get("type"), str)
    return kind == "turn_context"


def claim(sample: Sample) -> Claim:
    """Codex when the records are `{timestamp, type, payload}` with Codex line types
    (session_meta, turn_context, response_item, event_msg, compacted, world_state)."""
    if sample.layout == "json" and _codex_record(sample.top):
        # one record longer than the 64 KiB head (a long base_instructions)
        return Claim(0.7, f"the first record, cut by the head, is a Codex {sample.top['type']}")
    if sample.layout != "jsonl":
        return Claim.no("not JSONL")
    records = sample.records
    if not share(records, _envelope):
        return Claim.no("no record is {timestamp, type, payload}")
    fit = share(records, _codex_record)
    if not fit:
        return Claim.no("records are {type, payload} but none has a Codex type (session_meta, …)")
    objects = [r for r in records if _codex_record(r)]
    types = sorted({r["type"] for r in objects})
    marked = any(_marker(r) for r in objects)
    score = min(0.95, 0.5 + 0.35 * fit + (0.1 if marked else 0.0))
    return Claim(
        score,
        f"{fit:.0%} of the records are {{timestamp, type, payload}} with Codex types "
        f"({', '.join(types)})" + ("" if marked else "; no Codex-only field yet"),
    )


def sniff(head: bytes) -> bool:
    """Yes/no form of `claim` (kept for callers that still ask a sniffer)."""
    return claim(sample_of(head)).score >= 0.5


# --- reading


@dataclass
class _State:
    limits: Limits
    source: str
    run: Run
    line: int | None = None  # the line being read
    # call id -> call awaiting output (the newest MAX_OPEN_CALLS)
    calls: Recent[str, Step] = field(default_factory=lambda: Recent(MAX_OPEN_CALLS, refresh=True))
    # call id -> latest call with it (the newest MAX_OPEN_CALLS + MAX_ANSWERED)
    by_call: Recent[str, Step] = field(
        default_factory=lambda: Recent(MAX_OPEN_CALLS + MAX_ANSWERED, refresh=True)
    )
    known: HashSet = field(default_factory=HashSet)  # every call id read
    # call id -> error, from events (the newest MAX_SIGNALS)
    explicit: Recent[str, bool] = field(default_factory=lambda: Recent(MAX_SIGNALS, refresh=True))
    soft: set[str] = field(default_factory=set)  # call ids whose signal is item_completed's
    # running exec session -> its exec_command call (and that call's id)
    sessions: Recent[str, tuple[Step, str]] = field(
        default_factory=lambda: Recent(MAX_SESSIONS, refresh=True)
    )
    running: Counter = field(default_factory=Counter)  # id() of the calls in `sessions`
    poll_session: dict[str, str] = field(default_factory=dict)  # write_stdin call id -> session
    turn_calls: list[Step] = field(default_factory=list)
    # (kind, source) -> text -> copies of it still to come from that source (MAX_COPIES texts)
    expected: defaultdict[tuple[str, str], Recent[str, int]] = field(
        default_factory=lambda: defaultdict(_copies)
    )
    unpaired: defaultdict[tuple[str, str], Recent[str, int]] = field(
        default_factory=lambda: defaultdict(_copies)
    )
    response: int = 0
    in_response: bool = False
    response_first: Step | None = None
    event_reasoning: Step | None = None  # the latest step built from agent_reasoning events
    reasoning_items: list[list[str]] = field(default_factory=list)  # parts no event repeated yet
    skipped: Counter = field(default_factory=Counter)
    context: Counter = field(default_factory=Counter)
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "codex"})

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def holds(self, step: Step) -> bool:
        """Whether a step leaving the spool's window may still change, so the spool holds
        it: a call waiting for its output (or without a result a turn_aborted may still
        give), a call whose exec session still runs, the response's first step (its tokens
        come with the next token_count)."""
        if step is self.response_first:
            return True
        if step.kind != "tool_call":
            return False
        return (
            (step.result is None and step.tool != "web_search")
            or (step.id is not None and self.calls.get(str(step.id)) is step)
            or id(step) in self.running
        )


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield the one run of a rollout file: its steps are spooled (kit.spool), so a
    rollout of any length is read in the memory of the spool's window."""
    reader = JsonlReader(stream, source=source, limits=limits, objects_only=True)
    steps = StepSpool()
    state = _State(limits, source, Run(id=_run_id({}, source), format=name, steps=steps))  # type: ignore[arg-type]
    steps.hold = state.holds
    for line, record in reader:
        state.line = line
        _record(state, record)
    steps.hold = None  # read: no step changes any more
    reader.check_not_empty()
    if state.skipped:
        state.meta["skipped_records"] = dict(state.skipped)
    if state.context:
        state.meta["context_records"] = dict(state.context)
    run = state.run
    run.id, run.metadata = _run_id(state.meta, source), state.meta
    run.name = run.id
    finished = finish_run(reader.skips.apply(run))
    del state  # what reading needed goes before the run is consumed
    yield finished


def _run_id(meta: dict[str, Any], source: str) -> str:
    return str(meta.get("session_id") or os.path.basename(source) or "run")


def _record(state: _State, record: dict[str, Any]) -> None:
    kind, payload = record.get("type"), record.get("payload")
    when = parse_time(record.get("timestamp"))
    if kind in CONTEXT_TYPES:
        state.context[str(kind)] += 1
    elif not isinstance(payload, dict):
        state.skipped[str(kind)] += 1
    elif kind == "session_meta":
        _session_meta(state.meta, payload, state.limits)
        state.run.id = _run_id(state.meta, state.source)
    elif kind == "turn_context":
        _turn_context(state.meta, payload)
    elif kind == "response_item":
        _response_item(state, payload, when)
    elif kind == "event_msg":
        _event(state, payload, when)
    else:
        state.skipped[str(kind)] += 1


def _session_meta(meta: dict[str, Any], payload: dict[str, Any], limits: Limits) -> None:
    session = payload.get("id") or payload.get("session_id")
    if isinstance(session, str | int) and session != "":
        ids = meta.setdefault("session_ids", [])
        if str(session) not in ids and len(ids) < MAX_LISTED:
            ids.append(str(session))
        meta.setdefault("session_id", str(session))
    for key in (
        "cwd",
        "cli_version",
        "originator",
        "model_provider",
        "forked_from_id",
        "agent_nickname",
        "agent_role",
        "thread_source",
        "history_mode",
    ):
        value = payload.get(key)
        if isinstance(value, str | int | float) and value != "" and key not in meta:
            meta[key] = str(value)
    source = payload.get("source")
    if "source" not in meta and source not in (None, ""):
        if isinstance(source, dict):
            meta["source"] = "subagent" if "subagent" in source else next(iter(source), "")
            if "subagent" in source:
                meta["subagent"] = clip_json(source["subagent"], limits)
                parent = _find_key(source["subagent"], "parent_thread_id")
                if parent is not None:
                    meta["parent_thread_id"] = str(parent)
        else:
            meta["source"] = str(source)
    if isinstance(payload.get("git"), dict) and "git" not in meta:
        meta["git"] = clip_json(payload["git"], limits)


def _find_key(value: Any, key: str, depth: int = 0) -> Any:
    """The value under `key` anywhere in a small nested object (a few levels deep)."""
    if not isinstance(value, dict) or depth > 4:
        return None
    if key in value:
        return value[key]
    for item in value.values():
        found = _find_key(item, key, depth + 1)
        if found is not None:
            return found
    return None


def _turn_context(meta: dict[str, Any], payload: dict[str, Any]) -> None:
    settings = (payload.get("collaboration_mode") or {}).get("settings") or {}
    settings = settings if isinstance(settings, dict) else {}
    model = payload.get("model") or settings.get("model")
    if isinstance(model, str) and model:
        meta.setdefault("model", model)
        if model not in meta.setdefault("models", []):
            meta["models"].append(model)
    effort = payload.get("effort", settings.get("reasoning_effort"))
    if effort is not None:
        meta.setdefault("effort", effort)
    if payload.get("approval_policy") is not None:
        meta.setdefault("approval_policy", payload["approval_policy"])


def _add(state: _State, step: Step, when: float | None, *, model: bool) -> Step:
    step.started_at = when
    if model:
        if not state.in_response:
            state.response += 1
            state.in_response = True
            state.response_first = step
        step.batch_id = f"resp-{state.response}"
    else:
        state.in_response = False
    return add_step(state.run, step, limits=state.limits, source=state.source, line=state.line)


def _key(text: str) -> str:
    return " ".join(text.split())


def _copies() -> Recent[str, int]:
    """Text -> copies of it to wait for, for the newest MAX_COPIES texts (newest by the
    first copy waited for: one more copy keeps the text's place)."""
    return Recent(MAX_COPIES, refresh=False)


def _remember(counter: Recent[str, int], key: str) -> None:
    """Count one more copy to wait for (the newest MAX_COPIES texts are kept)."""
    counter.put(key, counter.get(key, 0) + 1)


def _take(counter: Recent[str, int], key: str) -> bool:
    """Take one copy of `key` waited for; False when none is."""
    if not counter.get(key):
        return False
    counter[key] -= 1
    if not counter[key]:
        del counter[key]
    return True


def _paired(state: _State, kind: str, text: str, origin: str) -> bool:
    """Return True when this text is a copy of a message already stepped from another of
    the three sources (response item, event, item_completed)."""
    key = _key(text)
    if _take(state.expected[kind, origin], key):
        return True
    for other in ORIGINS:
        if other != origin:
            _remember(state.expected[kind, other], key)
    return False


def _message(state: _State, kind: str, text: str, when: float | None, origin: str) -> None:
    if kind == "user" and text.lstrip().startswith(INJECTED):
        if origin != "completed":
            _add(state, text_step("system", text, limits=state.limits), when, model=False)
        return
    if _paired(state, kind, text, origin):
        return
    if kind == "user":
        state.turn_calls = []
    _add(state, text_step(kind, text, limits=state.limits), when, model=kind != "user")


def _reasoning_item(state: _State, summary: Any, when: float | None) -> None:
    """One reasoning item: its summary parts, each of which may already be an event."""
    parts = [content_text(part) for part in summary] if isinstance(summary, list) else []
    parts = [part for part in parts if _key(part)]
    if not parts:
        return
    events = state.unpaired["reasoning", "event"]
    whole = _key("\n".join(parts))
    if len(parts) > 1 and _take(events, whole):  # one event held all the parts
        return
    fresh = [part for part in parts if not _take(events, _key(part))]
    if not fresh:
        return
    state.reasoning_items.append([_key(part) for part in fresh])
    del state.reasoning_items[:-PENDING_REASONING]
    _add(state, text_step("reasoning", "\n".join(fresh), limits=state.limits), when, model=True)


def _reasoning_event(state: _State, text: str, when: float | None) -> None:
    """One `agent_reasoning` event (one summary part, or all of them): dropped when it repeats
    a reasoning item already stepped; consecutive events of one response form one step."""
    key = _key(text)
    if not key:
        return
    for index, waiting in enumerate(state.reasoning_items):
        if key in waiting:
            waiting.remove(key)
        elif key != " ".join(waiting):
            continue
        else:
            waiting.clear()
        if not waiting:
            del state.reasoning_items[index]
        return
    _remember(state.unpaired["reasoning", "event"], key)
    last = state.steps[-1] if state.steps else None
    if last is not None and last is state.event_reasoning and state.in_response:
        last.text = clip_strings(f"{last.text}\n{text}", state.limits.max_value_chars)
        return
    step = text_step("reasoning", text, limits=state.limits)
    state.event_reasoning = _add(state, step, when, model=True)


def _response_item(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        text = content_text(payload.get("content"))
        if role in ("developer", "system"):
            _add(state, text_step("system", text, limits=state.limits), when, model=False)
        elif role in ("user", "assistant"):
            _message(state, role, text, when, "item")
    elif kind == "reasoning":
        _reasoning_item(state, payload.get("summary"), when)
    elif kind in CALL_TYPES:
        _call(state, payload, when)
    elif kind in OUTPUT_TYPES:
        _output(state, payload, when)
    elif kind in CONTEXT_ITEMS:
        state.context[str(kind)] += 1
    else:
        state.skipped[str(kind)] += 1


def _new_call(state: _State, call_id: str, tool: str, args: Any, when: float | None) -> Step:
    # A reused id stays as it is: kit.finish_run merges a copy of the call into it (one
    # result between them, the same response) and gives another call with the id `#n`.
    step = tool_step(tool=tool, args=args, limits=state.limits, id=call_id or None)
    _add(state, step, when, model=True)
    state.turn_calls.append(step)
    if len(state.turn_calls) >= 2 * MAX_OPEN_CALLS:
        _prune_turn(state)
    if call_id:
        state.by_call.put(call_id, step)
        state.known.add(call_id)
    return step


def _prune_turn(state: _State) -> None:
    """Keep of the turn's calls those a turn_aborted may still end: without a result (a
    call's result, once given, stays while its turn lasts), the newest MAX_OPEN_CALLS."""
    waiting = [c for c in state.turn_calls if c.result is None and c.tool != "web_search"]
    state.turn_calls = waiting[-MAX_OPEN_CALLS:]


def _call(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    invalid = False
    if kind == "function_call":
        raw = payload.get("arguments")
        tool, args = payload.get("name"), parse_json_text(raw)
        invalid = isinstance(raw, str) and raw.strip() != "" and args is raw
    elif kind == "custom_tool_call":
        tool, args = payload.get("name"), {"input": payload.get("input")}
    elif kind == "local_shell_call":
        tool, args = "local_shell", payload.get("action")
    else:
        tool, args = "web_search", payload.get("action")
    call_id = str(payload.get("call_id") or payload.get("id") or "")
    step = _new_call(state, call_id, str(tool or kind), args, when)
    if invalid:
        step.status = "invalid"  # arguments that are not JSON: the call cannot run
    if kind == "web_search_call":
        set_result(step, None, error=payload.get("status") == "failed", limits=state.limits)
    elif call_id:
        given_up = state.calls.put(call_id, step)
        if given_up is not None:  # the oldest call still waiting: no output came for it
            state.poll_session.pop(given_up[0], None)
        if step.tool == "write_stdin" and isinstance(args, dict):
            session = args.get("session_id")
            if isinstance(session, str | int) and not isinstance(session, bool):
                state.poll_session[call_id] = str(session)


@dataclass(slots=True)
class Output:
    """What a call's output says: the result to store and the status signals in it."""

    result: Any
    error: bool
    exit_code: int | None = None  # from the framing or the JSON metadata
    running: str | None = None  # "Process running with session ID N": N
    invalid: bool = False
    explicit: bool = False  # an exit code or a flag, not a guess from the text


def _output(state: _State, payload: dict[str, Any], when: float | None) -> None:
    call_id = str(payload.get("call_id") or "")
    call = state.calls.pop(call_id, None)
    state.in_response = False
    if call is None:
        call = _add(
            state, tool_step(tool="(unknown)", args={}, limits=state.limits), when, model=False
        )
        state.skipped["output_without_call"] += 1
    out = read(payload.get("output"))
    invalid = call.status == "invalid" or out.invalid  # bad arguments, or the harness says so
    set_result(call, out.result, error=out.error, limits=state.limits, ended_at=when)
    if invalid:
        call.status = "invalid"
    elif call_id in state.explicit:  # an exec_command_end / patch_apply_end came first
        _set_status(call, state.explicit[call_id])
    if out.running is not None and call.tool != "write_stdin":
        _open_session(state, out.running, call, call_id)
    session = state.poll_session.pop(call_id, None)
    if session is not None and out.exit_code is not None:
        _session_ended(state, session, out.exit_code != 0, when)


def _set_status(step: Step, error: bool) -> None:
    if step.status != "invalid":
        step.status = "error" if error else "ok"


def _open_session(state: _State, session: str, call: Step, call_id: str) -> None:
    """Exec session `session` runs the command of `call` (the newest MAX_SESSIONS kept)."""
    _close_session(state, session)
    state.running[id(call)] += 1
    gone = state.sessions.put(session, (call, call_id))
    if gone is not None:  # the oldest running session: its exit code is not waited for
        _stop_running(state, gone[1][0])


def _close_session(state: _State, session: str) -> tuple[Step | None, str]:
    """Forget exec session `session`; return its call and call id ((None, "") if none)."""
    call, call_id = state.sessions.pop(session, (None, ""))
    if call is not None:
        _stop_running(state, call)
    return call, call_id


def _stop_running(state: _State, call: Step) -> None:
    state.running[id(call)] -= 1
    if not state.running[id(call)]:
        del state.running[id(call)]


def _session_ended(state: _State, session: str, error: bool, when: float | None) -> None:
    """The command of exec session `session` ended: its exec_command step gets the status."""
    call, call_id = _close_session(state, session)
    if call is None:
        return
    if call_id not in state.explicit or call_id in state.soft:  # exec_command_end wins
        _set_status(call, error)
    if when is not None:
        call.ended_at = when


def read(output: Any) -> Output:
    """Read a call output: string (text or JSON inside a string), object or content list."""
    if isinstance(output, list):
        return read(content_text(output))
    if isinstance(output, dict):
        return _read_object(output)
    if not isinstance(output, str):
        return Output(output, False)
    parsed = parse_json_text(output)
    if isinstance(parsed, dict) and ("output" in parsed or "content" in parsed):
        return _read_object(parsed)
    frame = _frame(output)
    if frame is not None:
        return frame
    rule = text_errors.error_rule(output, text_errors.CODEX)
    return Output(output, rule is not None, invalid=INVALID.match(output) is not None)


def _read_object(value: dict[str, Any]) -> Output:
    """`{"output", "metadata": {"exit_code"}}` (older exec), `{content, success}`,
    `{content, isError}`, `{type: "input_text", text}`."""
    if "output" in value and isinstance(value.get("metadata"), dict | None):
        code = number((value.get("metadata") or {}).get("exit_code"))
        text = value["output"]
        if code is not None:
            return Output(text, code != 0, exit_code=code, explicit=True)
        return read(text) if isinstance(text, str) else Output(text, False)
    flag = value.get("isError", value.get("is_error"))
    success = value.get("success")
    if "content" in value or isinstance(value.get("text"), str):
        text = content_text(value["content"]) if "content" in value else value["text"]
        if isinstance(flag, bool):
            return Output(text, flag, explicit=True)
        if isinstance(success, bool):
            return Output(text, not success, explicit=True)
        return read(text)
    return Output(value, flag is True or success is False, explicit=True)


def _frame(text: str) -> Output | None:
    """Read the unified-exec framing (or the older `Exit code:` one); None when absent.

    Header lines come first, up to `Output:`; the result keeps them but `Chunk ID` and
    `Wall time`, which change on every call.
    """
    lines = text[:4096].splitlines(keepends=True)
    kept: list[str] = []
    exit_code: int | None = None
    running: str | None = None
    end = 0
    for index, line in enumerate(lines[:MAX_FRAME_LINES]):
        bare = line.rstrip("\r\n")
        if bare.strip() == "Output:":
            end = index
            break
        match = _FRAME.fullmatch(bare)
        if match is None:
            return None
        code = match.group("exit") or match.group("code")
        if code is not None:
            exit_code = int(code)
        if match.group("session") is not None:
            running = match.group("session")
        if not _VOLATILE_LINE.match(bare):
            kept.append(line)
    else:
        end = min(len(lines), MAX_FRAME_LINES)
        if len(lines) > MAX_FRAME_LINES:
            return None  # eight header-like lines and no Output: not the framing
    if exit_code is None and running is None:
        return None
    head_chars = sum(len(line) for line in lines[:end])
    result = "".join(kept) + text[head_chars:]
    if exit_code is not None:
        return Output(result, exit_code != 0, exit_code=exit_code, explicit=True)
    return Output(result, False, running=running)


def _event(state: _State, payload: dict[str, Any], when: float | None) -> None:
    kind = payload.get("type")
    if kind == "user_message":
        _message(state, "user", str(payload.get("message") or ""), when, "event")
    elif kind == "agent_message":
        _message(state, "assistant", str(payload.get("message") or ""), when, "event")
    elif kind == "agent_reasoning":
        _reasoning_event(state, str(payload.get("text") or ""), when)
    elif kind == "token_count":
        _tokens(state, payload.get("info"))
    elif kind == "turn_aborted":
        _aborted(state, str(payload.get("reason") or "aborted"), when)
    elif kind == "exec_command_end":
        _exec_end(state, payload, when)
    elif kind == "patch_apply_end":
        success = payload.get("success")
        if isinstance(success, bool):
            _signal(state, str(payload.get("call_id") or ""), not success)
    elif kind == "mcp_tool_call_end":
        _mcp_end(state, payload, when)
    elif kind == "item_completed":
        _item_completed(state, payload.get("item"), when)
    elif kind == "collab_agent_spawn_end":
        _spawned(state, payload)
    elif kind in ("error", "stream_error"):
        text = f"error: {payload.get('message') or ''}".rstrip()
        _add(state, text_step("system", text, limits=state.limits), when, model=False)
    elif kind in CONTEXT_EVENTS:
        state.context[f"event:{kind}"] += 1
    else:
        state.skipped[f"event:{kind}"] += 1


def _signal(state: _State, call_id: str, error: bool, *, soft: bool = False) -> None:
    """An explicit status for a call, from an event: kept for an output still to come, and
    applied at once to a call that already has its output. `soft` (item_completed) never
    overrides a signal from an *_end event."""
    if not call_id:
        return
    if soft and call_id in state.explicit and call_id not in state.soft:
        return
    gone = state.explicit.put(call_id, error)
    if gone is not None:
        state.soft.discard(gone[0])
    if soft:
        state.soft.add(call_id)
    else:
        state.soft.discard(call_id)
    call = state.by_call.get(call_id)
    if call is not None and call_id not in state.calls:
        _set_status(call, error)


def _exec_end(state: _State, payload: dict[str, Any], when: float | None) -> None:
    code = number(payload.get("exit_code"))
    status = payload.get("status")
    if code is None and status not in ("failed", "declined", "completed"):
        return
    error = (code is not None and code != 0) or status in ("failed", "declined")
    call_id = str(payload.get("call_id") or "")
    _signal(state, call_id, error)
    session = payload.get("process_id")
    call = _close_session(state, str(session))[0] if session is not None else None
    if call is not None:
        _set_status(call, error)
        if when is not None:
            call.ended_at = when


def _mcp_end(state: _State, payload: dict[str, Any], when: float | None) -> None:
    result = payload.get("result")
    if isinstance(result, dict) and "Err" in result:
        text, error = result["Err"], True
    elif isinstance(result, dict) and isinstance(result.get("Ok"), dict):
        ok = result["Ok"]
        text = content_text(ok.get("content"))
        error = ok.get("isError", ok.get("is_error")) is True
    else:
        return
    call_id = str(payload.get("call_id") or "")
    if call_id and call_id in state.known:
        _signal(state, call_id, error)
        return
    invocation = payload.get("invocation") if isinstance(payload.get("invocation"), dict) else {}
    tool = "__".join(str(invocation.get(k)) for k in ("server", "tool") if invocation.get(k))
    step = _new_call(state, call_id, tool or "(mcp)", invocation.get("arguments"), when)
    set_result(step, text, error=error, limits=state.limits, ended_at=when)
    state.in_response = False  # it carries its result: the response is over


def _item_completed(state: _State, item: Any, when: float | None) -> None:
    """0.149: a completed item. Messages pair with their other copies; tool items only lend
    their explicit status to the call already read (never a second step)."""
    if not isinstance(item, dict):
        state.context["event:item_completed"] += 1
        return
    kind = str(item.get("type") or "").lower().replace("_", "")
    if kind in ("usermessage", "agentmessage"):
        text = content_text(item.get("content")) if "content" in item else item.get("text")
        if isinstance(text, str) and _key(text):
            role = "user" if kind == "usermessage" else "assistant"
            _message(state, role, text, when, "completed")
            return
    state.context["event:item_completed"] += 1
    call_id = str(item.get("call_id") or item.get("id") or "")
    if call_id not in state.known:
        return
    code = number(item.get("exit_code", item.get("exitCode")))
    result = item.get("result")
    flag = result.get("isError") if isinstance(result, dict) else None
    status = item.get("status")
    if code is not None:
        _signal(state, call_id, code != 0, soft=True)
    elif isinstance(flag, bool):
        _signal(state, call_id, flag, soft=True)
    elif status in ("failed", "declined", "error"):
        _signal(state, call_id, True, soft=True)


def _spawned(state: _State, payload: dict[str, Any]) -> None:
    agents = state.meta.setdefault("spawned_agents", [])
    if len(agents) >= MAX_LISTED:
        return
    agent = {
        key: str(payload[target])
        for key, target in (
            ("thread_id", "new_thread_id"),
            ("role", "new_agent_role"),
            ("model", "model"),
        )
        if payload.get(target) not in (None, "")
    }
    if agent:
        agents.append(agent)


def _tokens(state: _State, info: Any) -> None:
    if not isinstance(info, dict):
        return
    if isinstance(info.get("total_token_usage"), dict):
        state.meta["total_token_usage"] = info["total_token_usage"]
    last = info.get("last_token_usage")
    step = state.response_first
    if isinstance(last, dict) and step is not None and step.tokens_in is None:
        step.tokens_in = number(last.get("input_tokens"))
        step.tokens_out = number(last.get("output_tokens"))


def _aborted(state: _State, reason: str, when: float | None) -> None:
    for call in state.turn_calls:
        if call.result is None and call.status == "ok" and call.tool != "web_search":
            set_result(call, f"turn aborted: {reason}", error=True, limits=state.limits)
    state.turn_calls = []
    _add(
        state,
        text_step("system", f"turn aborted: {reason}", limits=state.limits),
        when,
        model=False,
    )
