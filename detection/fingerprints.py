"""Loop fingerprints: one stable id per kind of loop, the same in every run of an agent.

Part of the engine's library (standard library only), so the worker, the back-test, the run
comparison and a benchmark all fingerprint a finding the same way::

    fingerprint(finding, steps) -> str   # 16 hex digits
    describe(finding, steps) -> str      # the issue title, in words
    seqs_needed(finding) -> list[int]    # the steps of the run the two functions read
    scrub_value(value) -> str            # a value's text without its run-specific parts

``finding`` is a ``detection.Finding``; ``steps`` are the run's ``detection.Step`` values, as
a mapping seq -> step or any iterable of steps (only the steps at ``seqs_needed(finding)``
are read; steps that are missing make the fingerprint fall back to what the finding holds).

A fingerprint is the SHA-1 of a *shape*: the detector, the tool and the loop's normalised
form, with every run-specific value left out:

- repeat, mutating_failure, read_range, near_repeat: the tool and the shape of its arguments
  (the keys and the kinds of value, never the values), plus the error for a failing call;
- blocker: where it is blocked (tool or host) and its error fingerprint
  (``detection.keys.error_fault``), quoted names removed;
- oscillation: the cycle's motif of tools, rotated to start at its smallest tool;
- batch_repeat: the tools of the batch; streak: the tool;
- result_stall: the tool and the result's shape ("empty" for an empty result);
- message_loop: the repeated message's words; budget: the budget (steps, tokens, cost, quota).

Text is reduced to its words: ids, hashes, UUIDs, numbers, timestamps, URLs, paths and quoted
strings are replaced by placeholders before it counts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from .catalogue import title
from .findings import Finding
from .keys import DEFAULT_VOLATILE, call_signature, dropped_keys, error_fault, json_in_text
from .step import Step

__all__ = ["describe", "fingerprint", "scrub_value", "seqs_needed", "shape"]

SEQS_READ = 12  # a cycle of MAX_PERIOD tools shows twice in 10 steps
FAILED = frozenset({"error", "invalid"})
ARGS_DETECTORS = frozenset({"repeat", "mutating_failure", "read_range", "near_repeat"})
MAX_TEXT = 160
MAX_KEYS = 30
SCRUB_DEPTH = 32  # deeper values are compared as they are

_HEX = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b0x[0-9a-f]+\b|\b(?=[a-z]*\d)[0-9a-z_-]{12,}\b|\b(?=[a-f]*\d)[0-9a-f]{6,}\b",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\b\d\d?:\d\d(?::\d\d(?:[.,]\d+)?)?\b"
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`|‘[^’\n]*’|“[^”\n]*”|<arg>")
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+~-]+)+/?|\b[\w.@+-]+(?:/[\w.@+-]+)+/?")
_DIGIT = re.compile(r"\d")
_PREFIXED_ID = re.compile(r"\b[a-z]{2,12}[_-](?=[0-9a-z]*\d)[0-9a-z]{8,}\b", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s+")


def fingerprint(finding: Finding, steps: Any = ()) -> str:
    """Return the finding's loop fingerprint: 16 hex digits, equal for the same loop."""
    return hashlib.sha1(shape(finding, steps).encode()).hexdigest()[:16]


def seqs_needed(finding: Finding) -> list[int]:
    """Return the seqs of the steps `fingerprint` and `describe` read for this finding."""
    return list(finding.seqs[:SEQS_READ])


def shape(finding: Finding, steps: Any = ()) -> str:
    """Return the text the fingerprint hashes: detector, tool and the loop's shape."""
    found = _steps_of(finding, steps)
    detector, tool = finding.detector, finding.tool or ""
    first = next((s for s in found if s.is_tool_call), None)
    if detector in ARGS_DETECTORS:
        form = _value_shape(first.args) if first else _scrub(finding.signature.split(":")[0])
        if first is not None and first.status in FAILED:
            form += " fails: " + _fault(first)
        return f"{detector}|{tool}|{form}"
    if detector == "blocker":
        return f"blocker|{_blocker_scope(finding)}|{_blocker_fault(finding, found)}"
    if detector == "oscillation":
        return f"oscillation|{','.join(_motif(finding, found))}"
    if detector == "batch_repeat":
        tools = sorted({s.tool or "?" for s in found if s.is_tool_call})
        return f"batch_repeat|{','.join(tools) or tool}"
    if detector == "result_stall":
        return f"result_stall|{tool}|{_result_shape(first.result) if first else '?'}"
    if detector == "streak":
        return f"streak|{tool}"
    if detector == "message_loop":
        text = next((s.text for s in found if s.text), None)
        return f"message_loop|{_scrub(text) if text else _scrub(finding.message)}"
    if detector == "budget":
        return f"budget|{finding.signature}"
    return f"{detector}|{tool}|{_scrub(finding.signature)}"


