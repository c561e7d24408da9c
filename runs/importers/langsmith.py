"""LangSmith / LangChain run exports (the Run data format of `langsmith.schemas`), in the
forms they are saved in: a JSON array of runs (`Client.list_runs`, the UI's JSON export),
JSONL with one run per line, `{"runs": [...]}`, and the batch-ingest body
`{"post": [new runs], "patch": [updates]}` (`POST /runs/batch`).

A run is one node of a trace: `{id, name, run_type, start_time, end_time?, inputs,
outputs?, error?, status?, extra: {metadata, runtime}, parent_run_id?, trace_id,
dotted_order, prompt_tokens?, completion_tokens?, total_cost?, …}`. Mapping, one loopboard
run per trace (id = `trace_id`, else the root run's id):

- Batch bodies: a `patch` entry updates the `post` entry with the same `id` (patch wins,
  `extra` merged). Runs repeated by id in an export are merged the same way.
- Order: by `dotted_order` (the depth-first order of starts), else by `start_time`.
- `tool` runs -> `tool_call` steps: tool = `name`, args = `inputs`, result = the output:
  `outputs.output` (a serialized LangChain `ToolMessage` gives its `kwargs.content`), else
  the `outputs` object. Status, explicit first: `error` set (a tool that raised) or
  `status: "error"` -> error; a ToolMessage with `kwargs.status: "error"` -> error; a
  ToolMessage with `status: "success"` -> ok; otherwise the common text rules
  (`text_errors`) read the result.
- `retriever` runs are calls too (tool = `name`, args = `inputs`, result = the documents).
- `llm` runs -> `assistant` steps: the text of the output (`generations[0][0]` text or
  message content, or a raw completion's `choices[0].message.content`; requested tool calls
  are listed as "[tool call] name(args)"); tokens from `prompt_tokens`/`completion_tokens`,
  else `outputs.llm_output.token_usage`, `usage` or `usage_metadata`; cost = `total_cost`.
  The first LLM run of a trace without a user step also gives a `user` step: the last user
  message of its inputs. An `llm` run with `error` adds a `system` step.
- `chain`, `prompt`, `parser`, `embedding` runs are structure, not steps; the root run's
  text input becomes a `user` step and an `error` on any of them a `system` step.
- Tree: `parent_run_id`, else the second-to-last segment of `dotted_order`. A step's parent
  is the nearest ancestor run that is a step; when every step hangs off no step the run is
  linear. Threads (`extra.metadata.thread_id`/`session_id`/`conversation_id`) and the
  project (`session_name`) go to metadata.
- Times: `start_time`/`end_time` (ISO, a time without zone is UTC).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import content_text, fnumber, number, parse_time
from .detect import Claim, Sample
from .errors import Skips, TraceError, too_many_held
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import (
    BOM,
    JsonlReader,
    Limits,
    iter_document,
    iter_members,
    looks_like_jsonl,
    stream_head,
)

name = "langsmith"
label = "LangSmith run export"

RUN_TYPES = {"llm", "chain", "tool", "retriever", "embedding", "prompt", "parser"}
CALL_TYPES = {"tool", "retriever"}
SEGMENT = re.compile(r"^\d{8}T\d{6,}Z(?P<id>.+)$")
THREAD_KEYS = ("thread_id", "session_id", "conversation_id")
BATCH_KEYS = ("post", "patch", "runs")


# --- detection


def _is_run(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and record.get("run_type") in RUN_TYPES
        and "id" in record
        and any(k in record for k in ("dotted_order", "trace_id", "parent_run_id", "start_time"))
    )


def claim(sample: Sample) -> Claim:
    """Runs `{id, run_type: llm|chain|tool|…, trace_id|dotted_order|start_time}` in a list,
    in JSONL, or in a `{post, patch}` batch body."""
    top = sample.top
    if isinstance(top, dict) and any(isinstance(top.get(k), list) for k in BATCH_KEYS):
        items = [r for k in BATCH_KEYS for r in (top.get(k) or []) if isinstance(top.get(k), list)]
        if any(_is_run(r) for r in items):
            keys = ", ".join(f"`{k}`" for k in BATCH_KEYS if k in top)
            return Claim(0.95, f"a {keys} body of LangSmith runs")
        patches = top.get("patch")
        if isinstance(patches, list) and any(
            isinstance(r, dict) and "dotted_order" in r for r in patches
        ):
            return Claim(0.9, "a `patch` list of runs with `dotted_order`")
    records = sample.records
    if not records:
        return Claim.no("no records")
    fit = sum(1 for r in records if _is_run(r)) / len(records)
    if not fit:
        return Claim.no("no record is a run `{id, run_type, trace_id|dotted_order|start_time}`")
    dotted = any(isinstance(r, dict) and "dotted_order" in r for r in records)
    score = 0.5 + 0.35 * fit + (0.1 if dotted else 0.0)
    return Claim(
        score,
        f"{fit:.0%} of the records are LangSmith runs{' with dotted_order' if dotted else ''}",
    )


# --- reading


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per trace of a LangSmith export."""
    skips = Skips()
    runs: dict[str, dict[str, Any]] = {}
    order: list[str] = []

    def take(record: Any, where: str, patch: bool = False) -> None:
        if not isinstance(record, dict) or record.get("id") is None:
            skips.add(TraceError("not a run object with an `id`", source=source, field=where))
            return
        run_id = str(record["id"])
        if run_id in runs:
            _merge(runs[run_id], record)
        else:
            if len(runs) >= limits.max_held_steps:
                raise too_many_held(limits.max_held_steps, source=source)
            runs[run_id] = dict(record)
            runs[run_id]["_patch_only"] = patch
            order.append(run_id)

    head = stream_head(stream).lstrip(BOM + b" \t\r\n")
    if head[:1] == b"{" and not _one_run_per_line(head):
        for key, index, value in iter_members(
            stream, source=source, limits=limits, arrays={k: None for k in BATCH_KEYS}
        ):
            if key in BATCH_KEYS and index is not None:
                take(value, f"{key}[{index}]", patch=key == "patch")
    elif head[:1] == b"[":
        for index, value in enumerate(iter_document(stream, "item", source=source, limits=limits)):
            take(value, f"[{index}]")
    else:
        reader = JsonlReader(stream, source=source, limits=limits, skips=skips)
        for line, value in reader:
            if isinstance(value, dict) and any(isinstance(value.get(k), list) for k in BATCH_KEYS):
                for key in BATCH_KEYS:
                    for index, item in enumerate(value.get(key) or []):
                        take(item, f"line {line} {key}[{index}]", patch=key == "patch")
            else:
                take(value, f"line {line}")
        reader.check_not_empty()
    if not runs:
        raise skips.first or TraceError("no runs", source=source)
    yield from _traces(runs, order, source=source, limits=limits, skips=skips)


