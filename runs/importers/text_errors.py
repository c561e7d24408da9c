"""Errors that a harness reports only in text: one rule list per format, matched cheaply.

Each rule is a compiled regex searched in the (first 4,000 characters of the) tool output; a
hit makes the step `status="error"`. The lists are written here, next to each other, so the
rules can be reviewed together; every importer's docstring names the list it uses.

- SWE_AGENT: "Your proposed edit has introduced new syntax error(s)", an output that is
  "Wrong flag!", "command not found", "Traceback (most recent call last)",
  "No such file or directory", "syntax error near unexpected token", a line starting
  "Error:"/"ERROR:", "File … not found", "No replacement was performed",
  "Your output was not formatted correctly" / "Your last output did not use any tool calls",
  "EXECUTION TIMED OUT" / "timed out".
- OPENHANDS (used when the event has no explicit error signal): output starting "ERROR:",
  "[Your proposed edit has introduced new syntax error(s)", "[No exact match found",
  and, for observations that carry no exit code (IPython), "Traceback (most recent call last)".
- CODEX: "apply_patch verification failed", "failed to parse function arguments",
  "execution error:" at the start, "aborted" output (an interrupted call).
"""

from __future__ import annotations

import re

SCAN_CHARS = 4000

SWE_AGENT = (
    re.compile(r"Your proposed edit has introduced new syntax error\(s\)"),
    re.compile(r"^\s*Wrong flag!"),
    re.compile(r"command not found"),
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"No such file or directory"),
    re.compile(r"syntax error near unexpected token"),
    re.compile(r"^(Error|ERROR):", re.MULTILINE),
    re.compile(r"^File .* not found", re.MULTILINE),
    re.compile(r"No replacement was performed"),
    re.compile(r"Your output was not formatted correctly|did not use any tool calls"),
    re.compile(r"EXECUTION TIMED OUT|timed out after \d+"),
)

OPENHANDS = (
    re.compile(r"^\s*ERROR:"),
    re.compile(r"^\s*\[Your proposed edit has introduced new syntax error\(s\)"),
    re.compile(r"^\s*\[No exact match found"),
)
OPENHANDS_NO_EXIT_CODE = (re.compile(r"Traceback \(most recent call last\)"),)

CODEX = (
    re.compile(r"apply_patch verification failed"),
    re.compile(r"^\s*failed to parse function arguments"),
    re.compile(r"^\s*execution error:"),
    re.compile(r"^\s*aborted"),
)


def matches(text: object, rules: tuple[re.Pattern[str], ...]) -> bool:
    """Return whether any rule matches the start of a text output."""
    if not isinstance(text, str) or not text:
        return False
    sample = text[:SCAN_CHARS]
    return any(rule.search(sample) for rule in rules)
