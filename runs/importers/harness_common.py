"""Small helpers shared by the agent-harness importers (Claude Code, Codex, Gemini, SWE-agent,
mini-swe-agent, OpenHands): reading a whole JSON document or JSONL lines with clear errors,
flattening content blocks to text, and finishing a run (seq numbers, limits, skipped lines).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run, Step

from .base import Limits, TraceError, clip_strings, json_depth_ok, loads_line

MAX_WARNINGS = 100


def load_document(stream: IO[bytes], *, source: str, limits: Limits) -> Any:
    """Return the one JSON value of a whole-file format, or raise TraceError saying where."""
    data = stream.read()
    if not data.strip():
        raise TraceError("empty file", source=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"invalid UTF-8 at byte {exc.start}", source=source) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (truncated file?)" if exc.pos >= len(text.rstrip()) else ""
        raise TraceError(
            f"invalid JSON: {exc.msg} (column {exc.colno}){hint}", source=source, line=exc.lineno
        ) from None
    except RecursionError:
        raise TraceError("JSON nested too deeply", source=source) from None
    if not json_depth_ok(value, limits.max_depth):
        raise TraceError(f"JSON nested deeper than {limits.max_depth} levels", source=source)
    return value


class JsonlReader:
    """Iterate the JSON objects of a JSONL stream; bad lines are reported, skipped and counted."""

    def __init__(self, stream: IO[bytes], *, source: str, limits: Limits) -> None:
        self.stream, self.source, self.limits = stream, source, limits
        self.skipped = 0
        self.valid = 0
        self.warnings: list[str] = []
        self.first_error: TraceError | None = None

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for number, raw in enumerate(self.stream, start=1):
            if not raw.strip():
                continue
            try:
                obj = loads_line(
                    raw.rstrip(b"\r\n"), source=self.source, line=number, limits=self.limits
                )
                if not isinstance(obj, dict):
                    raise TraceError(
                        f"expected a JSON object, got {type(obj).__name__}",
                        source=self.source,
                        line=number,
                    )
            except TraceError as exc:
                self.skip(exc)
                continue
            self.valid += 1
            yield number, obj

    def skip(self, exc: TraceError) -> None:
        """Count one unusable line and keep its message."""
        self.skipped += 1
        self.first_error = self.first_error or exc
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(str(exc))

    def check_not_empty(self) -> None:
        """Fail when the file held no valid line at all."""
        if self.valid == 0:
            if self.first_error is not None:
                raise self.first_error
            raise TraceError("empty file: no records", source=self.source)

    def annotate(self, run: Run) -> Run:
        """Copy the skipped count and warnings onto a run."""
        run.skipped = self.skipped
        run.warnings = list(self.warnings)
        return run


def finish_run(run: Run, *, source: str, limits: Limits) -> Run:
    """Number the steps 0.. in order and enforce the step limit."""
    if len(run.steps) > limits.max_steps:
        raise TraceError(f"run {run.id!r} has more than {limits.max_steps} steps", source=source)
    for seq, step in enumerate(run.steps):
        step.seq = seq
    return run


def content_text(content: Any) -> str:
    """Return the text of a message content: a string, or a list of text blocks/parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return str(content)


def parse_json_string(value: Any) -> Any:
    """Return the JSON value inside a string (tool arguments), or the string when it is not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def tool_step(*, tool: str, args: Any, limits: Limits, **fields: Any) -> Step:
    """Return a tool_call step with the name cut to 200 chars and long strings clipped."""
    step = Step(
        seq=0,
        kind="tool_call",
        tool=(tool or "(unknown)")[:200],
        args=clip_strings(args if args is not None else {}, limits.max_value_chars),
        **fields,
    )
    return step


def text_step(kind: str, text: str, *, limits: Limits, **fields: Any) -> Step:
    """Return a message step (user/assistant/system/reasoning) with clipped text."""
    return Step(seq=0, kind=kind, text=clip_strings(text, limits.max_value_chars), **fields)


def set_result(
    step: Step, result: Any, *, error: bool, limits: Limits, ended_at: float | None = None
) -> None:
    """Store a call's result and status on its step."""
    step.result = clip_strings(result, limits.max_value_chars)
    step.status = "error" if error else "ok"
    if ended_at is not None:
        step.ended_at = ended_at


def head_lines(head: bytes, limit: int = 20) -> list[Any]:
    """Return the JSON values of the first complete lines of a head (cut last line dropped)."""
    lines = head.split(b"\n")
    if not head.endswith(b"\n") and len(lines) > 1:
        lines = lines[:-1]
    values = []
    for raw in lines[:limit]:
        raw = raw.strip()
        if not raw:
            continue
        try:
            values.append(json.loads(raw))
        except ValueError:
            if len(lines) == 1:  # one (possibly cut) line: fall back to regex checks
                break
            continue
    return values


def first_object_prefix(head: bytes, chars: int = 4096) -> str:
    """Return the start of the head as text, whitespace-trimmed, for cheap regex sniffing."""
    return head[:chars].decode("utf-8", "replace").lstrip("\ufeff \t\r\n")


def number(value: Any) -> int | None:
    """Return an int for a JSON number (not bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def fnumber(value: Any) -> float | None:
    """Return a float for a JSON number (not bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
