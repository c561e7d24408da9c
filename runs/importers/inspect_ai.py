"""Inspect AI eval logs (UK AISI `inspect_ai`), log versions 1–3, in both forms:

- `.json`: one `EvalLog` object `{version, status, eval, plan, results, stats, error?,
  samples: [EvalSample], …}`, read member by member (sample by sample);
- `.eval`: a zip with `header.json` (the log without samples), `_journal/start.json`,
  `summaries.json`, `reductions.json` and one `samples/<id>_epoch_<n>.json` per sample. The
  stream is spooled to a temporary file of at most `Limits.max_bytes`, then opened with
  `zipfile`; each member is parsed as a stream as it inflates (never held whole; its
  declared size is not trusted) and the members together inflate to at most
  `Limits.max_bytes` (zip bombs stop there, in bounded memory).

One run per sample (id = `<eval_id>/<sample id>/epoch-<n>`), steps from the sample's
`events` in order:

- `sample_init` -> `system`/`user` steps for the task's first messages (`state.messages`,
  else the sample `input`). When a log has none, the first `model` event's `input` gives
  them; in v3 logs that input is `[]` with `input_refs: [[start, end], …]`, ranges into the
  sample's `message_pool`, and is rebuilt from them.
- `model` -> the output message (`output.choices[0].message`): its reasoning parts a
  `reasoning` step, its text an `assistant` step (batch_id = the message id); tokens from
  `output.usage` (tokens_in = input_tokens + cache read + cache write, tokens_out =
  output_tokens) on the first step the event makes (the next call when it makes none).
  A model `error` -> a `system` step.
- `tool` -> one `tool_call` step holding call and result (id = the tool call id, tool =
  `function`, args = `arguments`, result = `result` as text, `ended_at` = `completed`).
  Status, explicit first: `error {type, message}` -> error ("parsing" -> "invalid": the
  model's call could not be parsed, nothing ran), `failed: true` -> error; otherwise the
  common text rules (`text_errors`) read the result (bash/python tools report stderr and
  exit codes only in text).
- Tree: a `tool` event's nested `events` (a sub-agent run as a tool) and the events inside a
  `span_begin` of type "agent" go under that tool's step (or a `system` step "agent <name>"
  for the span), in a lane of its own (the sub-agent's); main-line steps keep no parent.
  Span nesting comes from `span_begin {id, parent_id}` and each event's `span_id`.
- `error` events and `sample.error` -> `system` steps; `sample_limit` -> a `system` step
  "limit <type>: <message>"; `score` events and `sample.scores` -> metadata. `state`,
  `store`, `sandbox`, `logger`, `info`, `approval`, `input`, `span_end`, `step` -> skipped,
  counted in `metadata["skipped_events"]`.
- A sample without `events` (older logs) is read from its `messages`: assistant
  `tool_calls` -> calls, `tool` messages -> their results by `tool_call_id` (`error` ->
  error).
- Large strings are stored as `attachment://<hash>`; they are resolved from the sample's
  `attachments` wherever a step shows them.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, number, parse_time, token_sum
from .detect import Claim, Sample
from .errors import Skips, TooManySteps, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import Limits, iter_members, read_document

name = "inspect-ai"
label = "Inspect AI eval log (.json or .eval)"

ZIP_MAGIC = b"PK\x03\x04"
ZIP_NAMES = (b"_journal/start.json", b"header.json", b"samples/", b"summaries.json")
SAMPLE_MEMBER = re.compile(r"^samples/.+\.json$")
ATTACHMENT = "attachment://"
HEADER_KEYS = ("version", "status", "eval", "stats", "error", "results")


# --- detection


def claim(sample: Sample) -> Claim:
    """A `.json` log `{version, eval: {task, model, …}, samples|status}`, or a zip whose first
    members are Inspect's (`_journal/start.json`, `header.json`, `samples/…`)."""
    if sample.head.startswith(ZIP_MAGIC):
        names = [n.decode() for n in ZIP_NAMES if n in sample.head[:65536]]
        if names:
            return Claim(0.95, f"a zip with Inspect's members ({', '.join(names)})")
        return Claim(0.3, "a zip file; Inspect's member names are not in its first bytes")
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not one JSON object or an Inspect `.eval` zip")
    spec = top.get("eval")
    if isinstance(spec, dict) and ("task" in spec and "model" in spec):
        if "samples" in top or "status" in top or "version" in top:
            return Claim(0.95, "an `eval` object with `task` and `model`, beside log fields")
        return Claim(0.7, "an `eval` object with `task` and `model`")
    return Claim.no("no `eval` object with `task` and `model`, and not a zip")


