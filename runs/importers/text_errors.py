"""Errors that a tool reports only in its text: one rule table, shared by every importer.

Many harnesses say a call failed only in the words of its output ("Exit code: 1", a Python
traceback, "Permission denied"). The rules that read those words live here, in one table, so
they can be reviewed together and each has a test (tests/importers/test_text_errors.py).

How importers use it:

- An explicit signal in the format wins: `is_error: true`, `status: "error"`, an exit code
  field. The text rules decide only when the format gives no such signal for the result.
- `error_rule(text)` returns the name of the first rule that matches, or None. A format adds
  only what is its own (`extra=`: a tuple of `Rule`), never a copy of a common rule.
- Only the start and the end of a long output are read (`HEAD_CHARS`, `TAIL_CHARS`): exit
  lines come last, error banners first, and a huge log is not scanned whole.

A rule names a failure, not a word: "error" in a file's text is not an error, an exit line
with code 0 is not one either, and a rule that would fire on ordinary file contents (a
traceback quoted in a README, say) is anchored to where a tool writes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD_CHARS = 4000
TAIL_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Rule:
    """One way a tool says it failed: a name for messages and tests, and a compiled regex."""

    name: str
    pattern: re.Pattern[str]
    # Lower-case words of which one must be in the text for the rule to match: a substring
    # test is far cheaper than the regex, and most outputs contain none of them.
    needles: tuple[str, ...] = ()

    def may_match(self, lowered: str) -> bool:
        return not self.needles or any(needle in lowered for needle in self.needles)

    def search(self, text: str) -> bool:
        match = self.pattern.search(text)
        if match is None:
            return False
        code = match.groupdict().get("code")
        return code is None or int(code) != 0


def _rule(
    name: str, pattern: str, flags: int = re.MULTILINE, needles: tuple[str, ...] = ()
) -> Rule:
    return Rule(name, re.compile(pattern, flags), needles)


# An exit code in all the spellings harnesses use; code 0 never matches (see Rule.search).
_EXIT = (
    r"^[ \t]*(?:"
    r"(?:exit|return)[ _-]?(?:code|status)[ \t]*[:=]?[ \t]*(?P<code>-?\d+)"
    r"|process exited with (?:exit )?code[ \t]*(?P<code2>-?\d+)"
    r"|command (?:failed|exited) with (?:exit )?(?:code|status)[ \t]*(?P<code3>-?\d+)"
    r"|\[(?:exit code|exit status)[: ]+(?P<code4>-?\d+)\]"
    r")"
    r"|<returncode>[ \t]*(?P<code5>-?\d+)[ \t]*</returncode>"
    r"|returned non-zero exit status (?P<code6>\d+)"
    r"|\b(?:completed|finished|exited) with exit code[ \t]*(?P<code7>-?\d+)"
)


class _ExitRule(Rule):
    """The exit-code rule: several spellings, one code; 0 is success."""

    __slots__ = ()

    def search(self, text: str) -> bool:
        for match in self.pattern.finditer(text):
            code = next((value for value in match.groups() if value is not None), None)
            if code is not None and int(code) != 0:
                return True
        return False


EXIT_CODE = _ExitRule(
    "exit code", re.compile(_EXIT, re.MULTILINE | re.IGNORECASE), ("code", "status")
)

COMMON: tuple[Rule, ...] = (
    EXIT_CODE,
    _rule(
        "command not found",
        r"command not found|^\S+: (?:line )?\d+: [^\s:]+: not found$|^\S+: [^\s:]+: not found$"
        r"|is not recognized as an internal or external command",
        needles=("not found", "not recognized"),
    ),
    _rule(
        "traceback",
        r"^Traceback \(most recent call last\):|^thread '[^']*' panicked at"
        r"|^Uncaught (?:\w+Error|exception)|^(?:panic|fatal error): ",
        needles=("traceback", "panicked", "uncaught", "panic:", "fatal error:"),
    ),
    _rule(
        "permission or sandbox denial",
        r"Permission denied|Operation not permitted|\bEACCES\b|\bEPERM\b"
        r"|Sandbox\(Denied|SandboxDenied|sandbox denied|denied by (?:the )?sandbox"
        r"|requested permissions? to .* but you haven't granted",
        re.MULTILINE | re.IGNORECASE,
        needles=("permission", "not permitted", "eacces", "eperm", "sandbox"),
    ),
    _rule("no replacement", r"No replacement was performed", needles=("no replacement",)),
    _rule(
        "rejected edit",
        r"The user doesn't want to proceed with this tool use|tool use was rejected"
        r"|^User rejected|String to replace not found in file"
        r"|Found \d+ matches of the string to replace|Multiple occurrences of old_str"
        r"|did not appear verbatim in|^\[?No exact match found|SEARCH/REPLACE block failed to match"
        r"|apply_patch verification failed|patch (?:does not|did not) apply",
        needles=(
            "proceed",
            "rejected",
            "not found in file",
            "matches of the string",
            "multiple occurrences",
            "verbatim",
            "no exact match",
            "failed to match",
            "verification failed",
            "apply",
        ),
    ),
    _rule(
        "http error",
        r"^HTTP/[\d.]+ (?:4\d\d|5\d\d)\b|\b(?:HTTP|status)(?: code| status)?[ :]+(?:4\d\d|5\d\d)\b"
        r"|\bHTTP Error [45]\d\d\b|\b429 Too Many Requests\b|\bToo Many Requests\b|\brate limit(?:ed| exceeded)\b"
        r"|\b(?:40[0-9]|41[0-9]|42[0-9]|5\d\d) (?:Bad Request|Unauthorized|Forbidden|Not Found"
        r"|Method Not Allowed|Gone|Internal Server Error|Bad Gateway|Service Unavailable"
        r"|Gateway Time-?out)\b",
        re.MULTILINE | re.IGNORECASE,
        needles=(
            "http",
            "status",
            "too many",
            "rate limit",
            "bad request",
            "unauthorized",
            "forbidden",
            "not found",
            "not allowed",
            "gone",
            "server error",
            "gateway",
            "unavailable",
        ),
    ),
    _rule(
        "bot wall",
        r"Attention Required! \| Cloudflare|<title>Just a moment\.\.\.</title>"
        r"|cf-browser-verification|are you a (?:robot|human)\?|captcha-delivery|Access Denied</",
        re.IGNORECASE,
        needles=(
            "cloudflare",
            "just a moment",
            "cf-browser",
            "robot",
            "human",
            "captcha",
            "access denied",
        ),
    ),
    _rule(
        "timeout",
        r"EXECUTION TIMED OUT|timed out after \d+|^(?:Error: )?Command timed out",
        needles=("timed out",),
    ),
    _rule("error line", r"^(?:Error|ERROR|error)(?:\[\w+\])?: \S", needles=("error",)),
)


def _sample(text: str) -> str:
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def error_rule(text: object, extra: tuple[Rule, ...] = (), *, common: bool = True) -> str | None:
    """Return the name of the first rule (the format's `extra` first) that finds an error in
    a tool's text output, or None. Non-text values never match."""
    if not isinstance(text, str) or not text:
        return None
    sample = _sample(text)
    lowered = sample.lower()
    for rule in extra + (COMMON if common else ()):
        if rule.may_match(lowered) and rule.search(sample):
            return rule.name
    return None


def is_error(text: object, extra: tuple[Rule, ...] = ()) -> bool:
    """Return whether a tool's text output reports a failure (see error_rule)."""
    return error_rule(text, extra) is not None


def rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:
    """Build a format's own rules from (name, regex) pairs, multi-line."""
    return tuple(_rule(name, pattern) for name, pattern in pairs)


# --- what some formats add (only what is their own)

SWE_AGENT = rules(
    ("syntax error edit", r"Your proposed edit has introduced new syntax error\(s\)"),
    ("wrong flag", r"^\s*Wrong flag!"),
    ("no such file", r"No such file or directory"),
    ("shell syntax", r"syntax error near unexpected token"),
    ("file not found", r"^File .* not found"),
    (
        "format error",  # swe_agent marks these steps "invalid": the reply held no valid action
        r"Your output was not formatted correctly|did not use any tool calls"
        r"|Your last output included multiple tool calls|Your action could not be parsed",
    ),
)

OPENHANDS = rules(
    ("error banner", r"\A\s*ERROR:"),
    ("syntax error edit", r"\A\s*\[Your proposed edit has introduced new syntax error\(s\)"),
)

CODEX = rules(
    ("bad arguments", r"\A\s*failed to parse function arguments"),
    ("execution error", r"\A\s*execution error:"),
    ("aborted", r"\A\s*aborted\b"),
    # unified exec (0.100+): "exec_command failed for `…`: CreateProcess {…}",
    # "write_stdin failed: Unknown process id 5"; "unsupported call: <tool>"
    ("tool failed", r"\A\s*(?:exec_command|write_stdin|apply_patch) failed\b"),
    ("unsupported call", r"\A\s*unsupported (?:custom tool )?call\b"),
)


def matches(text: object, rules: tuple[Rule, ...]) -> bool:
    """Return whether a format's rules or the common ones find an error (old name of is_error)."""
    return is_error(text, rules)
