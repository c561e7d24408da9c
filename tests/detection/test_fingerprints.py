"""Error fingerprints (`detection.keys.error_fault`): the same blocker, the same fingerprint.

The table holds real error lines (as tools print them) with the arguments of the call that
got them, and the fingerprint each gets: what the call echoed, numbers, ids, timestamps and
directories are gone; the error class, the message, the exit code and the HTTP status stay.
"""

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection.keys import error_fault

TABLE = [
    # edits whose old text is not there, or is there more than once (OpenHands, SWE-agent,
    # Claude Code)
    (
        "ERROR:\nNo replacement was performed, old_str `foo(x)` did not appear verbatim in "
        "/workspace/app.py.",
        {"command": "str_replace", "path": "/workspace/app.py", "old_str": "foo(x)"},
        "exit=;http=;error: | no replacement was performed, old_str <arg> did not appear "
        "verbatim in <arg>.",
    ),
    (
        "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines [3, 17]."
        " Please ensure it is unique",
        {"path": "/testbed/a.py", "old_str": "x = 1"},
        "exit=;http=;no replacement was performed. multiple occurrences of old_str <arg> in "
        "lines [#, #]. please ensure it is unique",
    ),
    (
        "<tool_use_error>String to replace not found in file.\nString: def foo():</tool_use_error>",
        {"file_path": "/p/app.py", "old_string": "def foo():", "new_string": "x"},
        "exit=;http=;<tool_use_error>string to replace not found in file. | string: "
        "<arg><tool_use_error>",
    ),
    # shells: a missing directory, a missing module, a failing test, a typo, a denial
    (
        "bash: line 1: cd: /app/build: No such file or directory",
        {"command": "cd /app/build && make"},
        "exit=;http=;bash: line #: cd: <arg> no such file or directory",
    ),
    (
        'Traceback (most recent call last):\n  File "/repo/run.py", line 3, in <module>\n    '
        "import yaml\nModuleNotFoundError: No module named 'yaml'",
        {"command": "python run.py"},
        "exit=;http=;traceback (most recent call last): | modulenotfounderror: no module named "
        "'yaml'",
    ),
    (
        "FAILED tests/test_calc.py::test_add - AssertionError: assert 3 == 4\n"
        "1 failed, 4 passed in 0.12s",
        {"command": "pytest -q"},
        "exit=;http=;failed test_calc.py::test_add - assertionerror: assert # == # | # failed, "
        "# passed in #s",
    ),
    (
        "<returncode>127</returncode>\n<output>\nbash: pytset: command not found\n</output>",
        {"command": "pytset -q"},
        "exit=127;http=;bash: pytset: command not found",
    ),
    (
        "mkdir: cannot create directory '/opt/app': Permission denied",
        {"command": "mkdir /opt/app"},
        "exit=;http=;mkdir: cannot create directory <arg>: permission denied",
    ),
    (
        "curl: (7) Failed to connect to localhost port 8000 after 0 ms: Connection refused",
        {"command": "curl -s localhost:8000/health"},
        "exit=;http=;curl: (#) failed to connect to localhost port # after # ms: connection "
        "refused",
    ),
    (
        "Exit code: 101\nWall time: 3.2 seconds\nOutput:\nerror: could not compile `app` "
        '(bin "app") due to 2 previous errors',
        {"cmd": "cargo build"},
        "exit=101;http=;error: could not compile 'app' (bin 'app') due to # previous errors",
    ),
    (
        "npm ERR! code ENOENT\nnpm ERR! path /app/package.json\nnpm ERR! enoent Could not read "
        "package.json",
        {"command": "npm install"},
        "exit=;http=;npm err! code enoent | npm err! path package.json | npm err! enoent could "
        "not read package.json",
    ),
    (
        "src/app.c:10:5: error: 'count' undeclared (first use in this function)",
        {"command": "make"},
        "exit=;http=;app.c:#:#: error: 'count' undeclared (first use in this function)",
    ),
    (
        {"exit_code": 2, "stderr": "ls: cannot access 'build/': No such file or directory"},
        {"cmd": ["ls", "build/"]},
        "exit=2;http=;ls: cannot access <arg>: no such file or directory",
    ),
    # the web: statuses, whatever the URL
    (
        "Request failed with status code 429",
        {"url": "https://api.example.com/v1/items?page=3"},
        "exit=;http=429;request failed with status code #",
    ),
    (
        "HTTP Error 403: Forbidden",
        {"url": "https://www.example.org/a"},
        "exit=;http=403;http error #: forbidden",
    ),
    (
        "429 Client Error: Too Many Requests for url: https://api.github.com/repos/a/b?page=2",
        {"command": "python fetch.py"},
        "exit=;http=429;# client error: too many requests for url: <url api.github.com>",
    ),
    (
        {"error": {"code": 404, "message": "Not Found: /v1/models/gpt-9"}},
        {},
        "exit=;http=404;not found: gpt-#",
    ),
    # logs and business errors: timestamps, hex ids and echoed ids go
    (
        "2026-11-30T08:00:00Z ERROR worker-3 job 7f3a9c2e failed: timeout after 30s",
        {},
        "exit=;http=;<t> error worker-# job <h> failed: timeout after #s",
    ),
    (
        "Error: Reservation ABC123 not found",
        {"reservation_id": "ABC123"},
        "exit=;http=;error: reservation <arg> not found",
    ),
]


