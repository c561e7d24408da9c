"""The one table of text-only error rules: each rule, with lines that must and must not match.

The lines are the kinds of output real tools write (bash, Python, Node, curl, editors, the
harnesses' own messages); a "no" line is a near miss a naive rule would take for an error.
"""

from __future__ import annotations

import pytest

from runs.importers import text_errors
from runs.importers.text_errors import error_rule, is_error

# (text, the rule that must name it)
ERRORS = [
    # exit codes, in all their spellings
    ("Exit code: 1\nWall time: 0.2 seconds\nOutput:\nboom", "exit code"),
    ("Exit code 127", "exit code"),
    ("exit status 2", "exit code"),
    ("Chunk ID: 9f\nWall time: 1.0 seconds\nProcess exited with code 1\nOutput:\n", "exit code"),
    ("<returncode>2</returncode>\n<output>fail</output>", "exit code"),
    ("Command failed with exit code 1: npm test", "exit code"),
    ("[exit code: 3]", "exit code"),
    ("subprocess.CalledProcessError: Command 'x' returned non-zero exit status 1.", "exit code"),
    ("return code = -9", "exit code"),
    ("npm ERR! missing script\n<shellId: 0 completed with exit code 1>", "exit code"),
    # command not found
    ("bash: foo: command not found", "command not found"),
    ("/bin/sh: 1: rg: not found", "command not found"),
    ("'make' is not recognized as an internal or external command,", "command not found"),
    # tracebacks
    ('Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: 1', "traceback"),
    ("thread 'main' panicked at src/main.rs:3:5:\nboom", "traceback"),
    ("panic: runtime error: index out of range", "traceback"),
    # permission and sandbox denials
    ("cat: /etc/shadow: Permission denied", "permission or sandbox denial"),
    ("rm: cannot remove 'x': Operation not permitted", "permission or sandbox denial"),
    ('CreateProcess { message: "Codex(Sandbox(Denied { output', "permission or sandbox denial"),
    ("Error: EACCES: permission denied, open '/x'", "permission or sandbox denial"),
    (
        "Claude requested permissions to write to /x, but you haven't granted it yet.",
        "permission or sandbox denial",
    ),
    # editors
    (
        "No replacement was performed, old_str `foo` did not appear verbatim in /a.py.",
        "no replacement",
    ),
    ("The user doesn't want to proceed with this tool use.", "rejected edit"),
    ("String to replace not found in file.\nString: foo", "rejected edit"),
    ("Found 3 matches of the string to replace, but replace_all is false.", "rejected edit"),
    (
        "Multiple occurrences of old_str `x` in lines [3, 9]. Please ensure it is unique",
        "rejected edit",
    ),
    ("apply_patch verification failed: Failed to find expected lines", "rejected edit"),
    ("The SEARCH/REPLACE block failed to match", "rejected edit"),
    # HTTP 4xx/5xx bodies, rate limits and bot walls
    ("HTTP/1.1 429 Too Many Requests\nRetry-After: 5", "http error"),
    ("Request failed with status code 403", "http error"),
    ("503 Service Unavailable", "http error"),
    ("urllib.error.HTTPError: HTTP Error 404: Not Found", "http error"),
    ("You have been rate limited. Try again later.", "http error"),
    ("<html><head><title>Just a moment...</title></head>", "bot wall"),
    ("<title>Attention Required! | Cloudflare</title>", "bot wall"),
    # timeouts and error lines
    ("EXECUTION TIMED OUT", "timeout"),
    ("Command timed out after 120000ms", "timeout"),
    ("Error: Cannot find module 'x'", "error line"),
    ("error[E0425]: cannot find value `x` in this scope", "error line"),
]

# near misses: ordinary output that mentions the words
CLEAN = [
    "Exit code: 0\nWall time: 0.1 seconds\nOutput:\nok",
    "Process exited with code 0",
    "<returncode>0</returncode>\n<output>ok</output>",
    "exit status 0",
    "ok\n<shellId: 3 completed with exit code 0>",
    "def handle_error(e):\n    log.error('x')",
    "error_count = 0\nerrors = []",
    "The tests check that an error is raised.",
    "200 OK",
    "Processed 429 records in 3.2s",
    "status: 200",
    "README mentions: use `foo` if the command is not found on PATH",
    "grep: 3 matches",
    "",
]


@pytest.mark.parametrize(("text", "rule"), ERRORS)
def test_each_rule_names_its_error(text: str, rule: str) -> None:
    assert error_rule(text) == rule


@pytest.mark.parametrize("text", CLEAN)
def test_near_misses_are_not_errors(text: str) -> None:
    assert error_rule(text) is None


def test_every_common_rule_has_a_case() -> None:
    assert {rule.name for rule in text_errors.COMMON} == {rule for _, rule in ERRORS}


def test_the_end_of_a_long_output_is_read_and_its_middle_is_not() -> None:
    body = "ok\n" * 50_000
    assert error_rule(body + "Process exited with code 2") == "exit code"
    assert error_rule("ok\n" * 5_000 + "Permission denied\n" + body) is None


def test_a_format_adds_its_own_rules_first() -> None:
    wrong_flag = text_errors.SWE_AGENT
    assert error_rule("Wrong flag!", wrong_flag) == "wrong flag"
    assert error_rule("Wrong flag!") is None
    assert error_rule("Exit code: 2", wrong_flag) == "exit code"


def test_common_rules_can_be_left_out_when_the_format_has_an_explicit_signal() -> None:
    assert error_rule("Permission denied", common=False) is None
    assert not is_error(None) and not is_error({"error": "x"})