def _one_run_per_line(head: bytes) -> bool:
    """JSONL of run objects (several lines that are each a whole object)."""
    if not looks_like_jsonl(head):
        return False
    lines = [line for line in head.split(b"\n") if line.strip()]
    return len(lines) > 1


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if key == "extra" and isinstance(value, dict) and isinstance(into.get("extra"), dict):
            into["extra"] = {**into["extra"], **value}
        elif value is not None or key not in into:
            into[key] = value


def _parent_of(run: dict[str, Any]) -> str | None:
    parent = run.get("parent_run_id")
    if parent:
        return str(parent)
    dotted = run.get("dotted_order")
    if isinstance(dotted, str) and "." in dotted:
        match = SEGMENT.match(dotted.split(".")[-2])
        if match:
            return match.group("id")
    return None


def _trace_of(run: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    if run.get("trace_id"):
        return str(run["trace_id"])
    dotted = run.get("dotted_order")
    if isinstance(dotted, str):
        match = SEGMENT.match(dotted.split(".")[0])
        if match:
            return match.group("id")
    seen, current = 0, run
    while (parent := _parent_of(current)) in runs and seen < 10_000:
        current, seen = runs[parent], seen + 1
    return str(current.get("id"))


def _sort_key(run: dict[str, Any]) -> tuple[str, float]:
    dotted = run.get("dotted_order")
    return (dotted if isinstance(dotted, str) else "", parse_time(run.get("start_time")) or 0.0)


def _traces(
    runs: dict[str, dict[str, Any]], order: list[str], *, source: str, limits: Limits, skips: Skips
) -> Iterator[Run]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for run_id in order:
        run = runs[run_id]
        traces.setdefault(_trace_of(run, runs), []).append(run)
    first = True
    for trace_id, members in traces.items():
        members.sort(key=_sort_key)
        result = _trace_run(trace_id, members, source=source, limits=limits)
        if first:
            skips.apply(result)
            first = False
        yield finish_run(result)


def _trace_run(trace_id: str, members: list[dict[str, Any]], *, source: str, limits: Limits) -> Run:
    anchor: dict[str, str | None] = {}  # LangSmith run id -> the step its children hang off
    meta: dict[str, Any] = {"agent": "langsmith", "trace_id": trace_id}
    result = Run(id=trace_id, format=name, metadata=meta)
    has_user = False
    patch_only = 0
    for run in members:
        run_id = str(run.get("id"))
        parent = _parent_of(run)
        hang = anchor.get(parent) if parent is not None else None
        made = _steps_of(run, limits, first_llm=not has_user, root=parent is None)
        patch_only += bool(run.get("_patch_only"))
        has_user = has_user or any(s.kind == "user" for s in made)
        for index, step in enumerate(made):
            step.id = run_id if index == len(made) - 1 else f"{run_id}#{index}"
            step.parent_id = hang
            add_step(result, step, limits=limits, source=source)
        anchor[run_id] = made[-1].id if made else hang
        _run_meta(meta, run, root=parent is None)
    if patch_only:
        meta["runs_without_post"] = patch_only
    root = members[0]
    if isinstance(root.get("name"), str):
        result.name = f"{root['name'][:150]} · {trace_id[:8]}"
    return result


def _run_meta(meta: dict[str, Any], run: dict[str, Any], *, root: bool) -> None:
    extra = run.get("extra") if isinstance(run.get("extra"), dict) else {}
    metadata = extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {}
    for key in THREAD_KEYS:
        if isinstance(metadata.get(key), str):
            meta.setdefault("thread_id", metadata[key])
    model = metadata.get("ls_model_name")
    if isinstance(model, str):
        meta.setdefault("model", model)
    if isinstance(run.get("session_name"), str):
        meta.setdefault("project", run["session_name"])
    runtime = extra.get("runtime") if isinstance(extra.get("runtime"), dict) else {}
    if isinstance(runtime.get("sdk"), str):
        meta.setdefault("sdk", f"{runtime['sdk']} {runtime.get('sdk_version', '')}".strip())
    if root and isinstance(run.get("status"), str):
        meta["status"] = run["status"]


def _steps_of(run: dict[str, Any], limits: Limits, *, first_llm: bool, root: bool) -> list[Step]:
    kind = run.get("run_type")
    started, ended = parse_time(run.get("start_time")), parse_time(run.get("end_time"))
    error = run.get("error")
    error = error if isinstance(error, str) and error else None
    made: list[Step] = []
    if kind in CALL_TYPES:
        step = tool_step(tool=str(run.get("name") or ""), args=run.get("inputs"), limits=limits)
        step.started_at = started
        result, flag = _tool_output(run.get("outputs"))
        if error is not None:
            result = f"{content_text(result)}\n{error}".strip() if result else error
        failed = error is not None or run.get("status") == "error" or flag is True
        if not failed and flag is None:
            failed = text_errors.is_error(
                content_text(result) if not isinstance(result, str) else result
            )
        set_result(step, result, error=failed, limits=limits, ended_at=ended)
        made.append(step)
    elif kind == "llm":
        inputs = run.get("inputs")
        if first_llm:
            text = _last_user_text(inputs)
            if text:
                made.append(text_step("user", text, limits=limits, started_at=started))
        step = text_step("assistant", _llm_text(run.get("outputs")), limits=limits)
        step.started_at, step.ended_at = started, ended
        _tokens(step, run)
        made.append(step)
        if error is not None:
            made.append(text_step("system", f"llm error: {error}", limits=limits, started_at=ended))
    else:
        if root:
            text = _input_text(run.get("inputs"))
            if text:
                made.append(text_step("user", text, limits=limits, started_at=started))
        if error is not None:
            text = f"{kind or 'run'} {run.get('name') or ''} failed: {error}"
            made.append(text_step("system", text, limits=limits, started_at=ended))
    return made


def _tool_output(outputs: Any) -> tuple[Any, bool | None]:
    """The result of a tool run and its explicit status (None: the output does not say)."""
    if not isinstance(outputs, dict):
        return outputs, None
    value = outputs.get("output", outputs) if len(outputs) == 1 or "output" in outputs else outputs
    if isinstance(value, dict) and value.get("lc") == 1 and isinstance(value.get("kwargs"), dict):
        kwargs = value["kwargs"]
        status = kwargs.get("status")
        flag = {"error": True, "success": False}.get(status) if isinstance(status, str) else None
        return content_text(kwargs.get("content")), flag
    if isinstance(value, dict) and value.get("type") == "tool" and "content" in value:
        status = value.get("status")
        flag = {"error": True, "success": False}.get(status) if isinstance(status, str) else None
        return content_text(value.get("content")), flag
    return value, None


def _message_text(message: Any) -> str:
    if isinstance(message, dict):
        body = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
        text = content_text(body.get("content"))
        calls = body.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict):
                function = call.get("function") if isinstance(call.get("function"), dict) else call
                args = function.get("args", function.get("arguments"))
                text += f"\n[tool call] {function.get('name')}({content_text(args) if isinstance(args, str) else args})"
        return text.strip()
    return content_text(message)