@pytest.mark.parametrize(("result", "args", "fingerprint"), TABLE)
def test_real_error_lines_give_these_fingerprints(result, args, fingerprint):
    assert error_fault(result, args).key == fingerprint
    assert error_fault(result, args).strong


# pairs of attempts at one blocker, and pairs of different blockers
SAME = [
    (  # another old_str, the same missing text
        (
            "No replacement was performed, old_str `a = 1` did not appear verbatim in /r/x.py.",
            {"path": "/r/x.py", "old_str": "a = 1"},
        ),
        (
            "No replacement was performed, old_str `def f():\n    a = 1` did not appear verbatim"
            " in /r/x.py.",
            {"path": "/r/x.py", "old_str": "def f():\n    a = 1"},
        ),
    ),
    (  # another URL, the same rate limit
        (
            "HTTP Error 429: Too Many Requests for url https://x.com/a?ua=1",
            {"url": "https://x.com/a?ua=1"},
        ),
        (
            "HTTP Error 429: Too Many Requests for url https://x.com/a/?ref=2",
            {"url": "https://x.com/a/?ref=2"},
        ),
    ),
    (  # another build command, the same missing directory
        (
            "bash: cd: /app/build: No such file or directory",
            {"command": "cd /app/build && cmake .."},
        ),
        ("bash: cd: /app/build: No such file or directory", {"command": "cd /app/build && ninja"}),
    ),
    (  # the same failing test, another duration
        ("FAILED test_a.py::test_x - assert 1 == 2\n1 failed in 0.31s", {"command": "pytest"}),
        ("FAILED test_a.py::test_x - assert 1 == 2\n1 failed in 1.02s", {"command": "pytest -x"}),
    ),
    (  # malformed output whose count varies
        ("Please always provide EXACTLY ONE action in triple backticks, found 2 actions.", {}),
        ("Please always provide EXACTLY ONE action in triple backticks, found 0 actions.", {}),
    ),
]
DIFFERENT = [
    (  # two compile errors: fixing one and hitting the next is progress
        ("src/app.c:10:5: error: 'count' undeclared", {"command": "make"}),
        ("src/app.c:14:5: error: 'total' undeclared", {"command": "make"}),
    ),
    (
        ("ModuleNotFoundError: No module named 'yaml'", {"command": "python run.py"}),
        ("ModuleNotFoundError: No module named 'requests'", {"command": "python run.py"}),
    ),
    (  # the same words, another exit code
        ("Exit code: 1\nerror: build failed", {"command": "make"}),
        ("Exit code: 2\nerror: build failed", {"command": "make"}),
    ),
    (  # another HTTP status
        ("HTTP Error 429: Too Many Requests", {"url": "https://x.com/a"}),
        ("HTTP Error 403: Forbidden", {"url": "https://x.com/a"}),
    ),
    (
        ("FAILED test_a.py::test_x - assert 1 == 2", {"command": "pytest"}),
        ("FAILED test_a.py::test_y - KeyError: 'name'", {"command": "pytest"}),
    ),
    (  # another file
        ("src/app.c:3:10: fatal error: log.h: No such file or directory", {"command": "make"}),
        ("src/app.c:3:10: fatal error: db.h: No such file or directory", {"command": "make"}),
    ),
]