def describe(finding: Finding, steps: Any = ()) -> str:
    """Return the issue title of the finding's loop, in words (Markdown-style `tool`)."""
    found = _steps_of(finding, steps)
    detector, tool = finding.detector, f"`{finding.tool or '?'}`"
    first = next((s for s in found if s.is_tool_call), None)
    failing = first is not None and first.status in FAILED
    if detector == "repeat":
        if failing:
            return f"{tool} fails the same way on every retry: {_words(first)}"
        return f"{tool} is called again with the same arguments, with nothing new"
    if detector == "mutating_failure":
        return f"{tool} keeps retrying a change that fails: {_words(first)}"
    if detector == "blocker":
        failed = next((s for s in found if s.status in FAILED), None)
        return f"{tool} keeps hitting the same error: {_words(failed)}"
    if detector == "oscillation":
        motif = _motif(finding, found)
        if len(set(motif)) == 1:
            return f"`{motif[0]}` goes back and forth between {len(motif)} calls"
        return "Going back and forth between " + " → ".join(f"`{name}`" for name in motif)
    if detector == "batch_repeat":
        tools = sorted({s.tool or "?" for s in found if s.is_tool_call})
        return "The same batch of calls again: " + ", ".join(f"`{t}`" for t in tools or ["?"])
    if detector == "result_stall":
        if first is not None and _result_shape(first.result) == "empty":
            return f"{tool} returns the same empty result for rephrased queries"
        return f"{tool} returns the same result for different calls"
    if detector == "read_range":
        return f"{tool} reads the same file range again"
    if detector == "near_repeat":
        return f"{tool} is called with nearly the same arguments again"
    if detector == "streak":
        return f"A long streak of {tool} calls"
    if detector == "message_loop":
        text = next((s.text for s in found if s.text), "") or ""
        return f"The agent repeats itself: “{_clip(text, 80)}”"
    if detector == "budget":
        return _budget_title(finding)
    return f"{title(detector)}: {tool}"


def scrub_value(value: Any) -> str:
    """Return a JSON value as canonical text (keys sorted) with its run-specific parts
    replaced, so that two values differ only in those when their texts are equal.

    Finer than a shape, as values are kept, except that:

    - text loses its URLs, timestamps, paths, ids, hashes and numbers to the placeholders of
      ``_scrub``, but keeps its case, whitespace and quoted strings (they are content), and
      ids behind a word prefix become ids too;
    - the keys that call identity ignores are left out, by the engine's own rule
      (``detection.keys.dropped_keys``): volatile keys (timestamps, request ids, timings, the
      call's own id) and, in a message about a call (a serialised ToolMessage), its ids;
    - a string that holds JSON counts as that value (``detection.keys.json_in_text``).

    A JSON number is kept: ``{"lines": 10}`` is not ``{"lines": 99999}``, as a number in a
    structured value is data, while one in text cannot be told from an id or a timing.
    """
    return _scrubbed(value, 0)


# -- helpers ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _scrubbed_key(key: str) -> str:
    """Return a scrubbed key of a JSON object, as JSON (keys repeat across results)."""
    return json.dumps(_placeholders(key, values=True), ensure_ascii=False)


def _scrubbed(value: Any, depth: int) -> str:
    if isinstance(value, str):
        parsed = json_in_text(value)
        if parsed is not None:
            return _scrubbed(parsed, depth)
        return json.dumps(_placeholders(value, values=True), ensure_ascii=False)
    if isinstance(value, dict) and depth < SCRUB_DEPTH:
        drop = dropped_keys(value, DEFAULT_VOLATILE)
        items = sorted(
            _scrubbed_key(str(k)) + ":" + _scrubbed(v, depth + 1)
            for k, v in value.items()
            if str(k) not in drop
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)) and depth < SCRUB_DEPTH:  # noqa: UP038
        return "[" + ",".join(_scrubbed(item, depth + 1) for item in value) + "]"
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _steps_of(finding: Finding, steps: Any) -> list[Step]:
    """Return the finding's steps that are at hand, in seq order."""
    wanted = seqs_needed(finding)
    if isinstance(steps, Mapping):
        return [steps[seq] for seq in wanted if seq in steps]
    want = set(wanted)
    found = [step for step in steps or () if step.seq in want]
    found.sort(key=lambda step: step.seq)
    return found


def _scrub(text: str) -> str:
    """Reduce text to its words: run-specific values become placeholders."""
    return _SPACE.sub(" ", _placeholders(text[:4000])).strip().lower()[:MAX_TEXT]