def _llm_text(outputs: Any) -> str:
    if not isinstance(outputs, dict):
        return content_text(outputs)
    generations = outputs.get("generations")
    if isinstance(generations, list) and generations:
        first = (
            generations[0][0]
            if isinstance(generations[0], list) and generations[0]
            else generations[0]
        )
        if isinstance(first, dict):
            if "message" in first:
                return _message_text(first["message"]) or content_text(first.get("text"))
            return content_text(first.get("text"))
    choices = outputs.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _message_text(choices[0].get("message")) or content_text(choices[0].get("text"))
    if "output" in outputs:
        return _message_text(outputs["output"])
    return ""


def _messages(inputs: Any) -> list[Any]:
    if not isinstance(inputs, dict):
        return []
    messages = inputs.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], list):
        messages = messages[0]  # LangChain: a batch of message lists
    return messages if isinstance(messages, list) else []


def _role(message: Any) -> str | None:
    if not isinstance(message, dict):
        return None
    if isinstance(message.get("role"), str):
        return message["role"]
    ids = message.get("id")
    if isinstance(ids, list) and ids:
        return {"HumanMessage": "user", "SystemMessage": "system"}.get(str(ids[-1]))
    return message.get("type") if isinstance(message.get("type"), str) else None


def _last_user_text(inputs: Any) -> str:
    for message in reversed(_messages(inputs)):
        if _role(message) in ("user", "human"):
            return _message_text(message)
    prompts = inputs.get("prompts") if isinstance(inputs, dict) else None
    if isinstance(prompts, list) and prompts:
        return content_text(prompts[-1])
    return ""


def _input_text(inputs: Any) -> str:
    if isinstance(inputs, str):
        return inputs
    if not isinstance(inputs, dict):
        return ""
    if _messages(inputs):
        return _last_user_text(inputs)
    for key in ("input", "question", "query", "prompt", "task"):
        if isinstance(inputs.get(key), str):
            return inputs[key]
    return ""


def _tokens(step: Step, run: dict[str, Any]) -> None:
    prompt, completion = number(run.get("prompt_tokens")), number(run.get("completion_tokens"))
    outputs = run.get("outputs") if isinstance(run.get("outputs"), dict) else {}
    usage = None
    llm_output = outputs.get("llm_output")
    if isinstance(llm_output, dict):
        usage = llm_output.get("token_usage") or llm_output.get("usage")
    usage = usage or outputs.get("usage") or outputs.get("usage_metadata")
    if isinstance(usage, dict):
        if prompt is None:
            prompt = number(usage.get("prompt_tokens", usage.get("input_tokens")))
        if completion is None:
            completion = number(usage.get("completion_tokens", usage.get("output_tokens")))
    step.tokens_in, step.tokens_out = prompt, completion
    step.cost = fnumber(run.get("total_cost"))
