"""Aider chat history (`.aider.chat.history.md`), the Markdown log aider appends to.

One run per session: each `# aider chat started at YYYY-MM-DD HH:MM:SS` line starts one
(id = `<file name>#<n>`, `started_at` = that time, local and taken as UTC; lines before the
first header form a session of their own). Within a session, line by line:

- `#### ` lines are the user's input; consecutive ones are one message (a blank `####` is
  part of a paste) -> a `user` step. Answers to aider's own prompts ("… (Y)es/(N)o … [Yes]:
  y"), `/commands` and `!shell` lines are UI actions, not model turns -> `system` steps.
- Plain lines are the model's reply -> an `assistant` step. Its edit blocks (a file-name
  line, a fence, `<<<<<<< SEARCH` … `=======` … `>>>>>>> REPLACE`, also with the name inside
  the fence) -> `tool_call` steps "edit", args `{path, search, replace}`, batch_id = the
  reply. Suggested shell commands become calls only when aider runs or offers them (below).
- `> ` lines are aider's output:
  - the banner (`Aider v…`, `Main model: <model> with <format> edit format`, `Weak model`)
    -> metadata `aider_version`, `model`, `edit_format`;
  - `Tokens: 3.2k sent, 21 received. Cost: $0.0082 message, $0.02 session.` -> tokens_in /
    tokens_out (rounded as written: "3.2k" = 3200) and cost (the message's) on the reply;
    the last session cost -> metadata `session_cost`;
  - `Applied edit to <file>` -> every open edit of that file succeeded;
  - `# N SEARCH/REPLACE block(s) failed to match!` (after "The LLM did not conform to the
    edit format.") -> the unprefixed reflection text that follows is aider's, not the
    model's: each "failed to exactly match lines in <file>" fails the first open edit of
    that file (result = the reflection, status error); "The other N … were applied
    successfully" closes the rest as applied. The model's retry is a new reply with new
    edit calls;
  - `Run shell command(s)? … : y` then `Running <cmd>` -> a `tool_call` "shell" `{command}`
    per command (result: the "Added N lines of output" note when given); answered `n` ->
    one call for the offered command, status error, result "declined by the user";
  - `Commit <sha> <message>` -> metadata `commits`; `^C KeyboardInterrupt` -> a `system`
    step "interrupted"; "Only N reflections allowed" and other lines -> `system` steps
    (consecutive lines one step). Prompts such as "Create new file?" are UI, skipped.
- A `>>>>>>> REPLACE` line closes an edit block; it is not aider output. Quoted lines end
  with two spaces (a Markdown line break): stripped. A line that is not
  UTF-8 is skipped and counted.
- Errors: the edit failures above; the common text rules (`text_errors`) read a shell
  call's result.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from detection.model import Run, Step

from . import text_errors
from .content import parse_time
from .detect import Claim, Sample
from .errors import Skips, TraceError
from .kit import add_step, finish_run, set_result, text_step, tool_step
from .reading import Limits

name = "aider"
label = "Aider chat history (.aider.chat.history.md)"

SESSION = re.compile(r"^# aider chat started at (?P<when>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
PROMPT = re.compile(
    r"\((?:Y)es\)?/\(N\)o.*\[[^\]]*\]:\s*(?P<answer>\S*)\s*$|\(Y\)es/\(N\)o.*:\s*(?P<answer2>\S*)\s*$"
)
SHELL_PROMPT = re.compile(r"^Run shell commands?\?")
TOKENS = re.compile(
    r"^Tokens: (?P<sent>[\d.]+k?) sent(?:, [\d.]+k? cache \w+)*, (?P<received>[\d.]+k?) received\."
    r"(?: Cost: \$(?P<cost>[\d.]+) message, \$(?P<session>[\d.]+) session\.)?"
)
APPLIED = re.compile(r"^Applied edit to (?P<path>.+?)\s*$")
FAILED = re.compile(r"^# \d+ SEARCH/REPLACE blocks? failed to match!")
FAILED_FILE = re.compile(r"failed to exactly match lines in (?P<path>\S.*?)\s*$")
OTHERS_OK = re.compile(r"^# The other \d+ SEARCH/REPLACE blocks? (?:were|was) applied successfully")
RUNNING = re.compile(r"^Running (?P<command>.+?)\s*$")
ADDED_OUTPUT = re.compile(r"^Added \d+ lines? of output to the chat")
COMMIT = re.compile(r"^Commit (?P<sha>[0-9a-f]{7,40}) (?P<message>.*)$")
VERSION = re.compile(r"^Aider v(?P<version>\S+)")
MAIN_MODEL = re.compile(r"^Main model: (?P<model>\S+)(?: with (?P<format>[\w-]+) edit format)?")
FENCE = re.compile(r"^\s*(```|~~~)")
SEARCH, DIVIDER, REPLACE = (
    re.compile(r"^<{5,9} SEARCH\s*$"),
    re.compile(r"^={5,9}\s*$"),
    re.compile(r"^>{5,9} REPLACE\s*$"),
)
UI_LINES = re.compile(
    r"^(?:Create new file\?|Add .* to the chat\?|Add file to the chat\?|Allow edits to|"
    r"Add command output to the chat\?|Would you like to see|Add \.aider\* to \.gitignore|"
    r"Attempt to fix|Fix lint errors|You can use /undo|\^C again to exit|"
    r"https://aider\.chat/)"
)
BANNER = re.compile(
    r"^(?:Aider v|Main model:|Weak model:|Editor model:|Git repo:|Repo-map:|Model:|"
    r"Using .* model with API key|/\S*aider|Skipping .* gitignore|Added \.aider|"
    r"You can skip this check|Cur working dir:|Git working dir:|Warning: )"
)


def _tokens(text: str) -> int:
    return int(float(text[:-1]) * 1000) if text.endswith("k") else int(float(text))


# --- detection


def claim(sample: Sample) -> Claim:
    """Markdown with `# aider chat started at …` headers, `#### ` user lines and `> ` aider
    output such as `> Tokens: … sent, … received.`."""
    if sample.layout != "text":
        return Claim.no("not a text file")
    lines = sample.text.splitlines()
    headers = sum(1 for line in lines if SESSION.match(line))
    users = sum(1 for line in lines if line.startswith("####"))
    quoted = sum(
        1 for line in lines if line.startswith("> Tokens:") or line.startswith("> Aider v")
    )
    if headers:
        return Claim(0.97, f"{headers} `# aider chat started at` headers")
    if users and quoted:
        return Claim(0.75, f"{users} `####` user lines and aider's `> Tokens:`/`> Aider v` lines")
    return Claim.no("no `# aider chat started at` header and no `####` lines with `> Tokens:`")


# --- reading


@dataclass
class _Session:
    number: int
    started: float | None
    run: Run
    meta: dict[str, Any] = field(default_factory=lambda: {"agent": "aider"})
    user: list[str] = field(default_factory=list)
    reply: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)  # unrecognised `>` lines, in a row
    offered: list[str] = field(default_factory=list)  # `>` lines since the last prompt
    reflection: list[str] | None = None  # aider's text after a failed match
    open_edits: list[Step] = field(default_factory=list)
    last_reply: Step | None = None
    last_shell: Step | None = None
    replies: int = 0

    @property
    def steps(self) -> list[Step]:
        return self.run.steps


class _Reader:
    def __init__(self, source: str, limits: Limits) -> None:
        self.source, self.limits, self.skips = source, limits, Skips()
        self.base = os.path.basename(source) or "aider"
        self.number = 0  # the line being read

    def session(self, number: int, started: float | None) -> _Session:
        return _Session(number, started, Run(id=f"{self.base}#{number}", format=name))

    def add(self, session: _Session, step: Step) -> Step:
        if not session.steps:
            step.started_at = step.started_at or session.started
        return add_step(session.run, step, limits=self.limits, source=self.source, line=self.number)

    # flushing the pending blocks of lines

    def flush(self, session: _Session) -> None:
        self.flush_user(session)
        self.flush_reply(session)
        self.flush_quoted(session)
        self.flush_reflection(session)

    def flush_user(self, session: _Session) -> None:
        if not session.user:
            return
        text = "\n".join(session.user).strip("\n")
        session.user, session.offered = [], []
        first = text.lstrip()
        ui = first.startswith(("/", "!")) or PROMPT.search(first.splitlines()[0] if first else "")
        if ui:
            self.add(session, text_step("system", f"[user action] {text}", limits=self.limits))
        else:
            session.open_edits = []  # a new turn: edits never reported stay as they are
            self.add(session, text_step("user", text, limits=self.limits))

    def flush_reply(self, session: _Session) -> None:
        lines, session.reply = session.reply, []
        if not "".join(lines).strip():
            return
        session.offered = []
        session.replies += 1
        batch = f"reply-{session.replies}"
        reply = self.add(
            session,
            text_step(
                "assistant", "\n".join(lines).strip("\n"), limits=self.limits, batch_id=batch
            ),
        )
        session.last_reply = reply
        for path, search, replace in _edit_blocks(lines):
            call = tool_step(
                tool="edit",
                args={"path": path, "search": search, "replace": replace},
                limits=self.limits,
            )
            call.batch_id = batch
            self.add(session, call)
            session.open_edits.append(call)

    def flush_quoted(self, session: _Session) -> None:
        lines, session.quoted = session.quoted, []
        if lines:
            self.add(session, text_step("system", "\n".join(lines), limits=self.limits))

    def flush_reflection(self, session: _Session) -> None:
        if session.reflection is None:
            return
        text = "\n".join(session.reflection).strip("\n")
        session.reflection = None
        failed = [m.group("path") for m in map(FAILED_FILE.search, text.splitlines()) if m]
        for path in failed:
            call = next((c for c in session.open_edits if c.args.get("path") == path), None)
            if call is None:
                call = next(iter(session.open_edits), None)
            if call is not None:
                session.open_edits.remove(call)
                set_result(call, text, error=True, limits=self.limits)
        if not failed:  # the reflection names no file: the reply's open edits failed
            for call in session.open_edits:
                set_result(call, text, error=True, limits=self.limits)
            session.open_edits = []
        if any(OTHERS_OK.match(line) for line in text.splitlines()):
            for call in session.open_edits:
                set_result(call, "applied", error=False, limits=self.limits)
            session.open_edits = []

    # one line

    def line(self, session: _Session, line: str) -> None:
        if line.startswith("####"):
            self.flush_reply(session)
            self.flush_quoted(session)
            self.flush_reflection(session)
            session.user.append(line[4:].removeprefix(" ").rstrip())
            return
        if line.startswith(">") and not REPLACE.match(line.strip()):
            self.flush_user(session)
            self.flush_reply(session)
            self.flush_reflection(session)
            self.quoted(session, line[1:].removeprefix(" ").rstrip())
            return
        if session.reflection is not None:
            session.reflection.append(line.rstrip())
            return
        if session.user and not line.strip():
            return  # the blank line after a user message
        self.flush_user(session)
        self.flush_quoted(session)
        session.reply.append(line.rstrip())

    def quoted(self, session: _Session, text: str) -> None:
        meta = session.meta
        if not text:
            return
        if match := TOKENS.match(text):
            reply = session.last_reply
            if reply is not None:
                reply.tokens_in = _tokens(match.group("sent"))
                reply.tokens_out = _tokens(match.group("received"))
                if match.group("cost"):
                    reply.cost = float(match.group("cost"))
            if match.group("session"):
                meta["session_cost"] = float(match.group("session"))
            session.offered = []
            return
        if match := APPLIED.match(text):
            path = match.group("path")
            for call in [c for c in session.open_edits if c.args.get("path") == path]:
                set_result(call, text, error=False, limits=self.limits)
                session.open_edits.remove(call)
            return
        if FAILED.match(text):
            self.flush_quoted(session)
            session.reflection = [text]
            return
        if text.startswith("The LLM did not conform to the edit format"):
            return
        if SHELL_PROMPT.match(text):
            answer = _answer(text)
            if answer in ("n", "no", "d", "don't"):
                command = "\n".join(session.offered).strip()
                call = tool_step(tool="shell", args={"command": command}, limits=self.limits)
                set_result(call, "declined by the user", error=True, limits=self.limits)
                self.add(session, call)
            session.offered = []
            return
        if match := RUNNING.match(text):
            call = tool_step(
                tool="shell", args={"command": match.group("command")}, limits=self.limits
            )
            call.batch_id = session.last_reply.batch_id if session.last_reply else None
            self.add(session, call)
            session.last_shell = call
            return
        if ADDED_OUTPUT.match(text) and session.last_shell is not None:
            set_result(session.last_shell, text, error=False, limits=self.limits)
            return
        if match := COMMIT.match(text):
            meta.setdefault("commits", []).append(match.group("sha"))
            return
        if match := VERSION.match(text):
            meta.setdefault("aider_version", match.group("version"))
            return
        if match := MAIN_MODEL.match(text):
            meta.setdefault("model", match.group("model"))
            if match.group("format"):
                meta.setdefault("edit_format", match.group("format"))
            return
        if "KeyboardInterrupt" in text:
            self.flush_quoted(session)
            self.add(session, text_step("system", "interrupted (^C)", limits=self.limits))
            return
        if PROMPT.search(text) or UI_LINES.match(text) or BANNER.match(text):
            return
        session.offered.append(text)
        session.quoted.append(text)
        shell = session.last_shell
        if shell is not None and shell.result is None and text_errors.is_error(text):
            set_result(shell, text, error=True, limits=self.limits)  # its output, shown

    def run(self, session: _Session) -> Run:
        self.flush(session)
        run = session.run
        run.metadata = session.meta
        if session.started is not None:
            session.meta["started"] = session.started
        return finish_run(run)


def _answer(text: str) -> str:
    match = PROMPT.search(text)
    if match is None:
        return ""
    return (match.group("answer") or match.group("answer2") or "").lower()


def _edit_blocks(lines: list[str]) -> Iterator[tuple[str, str, str]]:
    """The SEARCH/REPLACE blocks of a reply: (path, search text, replace text)."""
    path = ""
    previous = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if SEARCH.match(line.strip()):
            search: list[str] = []
            replace: list[str] = []
            index += 1
            while index < len(lines) and not DIVIDER.match(lines[index].strip()):
                search.append(lines[index])
                index += 1
            index += 1
            while index < len(lines) and not REPLACE.match(lines[index].strip()):
                replace.append(lines[index])
                index += 1
            yield path, "\n".join(search), "\n".join(replace)
        elif FENCE.match(line):
            inside = lines[index + 1].strip() if index + 1 < len(lines) else ""
            if previous.strip() and not previous.strip().endswith((":", ".")):
                path = previous.strip().strip("`*")
            elif inside and not SEARCH.match(inside) and not inside.startswith("```"):
                nxt = lines[index + 2].strip() if index + 2 < len(lines) else ""
                if SEARCH.match(nxt):  # diff-fenced: the file name inside the fence
                    path = inside.strip("`*")
                    index += 1
        if line.strip():
            previous = line
        index += 1


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per aider session in the history file."""
    reader = _Reader(source, limits)
    session: _Session | None = None
    count = 0
    seen_text = False
    for number, raw in enumerate(stream, start=1):
        reader.number = number
        if len(raw) > limits.max_line_bytes:
            reader.skips.add(
                TraceError(f"line is {len(raw)} bytes, over the limit", source=source, line=number)
            )
            continue
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            reader.skips.add(
                TraceError(f"invalid UTF-8 at byte {exc.start}", source=source, line=number)
            )
            continue
        if number == 1:
            line = line.lstrip("\ufeff")
        header = SESSION.match(line)
        if header:
            if session is not None and (
                session.steps or session.user or session.reply or session.quoted
            ):
                count += 1
                yield _with_skips(reader, reader.run(session), count)
            session = reader.session(
                session.number + 1 if session else 1, parse_time(header.group("when"))
            )
            continue
        if line.strip():
            seen_text = True
        if session is None:
            if not line.strip():
                continue
            session = reader.session(1, None)
        reader.line(session, line)
    if session is not None:
        run = reader.run(session)
        if run.steps or not count:
            count += 1
            yield _with_skips(reader, run, count)
    if not count:
        raise reader.skips.first or TraceError(
            "empty file" if not seen_text else "no aider session", source=source
        )


def _with_skips(reader: _Reader, run: Run, count: int) -> Run:
    """Lines skipped so far go on the run being yielded (each counted once)."""
    reader.skips.apply(run)
    reader.skips = Skips()
    return run