# --- reading


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per sample of an Inspect log (`.json` or `.eval`)."""
    head = stream.peek(4)[:4] if hasattr(stream, "peek") else b""  # type: ignore[attr-defined]
    if head == ZIP_MAGIC:
        yield from _parse_zip(stream, source=source, limits=limits)
        return
    header: dict[str, Any] = {}
    count = 0
    for key, index, value in iter_members(
        stream, source=source, limits=limits, arrays={"samples": None}
    ):
        if key == "samples" and index is not None:
            count += 1
            run = _sample_run(
                value, header, source=source, limits=limits, where=f"samples[{index}]"
            )
            if run is not None:
                yield run
        elif key in HEADER_KEYS:
            header[key] = value
    if not header and not count:
        raise TraceError("not an Inspect log: no `eval` and no `samples`", source=source)
    if not count:
        raise TraceError(
            "the log holds no samples (written with log_samples off, or still running)",
            source=source,
            field="samples",
        )


def _parse_zip(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    with tempfile.TemporaryFile() as spool:
        try:
            shutil.copyfileobj(stream, spool, 1024 * 1024)  # the stream stops at max_bytes
        except OSError as exc:
            raise TraceError(f"cannot read: {exc}", source=source) from None
        spool.seek(0)
        try:
            archive = zipfile.ZipFile(spool)
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(f"not a readable zip ({exc}): truncated?", source=source) from None
        with archive:
            budget = _Budget(limits.max_bytes, source)
            members = {info.filename: info for info in archive.infolist()}
            header: dict[str, Any] = {}
            for member in ("header.json", "_journal/start.json"):
                if member in members:
                    value = _member(archive, members[member], budget, source, limits)
                    if isinstance(value, dict):
                        for key in HEADER_KEYS:
                            if key in value and key not in header:
                                header[key] = value[key]
            samples = [n for n in members if SAMPLE_MEMBER.match(n)]
            if not samples:
                raise TraceError(
                    "the .eval zip holds no samples/*.json (no samples logged, or still running)",
                    source=source,
                )
            for member in samples:
                where = f"{source}!{member}"
                try:
                    value = _member(archive, members[member], budget, source, limits)
                except TraceError as exc:
                    if "inflate past" in exc.reason:  # the whole file is over the limit
                        raise
                    yield _broken_sample(member, header, exc)
                    continue
                run = _sample_run(value, header, source=where, limits=limits, where=member)
                if run is not None:
                    yield run


class _Budget:
    """What the zip's members may inflate to, together: each member is read as a stream
    through this count (its declared size is not trusted), so a member that inflates past
    what is left is refused after that many bytes, none of them held."""

    def __init__(self, total: int, source: str) -> None:
        self.left, self.total, self.source = total, total, source

    def open(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _MemberStream:
        try:
            return _MemberStream(archive.open(info), self, info.filename)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self.unreadable(info.filename, exc) from None

    def take(self, count: int, member: str) -> None:
        self.left -= count
        if self.left < 0:
            raise TraceError(
                f"zip members inflate past the limit of {self.total} bytes",
                source=self.source,
                field=member,
            )

    def unreadable(self, member: str, exc: BaseException) -> TraceError:
        return TraceError(f"cannot read zip member: {exc}", source=self.source, field=member)


class _MemberStream(io.RawIOBase):
    """A zip member read as it inflates, each chunk counted against the budget."""

    def __init__(self, raw: IO[bytes], budget: _Budget, member: str) -> None:
        self.raw, self.budget, self.member = raw, budget, member

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # read at most one byte past the budget: enough to know it is over
        want = max(0, min(len(buffer), self.budget.left + 1))
        try:
            data = self.raw.read(want) if want else b""
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self.budget.unreadable(self.member, exc) from None
        self.budget.take(len(data), self.member)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


def _member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, source: str, limits: Limits
) -> Any:
    with budget.open(archive, info) as stream:
        return read_document(stream, source=f"{source}!{info.filename}", limits=limits)


def _broken_sample(member: str, header: dict[str, Any], error: TraceError) -> Run:
    """A sample member that cannot be read: an empty run that says why (nothing is hidden)."""
    run = Run(id=f"{_eval_id(header)}/{member}", format=name, metadata=_meta(header))
    run.skipped = 1
    run.warnings.append(str(error))
    return run


def _eval_id(header: dict[str, Any]) -> str:
    spec = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    return str(spec.get("eval_id") or spec.get("run_id") or "eval")


def _meta(header: dict[str, Any]) -> dict[str, Any]:
    spec = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    meta: dict[str, Any] = {"agent": "inspect-ai"}
    for key in ("task", "model", "eval_id", "run_id", "created", "task_version"):
        value = spec.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            meta[key] = value
    packages = spec.get("packages")
    if isinstance(packages, dict) and isinstance(packages.get("inspect_ai"), str):
        meta["inspect_ai_version"] = packages["inspect_ai"]
    for key in ("version", "status"):
        if isinstance(header.get(key), str | int):
            meta[f"log_{key}"] = header[key]
    return meta


@dataclass
class _State:
    source: str
    limits: Limits
    skips: Skips
    attachments: dict[str, Any]
    pool: list[Any]
    run: Run
    spans: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # id -> (parent, type)
    agents: dict[str, Step] = field(default_factory=dict)  # agent span id -> its opener step
    last: dict[str, str] = field(default_factory=dict)  # opener id -> last step under it
    pending_usage: dict[str, Any] | None = None
    batches: dict[str, str] = field(default_factory=dict)  # tool call id -> model message id
    opened: bool = False  # the task's first messages are in
    skipped: Counter = field(default_factory=Counter)
    scores: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> list[Step]:
        return self.run.steps

    def add(self, step: Step, under: Step | None) -> Step:
        add_step(self.run, step, limits=self.limits, source=self.source)
        step.id = step.id or f"s{len(self.steps)}"
        if any(s.id == step.id for s in self.steps[-51:-1]):
            step.id = f"{step.id}#{len(self.steps)}"
        if under is not None:
            step.parent_id = self.last.get(under.id, under.id)
            step.lane = f"agent:{under.id}"
            self.last[under.id] = step.id
        if self.pending_usage is not None and step.kind in ("assistant", "tool_call"):
            _usage(step, self.pending_usage)
            self.pending_usage = None
        return step

    def resolve(self, value: Any) -> Any:
        """Replace `attachment://<hash>` strings by the attachment they name."""
        if isinstance(value, str):
            if value.startswith(ATTACHMENT):
                found = self.attachments.get(value[len(ATTACHMENT) :])
                return found if isinstance(found, str) else value
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value


def _sample_run(
    sample: Any, header: dict[str, Any], *, source: str, limits: Limits, where: str
) -> Run | None:
    skips = Skips()
    if not isinstance(sample, dict):
        skips.add(
            TraceError(
                f"expected a sample object, got {type(sample).__name__}", source=source, field=where
            )
        )
        run = Run(id=f"{_eval_id(header)}/{where}", format=name, metadata=_meta(header))
        return skips.apply(run)
    attachments = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else {}
    pool = sample.get("message_pool") if isinstance(sample.get("message_pool"), list) else []
    run_id = f"{_eval_id(header)}/{sample.get('id')}/epoch-{sample.get('epoch', 1)}"
    state = _State(source, limits, skips, attachments, pool, Run(id=run_id, format=name))
    events = sample.get("events")
    if isinstance(events, list) and events:
        for index, event in enumerate(events):
            _event_safely(state, event, None, f"{where}.events[{index}]")
    else:
        _from_messages(state, sample.get("messages"))
    if isinstance(sample.get("error"), dict):
        message = sample["error"].get("message")
        state.add(text_step("system", f"sample error: {message}", limits=limits), None)
    meta = _meta(header)
    meta["sample_id"] = sample.get("id")
    meta["epoch"] = sample.get("epoch")
    if isinstance(sample.get("scores"), dict):
        meta["scores"] = {
            k: v.get("value") for k, v in sample["scores"].items() if isinstance(v, dict)
        }
    elif state.scores:
        meta["scores"] = state.scores
    if state.skipped:
        meta["skipped_events"] = dict(state.skipped)
    task = meta.get("task", "eval")
    run = state.run
    run.metadata = meta
    run.name = f"{task} · sample {sample.get('id')} · epoch {sample.get('epoch', 1)}"
    return finish_run(skips.apply(run))


def _event_safely(state: _State, event: Any, under: Step | None, where: str) -> None:
    try:
        _event(state, event, under, where)
    except TooManySteps:
        raise
    except TraceError as exc:
        state.skips.add(TraceError(exc.reason, source=state.source, field=where))


def _agent_of(state: _State, span: Any) -> Step | None:
    """The opener step of the nearest enclosing agent span, if any."""
    hops = 0
    while isinstance(span, str) and hops < 200:
        if span in state.agents:
            return state.agents[span]
        span = state.spans.get(span, (None, ""))[0]
        hops += 1
    return None


def _event(state: _State, event: Any, under: Step | None, where: str) -> None:
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise TraceError("an event without an `event` type", source=state.source)
    kind = event["event"]
    limits = state.limits
    when = parse_time(event.get("timestamp"))
    under = under or _agent_of(state, event.get("span_id"))
    if kind == "span_begin":
        span_id = event.get("id")
        if isinstance(span_id, str):
            state.spans[span_id] = (event.get("parent_id"), str(event.get("type")))
            if event.get("type") == "agent":
                text = f"agent {event.get('name') or ''}".strip()
                opener = state.add(text_step("system", text, limits=limits, started_at=when), under)
                state.agents[span_id] = opener
    elif kind == "sample_init":
        _opening(state, event, under, when)
    elif kind == "model":
        _model(state, event, under, when)
    elif kind == "tool":
        _tool(state, event, under, when, where)
    elif kind == "error":
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        text = f"error: {error.get('message', '')}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    elif kind == "sample_limit":
        text = f"limit {event.get('type')}: {event.get('message', '')}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    elif kind == "score":
        score = event.get("score")
        if isinstance(score, dict):
            state.scores[str(len(state.scores))] = score.get("value")
    elif kind == "subtask":
        for index, inner in enumerate(event.get("events") or []):
            _event_safely(state, inner, under, f"{where}.events[{index}]")
    else:
        state.skipped[kind] += 1


def _opening(state: _State, event: dict[str, Any], under: Step | None, when: float | None) -> None:
    initial = event.get("state") if isinstance(event.get("state"), dict) else {}
    messages = initial.get("messages")
    if not isinstance(messages, list):
        sample = event.get("sample") if isinstance(event.get("sample"), dict) else {}
        messages = sample.get("input")
        messages = (
            [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        )
    _messages_as_text(state, messages, under, when)


def _messages_as_text(state: _State, messages: Any, under: Step | None, when: float | None) -> None:
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") in ("system", "user"):
            text = content_text(state.resolve(message.get("content")))
            step = text_step(message["role"], text, limits=state.limits, started_at=when)
            state.add(step, under)
            state.opened = True


def _model_input(state: _State, event: dict[str, Any]) -> list[Any]:
    refs = event.get("input_refs")
    if isinstance(refs, list) and state.pool:
        rebuilt: list[Any] = []
        for ref in refs:
            if isinstance(ref, list) and len(ref) == 2:
                start, end = number(ref[0]), number(ref[1])
                if start is not None and end is not None:
                    rebuilt.extend(state.pool[max(start, 0) : max(end, 0)])
        return rebuilt
    inputs = event.get("input")
    return inputs if isinstance(inputs, list) else []


def _model(state: _State, event: dict[str, Any], under: Step | None, when: float | None) -> None:
    limits = state.limits
    if not state.opened:
        _messages_as_text(state, _model_input(state, event), under, when)
        state.opened = True
    if event.get("error"):
        text = f"model error: {content_text(event.get('error'))}"
        state.add(text_step("system", text, limits=limits, started_at=when), under)
    output = event.get("output") if isinstance(event.get("output"), dict) else {}
    choices = output.get("choices")
    message = (
        choices[0].get("message")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    made = []
    if isinstance(message, dict):
        content = state.resolve(message.get("content"))
        parts = content if isinstance(content, list) else [content]
        reasoning = [
            p.get("reasoning")
            for p in parts
            if isinstance(p, dict) and p.get("type") == "reasoning"
        ]
        reasoning = [r for r in reasoning if isinstance(r, str) and r.strip()]
        text = content_text(
            [p for p in parts if not (isinstance(p, dict) and p.get("type") == "reasoning")]
        )
        batch = message.get("id") if isinstance(message.get("id"), str) else None
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("id"), str) and batch:
                state.batches[call["id"]] = batch
        if reasoning:
            made.append(text_step("reasoning", "\n".join(reasoning), limits=limits, batch_id=batch))
        if text.strip():
            made.append(text_step("assistant", text, limits=limits, batch_id=batch))
    usage = output.get("usage") if isinstance(output.get("usage"), dict) else None
    for step in made:
        step.started_at = when
        step.ended_at = parse_time(event.get("completed"))
        state.add(step, under)
    if usage is not None:
        if made:
            _usage(made[0], usage)
        else:
            state.pending_usage = usage


def _usage(step: Step, usage: dict[str, Any]) -> None:
    tokens_in = token_sum(
        usage, ("input_tokens", "input_tokens_cache_read", "input_tokens_cache_write")
    )
    if tokens_in is not None:
        step.tokens_in = tokens_in
    step.tokens_out = number(usage.get("output_tokens"))


def _tool(
    state: _State, event: dict[str, Any], under: Step | None, when: float | None, where: str
) -> None:
    limits = state.limits
    step = tool_step(
        tool=str(event.get("function") or ""),
        args=state.resolve(event.get("arguments")),
        limits=limits,
    )
    step.id = str(event["id"]) if isinstance(event.get("id"), str | int) else None
    step.batch_id = state.batches.get(step.id or "")
    step.started_at = when
    state.add(step, under)
    result = state.resolve(event.get("result"))
    text = result if isinstance(result, str) else content_text(result)
    error = event.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        text = f"{text}\n{message}".strip() if isinstance(message, str) else text
        set_result(
            step, text, error=True, limits=limits, ended_at=parse_time(event.get("completed"))
        )
        if error.get("type") == "parsing":
            step.status = "invalid"
    else:
        failed = event.get("failed") is True
        set_result(
            step,
            text,
            error=failed or text_errors.is_error(text),
            limits=limits,
            ended_at=parse_time(event.get("completed")),
        )
    inner = event.get("events")
    if isinstance(inner, list) and inner:
        state.agents.setdefault(f"tool:{step.id}", step)  # a sub-agent run as a tool
        for index, nested in enumerate(inner):
            _event_safely(state, nested, step, f"{where}.events[{index}]")


def _from_messages(state: _State, messages: Any) -> None:
    """A sample without events: calls from assistant `tool_calls`, results from `tool`
    messages by `tool_call_id`."""
    limits = state.limits
    calls: dict[str, Step] = {}
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = content_text(state.resolve(message.get("content")))
        if role in ("system", "user"):
            state.add(text_step(role, text, limits=limits), None)
        elif role == "assistant":
            batch = message.get("id") if isinstance(message.get("id"), str) else None
            if text.strip():
                state.add(text_step("assistant", text, limits=limits, batch_id=batch), None)
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    step = tool_step(
                        tool=str(call.get("function") or ""),
                        args=call.get("arguments"),
                        limits=limits,
                    )
                    step.batch_id = batch
                    step.id = str(call["id"]) if isinstance(call.get("id"), str) else None
                    state.add(step, None)
                    if step.id:
                        calls[step.id] = step
        elif role == "tool":
            step = calls.pop(str(message.get("tool_call_id")), None)
            if step is None:
                state.skips.note(
                    f"{state.source}: a tool message matches no call; kept as a call of its own"
                )
                step = state.add(
                    tool_step(tool=str(message.get("function") or ""), args=None, limits=limits),
                    None,
                )
                step.args = None
            error = message.get("error")
            if isinstance(error, dict):
                set_result(
                    step, f"{text}\n{error.get('message', '')}".strip(), error=True, limits=limits
                )
                if error.get("type") == "parsing":
                    step.status = "invalid"
            else:
                set_result(step, text, error=text_errors.is_error(text), limits=limits)