@pytest.mark.parametrize(("one", "two"), SAME)
def test_attempts_at_one_blocker_share_a_fingerprint(one, two):
    assert error_fault(*one).key == error_fault(*two).key


@pytest.mark.parametrize(("one", "two"), DIFFERENT)
def test_different_blockers_have_different_fingerprints(one, two):
    assert error_fault(*one).key != error_fault(*two).key


def test_an_error_that_names_nothing_is_weak():
    fault = error_fault("Exit code: 1\nWall time: 0.1 seconds\nOutput:\n", {"cmd": "grep -rn x ."})
    assert not fault.strong
    assert not error_fault("", {}).strong
    assert error_fault("Exit code: 1\nOutput:\nfatal: not a git repository", {}).strong


def test_the_fault_line_is_the_error_in_the_tools_own_words():
    fault = error_fault(
        "Traceback (most recent call last):\nValueError: bad value 'x'", {"code": "f('x')"}
    )
    assert fault.line == "Traceback (most recent call last):"
    assert error_fault("ok\nError: disk full", {}).line == "Error: disk full"


def test_huge_outputs_are_read_at_their_start_and_end_only():
    noise = "compiling module\n" * 200_000
    fault = error_fault("error: first\n" + noise + "error: last", {})
    assert fault.key.startswith("exit=;http=;error: first") and "error: last" in fault.key
    assert len(fault.key) < 500


# -- properties ---------------------------------------------------------------------------
TEMPLATES = [
    "No replacement was performed, old_str `{q}` did not appear verbatim in {path}.",
    "Error: could not find '{q}' in {path} (line {n})",
    "HTTP Error 429: Too Many Requests for url: https://example.com/{url}?page={n}",
    "ls: cannot access '{path}': No such file or directory",
    "ModuleNotFoundError: No module named '{q}' (attempt {n})",
    "Please always provide EXACTLY ONE action in triple backticks, found {n} actions.",
    "TimeoutError: request '{q}' timed out after {n} ms",
]
CAUSES = [
    "error: permission denied",
    "error: disk quota exceeded",
    "fatal: not a git repository",
    "ModuleNotFoundError: No module named 'yaml'",
    "ModuleNotFoundError: No module named 'numpy'",
    "HTTP Error 403: Forbidden",
    "HTTP Error 404: Not Found",
    "AssertionError: assert total == 3",
    "KeyError: 'user_id'",
    "src/app.c:1:1: error: 'count' undeclared",
    "src/app.c:1:1: error: 'total' undeclared",
    "error: exit code 2",
    "Exit code: 3\nerror: build failed",
]
quoted = st.text(
    st.characters(codec="utf-8", exclude_characters="`'\"\n\r"), min_size=1, max_size=30
)
names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)


@given(
    st.sampled_from(TEMPLATES),
    st.lists(st.tuples(quoted, names, st.integers(0, 10**6)), min_size=2, max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_errors_that_differ_only_in_quoted_arguments_or_numbers_share_a_fingerprint(
    template, attempts
):
    prints = set()
    for q, name, n in attempts:
        path = f"/repo/src/{name}.py"
        args = {"path": path, "old_str": q.strip() or "x", "n": n}
        url = quote(args["old_str"], safe="")
        text = template.format(q=args["old_str"], path=path, n=n, url=url)
        prints.add(error_fault(text, args).key)
    assert len(prints) == 1


@given(
    st.lists(st.sampled_from(CAUSES), min_size=2, max_size=2, unique=True),
    st.lists(st.tuples(quoted, st.integers(0, 999)), min_size=2, max_size=2),
)
@settings(max_examples=300, deadline=None)
def test_two_different_blockers_never_share_a_fingerprint(causes, noise):
    prints = {
        error_fault(f"{cause}\n(while running {q.strip() or 'x'!r}, try {n})", {"q": q}).key
        for cause, (q, n) in zip(causes, noise, strict=True)
    }
    assert len(prints) == 2