def _placeholders(text: str, *, values: bool = False) -> str:
    """Replace the run-specific values in text with placeholders: URLs, quoted strings,
    timestamps, paths, ids and hashes, numbers.

    For ``scrub_value`` (``values``) quoted strings stay, as they are content, and ids behind
    a word prefix (``msg_01XFDU…``, ``call_8f3a2b…``) become ids too; fingerprints keep the
    rule they were made with, so that a loop keeps its fingerprint.
    """
    # A pattern that cannot match is skipped: URLs hold "://", paths "/", the rest but
    # hexadecimal ids a digit (and placeholders hold none of them).
    digits = _DIGIT.search(text) is not None
    if "://" in text:
        text = _URL.sub("<url>", text)
    if not values:
        text = _QUOTED.sub("<q>", text)
    if digits:
        text = _TIME.sub("<t>", text)
    if "/" in text:
        text = _PATH.sub("<path>", text)
    if values and digits:
        text = _PREFIXED_ID.sub("<id>", text)
    text = _HEX.sub("<id>", text)
    return _NUMBER.sub("#", text) if digits else text


def _value_shape(value: Any, depth: int = 0) -> str:
    """Return the shape of a JSON value: its keys and kinds of value, never the values."""
    if isinstance(value, str):
        parsed = json_in_text(value)
        return "str" if parsed is None else _value_shape(parsed, depth)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):  # noqa: UP038
        return "num"
    if value is None:
        return "null"
    if depth >= 4:
        return "…"
    if isinstance(value, dict):
        drop = dropped_keys(value, DEFAULT_VOLATILE)
        keys = sorted(_scrub(str(k)) for k in value if str(k) not in drop)
        items = {_scrub(str(k)): v for k, v in value.items() if str(k) not in drop}
        parts = [f"{k}:{_value_shape(items[k], depth + 1)}" for k in dict.fromkeys(keys)]
        return "{" + ",".join(parts[:MAX_KEYS]) + "}"
    if isinstance(value, (list, tuple)):  # noqa: UP038
        kinds = sorted({_value_shape(item, depth + 1) for item in value[:50]})
        return "[" + "|".join(kinds) + "]"
    return type(value).__name__


def _result_shape(result: Any) -> str:
    """Return the shape of a result: "empty", the words of a text, or the value's shape."""
    if result in (None, "", [], {}) or (isinstance(result, str) and not result.strip()):
        return "empty"
    if isinstance(result, dict) and all(v in (None, "", [], {}, 0) for v in result.values()):
        return "empty"
    if isinstance(result, str) and result.strip()[:1] not in "{[":
        return _scrub(result)
    return _value_shape(result)


def _fault(step: Step) -> str:
    """Return a failed step's error fingerprint, without its quoted names."""
    codes, _, body = error_fault(step.result, step.args).key.rpartition(";")
    # A traceback's frame lines are where it failed, not what: the engine keeps one when a
    # run-specific path holds an error word (/home/afailure/x.py), so they are left out.
    lines = [line for line in _scrub(body).split(" | ") if not line.startswith("file <")]
    return f"{codes};{' | '.join(lines)}"


def _blocker_scope(finding: Finding) -> str:
    """Return where a blocker is: "tool:name", "host:name" or "invalid"."""
    parts = finding.signature.split(":")
    if len(parts) >= 3 and parts[1] in ("tool", "host"):
        return f"{parts[1]}:{':'.join(parts[2:-1])}"
    return finding.signature.removeprefix("blocker:") or f"tool:{finding.tool or ''}"


def _blocker_fault(finding: Finding, found: list[Step]) -> str:
    """Return the blocker's most common error fingerprint among its failed steps."""
    faults = Counter(_fault(step) for step in found if step.status in FAILED)
    if faults:
        return faults.most_common(1)[0][0]
    return finding.signature.rsplit(":", 1)[-1]  # the engine's digest of the same key


def _motif(finding: Finding, found: list[Step]) -> list[str]:
    """Return a cycle's tools, one period, rotated to start at the smallest rotation.

    The period is found on the calls (tool and arguments), so reading two files in turn is
    a motif of two reads; the motif keeps only the tools.
    """
    calls = [s for s in found if s.is_tool_call]
    if len(calls) < 2:
        return sorted((finding.tool or "?").split(","))
    keys = [call_signature(s.tool or "?", s.args) for s in calls]
    period = next(
        (
            p
            for p in range(1, len(keys))
            if all(keys[i] == keys[i + p] for i in range(len(keys) - p))
        ),
        len(keys),
    )
    block = [s.tool or "?" for s in calls[:period]]
    return min(block[i:] + block[:i] for i in range(period))


def _words(step: Step | None) -> str:
    """Return the error of a failed step in the tool's own words, clipped (for titles)."""
    if step is None:
        return "an error"
    line = error_fault(step.result, step.args).line
    return _clip(line, 80) or "an error"


def _clip(text: str, limit: int) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _budget_title(finding: Finding) -> str:
    what = finding.signature.split(":", 1)[-1]
    if finding.signature.startswith("quota:"):
        return f"`{what}` goes over its call quota"
    return f"The run goes over its {what} budget"
