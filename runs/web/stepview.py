"""Page builder: one step in detail, as collapsible JSON, and what changed since the same call.

Trace content is untrusted: everything here is built with format_html/escape, and sizes are
bounded (string values cut at STRING_CHARS, at most MAX_NODES nodes, diffs over DIFF_CHARS).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from django.shortcuts import get_object_or_404
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from ..models import Run, Step

STRING_CHARS = 400
MAX_NODES = 1500
DIFF_CHARS = 20_000
DIFF_LINES = 400


class _Budget:
    def __init__(self, nodes: int) -> None:
        self.nodes = nodes


def json_html(value: Any, *, full: bool = False) -> SafeString:
    """Return a value as nested, collapsible HTML (objects and arrays are <details>)."""
    budget = _Budget(MAX_NODES * (20 if full else 1))
    return mark_safe(_node(value, budget, full, depth=0))  # noqa: S308 - every part escaped


def _node(value: Any, budget: _Budget, full: bool, depth: int) -> str:
    budget.nodes -= 1
    if isinstance(value, dict | list):
        pairs = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        if not pairs:
            return "{}" if isinstance(value, dict) else "[]"
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        parts = []
        for key, item in pairs:
            if budget.nodes <= 0:
                parts.append(
                    format_html('<li class="json__more">… {} more</li>', len(pairs) - len(parts))
                )
                break
            label = (
                format_html('<span class="json__key">{}</span>: ', key)
                if isinstance(value, dict)
                else ""
            )
            parts.append(f"<li>{label}{_node(item, budget, full, depth + 1)}</li>")
        summary = format_html(
            '<summary>{}<span class="json__count">{} {}</span></summary>',
            opening,
            len(pairs),
            ("key" if isinstance(value, dict) else "item") + ("" if len(pairs) == 1 else "s"),
        )
        is_open = " open" if depth < 3 else ""
        return f'<details class="json__box"{is_open}>{summary}<ul>{"".join(parts)}</ul>{closing}</details>'
    if isinstance(value, str):
        if not full and len(value) > STRING_CHARS:
            return format_html(
                '<span class="json__str">"{}…"</span> <span class="json__cut">({} chars)</span>',
                value[:STRING_CHARS],
                len(value),
            )
        return format_html('<span class="json__str">"{}"</span>', value)
    if value is None:
        return '<span class="json__null">null</span>'
    if isinstance(value, bool):
        return format_html('<span class="json__bool">{}</span>', "true" if value else "false")
    return format_html('<span class="json__num">{}</span>', value)


def is_large(value: Any) -> bool:
    """Return whether a value has something json_html cuts short."""
    if value is None:
        return False
    text = _text(value)
    return len(text) > STRING_CHARS * 4 or text.count(",") > MAX_NODES


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class DiffLine:
    kind: str  # "add" | "del" | "ctx" | "hunk"
    text: str


def diff_lines(before: Any, after: Any) -> list[DiffLine]:
    """Return a unified diff of two values (pretty JSON, sorted keys), bounded in size."""
    a = _text(before)[:DIFF_CHARS].splitlines()
    b = _text(after)[:DIFF_CHARS].splitlines()
    lines = []
    for line in difflib.unified_diff(a, b, lineterm="", n=2):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")
        lines.append(DiffLine(kind, line[:1000]))
        if len(lines) >= DIFF_LINES:
            lines.append(DiffLine("hunk", "… diff cut short"))
            break
    return lines


def previous_call(step: Step) -> tuple[Step | None, str]:
    """Return the previous call with the same signature (else the same tool), and which."""
    if step.kind != "tool_call":
        return None, ""
    earlier = Step.objects.filter(run_id=step.run_id, seq__lt=step.seq).order_by("-seq")
    if step.call_sig:
        same = earlier.filter(call_sig=step.call_sig).first()
        if same:
            return same, "signature"
    if step.tool:
        same = earlier.filter(tool=step.tool, kind="tool_call").first()
        if same:
            return same, "tool"
    return None, ""


def text_before(step: Step, limit: int = 50) -> str:
    """Return the assistant text (and reasoning) written just before a call."""
    rows = (
        Step.objects.filter(run_id=step.run_id, seq__lt=step.seq, seq__gte=max(step.seq - limit, 0))
        .order_by("-seq")
        .values_list("kind", "text")
    )
    texts = []
    for kind, text in rows:
        if kind == "tool_call" or kind == "user":
            break
        if kind in ("assistant", "reasoning") and text:
            texts.append(text[:DIFF_CHARS])
    return "\n".join(reversed(texts))


@dataclass
class StepDiff:
    previous: Step
    by: str  # "signature" | "tool"
    args: list[DiffLine]
    result: list[DiffLine]
    text: list[DiffLine]
    text_now: str
    between: int  # steps in between


def step_diff(step: Step) -> StepDiff | None:
    """Return what changed between a call and the previous one like it."""
    previous, by = previous_call(step)
    if previous is None:
        return None
    text_now = text_before(step)
    return StepDiff(
        previous=previous,
        by=by,
        args=diff_lines(previous.args, step.args),
        result=diff_lines(previous.result, step.result),
        text=diff_lines(text_before(previous), text_now),
        text_now=text_now,
        between=step.seq - previous.seq - 1,
    )


def get_step(run: Run, seq: int) -> Step:
    """Return a run's step by seq (404 if absent)."""
    return get_object_or_404(Step.objects.filter(run=run), seq=seq)


__all__ = ["DiffLine", "StepDiff", "diff_lines", "escape", "json_html", "step_diff"]
