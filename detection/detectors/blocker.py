"""Blocker: one tool or one target failing with the same error, whatever the arguments.

The agent varies what it tries (another ``old_str``, another build command, another URL) and
hits the same wall each time: no two calls are equal, so the repeat rule stays quiet, and
the error texts differ in what they echo, so no result repeats either. What repeats is the
error's fingerprint (``keys.error_fault``): failures of one tool with one fingerprint count
against one blocker, and so do failures against one host from any tool (with one HTTP
status, or else one fingerprint).

What a call acts on is its *target* (``call_target``): the file it edits or reads, the host
it fetches from, the head of its shell command, or else the tool itself.

- A related success re-arms the blocker: the same tool succeeding on one of the targets that
  failed (the edit of app.py went through, ``make`` built), any call to the failing host
  succeeding, or a successful shell command that names the failing file.
- An unrelated success does not: a read, a search, an edit of another file. A failure whose
  arguments the trace does not carry may have been on any target: any success that could
  re-arm a failure on some target re-arms it (unknown is not equal, and never a new loop).
- After a change (a new successful mutating call, see ``Lane.epoch``) a re-run that fails
  *differently* moved the failure: what failed before the change is forgotten. A re-run that
  fails the same way is the same blocker still: a check failing the same way after every
  change is stuck.
- Weak failures (no error line, no HTTP status: a grep that found nothing) name no blocker.
- Calls issued together (one assistant message, one ``batch_id``) count once: none of them
  was a retry after seeing another fail (a turn cut off with ten edits in it is no loop).

Invalid turns (no valid action: ``status="invalid"``) count as failed calls; a streak of them
is one blocker whatever their error texts say, and any valid call ends it.

Failures count across the whole run (like the repeat rule's), on one path of the run tree.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any, Final

from ..keys import canonical_path, digest
from .base import Event, add_seq, short
from .similarity import read_target

if TYPE_CHECKING:
    from ..engine import Monitor

MAX_SCOPES: Final = 64  # tools and hosts with failures remembered per path
MAX_FAULTS: Final = 8  # distinct fingerprints remembered per tool or host
MAX_TARGETS: Final = 16  # targets remembered per blocker

FILE_KEYS: Final = (
    "path", "file_path", "filePath", "file", "filename", "absolute_path", "target_file",
    "notebook_path", "dir_path", "directory",
)  # fmt: skip
URL_KEYS: Final = ("url", "uri", "href", "link", "endpoint", "page")
COMMAND_KEYS: Final = ("command", "cmd", "commands", "script", "shell_command")
#: Programs whose first word is not what they do: the next word is part of the head.
_SUBCOMMANDS: Final = frozenset(
    {
        "git", "npm", "npx", "yarn", "pnpm", "bun", "cargo", "go", "docker", "kubectl", "pip",
        "pip3", "uv", "poetry", "conda", "apt", "apt-get", "brew", "gh", "dotnet", "mvn",
        "gradle", "python", "python3", "node", "deno", "ruby", "bash", "sh",
    }
)  # fmt: skip
#: Words before a command that set it up rather than name it.
_PREFIXES: Final = frozenset({"sudo", "env", "time", "nohup", "exec", "command", "builtin"})
#: Whole commands that only set up the next one (``cd build && make``: the head is make).
_SETUP: Final = frozenset({"cd", "pushd", "popd", "export", "source", ".", "set", "unset", "true"})
_SEPARATORS: Final = ("&&", "||", ";", "|", "\n")
#: Commands that only read: naming a file, they do not change it.
_READS: Final = frozenset(
    {
        "cat", "head", "tail", "less", "more", "grep", "rg", "ag", "ls", "wc", "nl", "find",
        "file", "stat", "diff", "tree", "which", "echo", "git diff", "git show", "git log",
        "git status", "git blame", "git grep",
    }
)  # fmt: skip


class Blocked:
    """The failures of one tool (or against one host) with one fingerprint."""

    __slots__ = (
        "anywhere", "batch", "count", "epoch", "first_seq", "line", "seqs", "signature",
        "targets", "tools",
    )  # fmt: skip

    def __init__(self, seq: int, epoch: int, line: str, batch: Any = None) -> None:
        self.batch: Any = batch  # the batch id of the last failure counted (None: no batch)
        self.count = 1
        self.first_seq = seq
        self.seqs = [seq]
        self.epoch = epoch  # the lane's epoch at the last failure
        self.line = line  # the last failure's own words
        self.targets: list[str] = []  # what the failing calls acted on, in order (bounded)
        self.signature = ""  # the finding's signature, made when it first reaches a threshold
        self.tools: list[str] = []
        # a failure whose arguments the trace does not carry: it may have been on any
        # target, so a success on any of them may be the fix (unknown is not equal)
        self.anywhere = False

    def copy(self) -> Blocked:
        twin = Blocked(self.first_seq, self.epoch, self.line, self.batch)
        twin.count, twin.seqs = self.count, list(self.seqs)
        twin.targets, twin.tools = list(self.targets), list(self.tools)
        twin.signature, twin.anywhere = self.signature, self.anywhere
        return twin

    def add(self, target: str, tool: str, known: bool = True) -> None:
        if not known:
            self.anywhere = True
        if target not in self.targets and len(self.targets) < MAX_TARGETS:
            self.targets.append(target)
        if tool not in self.tools and len(self.tools) < MAX_TARGETS:
            self.tools.append(tool)


#: Host scopes are keyed by this prefix and the host (tool scopes by the bare tool name: no
#: tool name starts with a NUL), so that a success looks its tool up without building a key.
HOST: Final = "\0host:"


class BlockerState:
    """The blockers of one path: scope (a tool name, or HOST + a host) -> fingerprint ->
    failures. Most calls succeed while nothing is failing, or while nothing a success could
    re-arm is: ``hosts`` and ``files`` let them pass at once."""

    __slots__ = ("files", "groups", "hosts", "invalid")

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Blocked]] = {}
        self.hosts = 0  # host scopes in groups
        self.files = False  # some blocker failed on a file (an edit of it may re-arm it)
        self.invalid: Blocked | None = None  # the current streak of invalid turns

    def copy(self) -> BlockerState:
        twin = BlockerState()
        twin.groups = {
            scope: {key: group.copy() for key, group in faults.items()}
            for scope, faults in self.groups.items()
        }
        twin.hosts, twin.files = self.hosts, self.files
        twin.invalid = self.invalid.copy() if self.invalid is not None else None
        return twin

    def tidy(self) -> None:
        """Drop empty scopes and recount what is left (after a success re-armed some)."""
        groups = self.groups
        for scope in [scope for scope, faults in groups.items() if not faults]:
            del groups[scope]
        self.hosts = sum(1 for scope in groups if scope.startswith(HOST))
        self.files = any(
            group.anywhere or any(target.startswith("file:") for target in group.targets)
            for faults in groups.values()
            for group in faults.values()
        )


def _host(url: str) -> str:
    rest = url.split("://", 1)[1] if "://" in url else url
    host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    return host.lower().removeprefix("www.")


def command_text(args: Any) -> str | None:
    """Return the shell command a call runs (its ``command``-like argument), if any."""
    if isinstance(args, dict):
        for key in COMMAND_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return " ".join(value)
    elif isinstance(args, str) and args.strip():
        return args
    return None


def command_head(command: str) -> str:
    """Return what a shell command runs: ``make``, ``git push``, ``python -m pytest``.

    The first simple command that is not set-up (``cd``, ``export``) decides, without its
    ``sudo``/``env``/``VAR=value`` prefixes; a path is cut to its file name.
    """
    text = command
    for separator in _SEPARATORS[1:]:
        text = text.replace(separator, "&&")
    for part in text.split("&&"):
        words = part.split()
        while words:
            word = words[0]
            if word in _PREFIXES or ("=" in word and word[0] != "=") or word.startswith("-"):
                words = words[1:]
            elif word == "timeout":
                words = words[1:]
                while words and (words[0].startswith("-") or words[0][:1].isdigit()):
                    words = words[1:]
            else:
                break
        if not words or words[0] in _SETUP:
            continue
        head = posixpath.basename(words[0].strip("'\"")) or words[0]
        if head in _SUBCOMMANDS and len(words) > 1:
            second = words[1]
            if second in ("-m", "-c") and len(words) > 2:
                return f"{head} {second} {posixpath.basename(words[2].strip(chr(39) + chr(34)))}"
            if not second.startswith("-"):
                return f"{head} {posixpath.basename(second.strip(chr(39) + chr(34)))}"
        return head
    return ""


def call_target(tool: str, args: Any) -> str:
    """Return what a call acts on: ``file:<path>``, ``host:<host>``, ``cmd:<head>`` or
    ``tool:<tool>`` when it names none of those."""
    if isinstance(args, dict):
        for key in FILE_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip() and "://" not in value:
                return "file:" + canonical_path(value.strip())
        for key in URL_KEYS:
            value = args.get(key)
            if isinstance(value, str) and "://" in value:
                return "host:" + _host(value.strip())
    command = command_text(args)
    if command is not None:
        for word in command.split():
            word = word.strip("'\"")
            if word.startswith(("http://", "https://")):
                return "host:" + _host(word)
        head = command_head(command)
        if head:
            return "cmd:" + head
    return "tool:" + tool


def _names(targets: list[str]) -> str:
    shown = [target.split(":", 1)[1] for target in targets[:3]]
    more = f" and {len(targets) - 3} more" if len(targets) > 3 else ""
    return ", ".join(shown) + more


def _blocker_message(
    tool: str, targets: list[str], tools: list[str], host: str, count: int, first: int, line: str
) -> str:
    said = f"\u201c{short(line, 100)}\u201d"
    kinds = {target.split(":", 1)[0] for target in targets}
    if host or kinds == {"host"}:
        where = host or _names(targets)
        return (
            f"The last {count} requests to {where} ({', '.join(tools[:3])}) all failed with "
            f"{said} since step {first}, whatever the URL or the options. Another URL or user "
            "agent will not get past it: use another source, or report the blocker."
        )
    if kinds == {"file"} and len(targets) == 1:
        name = posixpath.basename(targets[0][5:]) or targets[0][5:]
        return (
            f"The last {count} calls of {tool} on {name} all failed with {said} since step "
            f"{first}. Read the file again before the "
            "next attempt, and change the approach if it still fails; or report the blocker."
        )
    if kinds == {"cmd"}:
        return (
            f"The last {count} commands ({_names(targets)}) all failed with {said} since step "
            f"{first}. Another command will not get past it: fix what the error names first "
            "(a missing file, directory, package or permission), or report the blocker."
        )
    where = f" on {_names(targets)}" if kinds <= {"file", "cmd", "host"} else ""
    return (
        f"{tool} has failed {count} times{where} since step {first} with the same error "
        f"({said}), whatever the arguments. Varying them is not getting past it: fix the cause "
        "the error names, try another approach, or report the blocker."
    )


def _invalid_message(count: int, first: int, line: str) -> str:
    return (
        f"Your last {count} turns since step {first} produced no valid action (last: "
        f"\u201c{short(line, 100)}\u201d). Answering the same way again will fail again: "
        "reply with exactly one action, in the format the instructions ask for."
    )


class Blocker:
    """One tool or one target failing with the same error fingerprint, whatever the arguments."""

    name = "blocker"

    def __init__(self) -> None:
        self._targets: dict[str, str] = {}  # call signature -> target (loops repeat calls)

    def target(self, ev: Event) -> str:
        """Return the call's target (``call_target``), remembered by its call signature."""
        found = self._targets.get(ev.sig)
        if found is None:
            if len(self._targets) >= 4096:
                self._targets.clear()
            found = self._targets[ev.sig] = call_target(ev.tool, ev.args)
        return found

    def observe(self, state: BlockerState, ev: Event, out: Monitor) -> None:
        if ev.status != "error":
            if state.groups:
                self._success(state, ev)
            return
        if ev.invalid:
            self._invalid(state, ev, out)
            return
        fault = ev.fault
        if fault is None or not fault.strong:
            if not ev.known_result and state.groups:
                self._unknown_failure(state, ev)
            return
        target = self.target(ev)
        if target.startswith("file:") or not ev.known_args:
            state.files = True
        self._fail(state, ev, ev.tool, target, fault.key, fault.line, out)
        if target.startswith("host:"):  # a host answers with a status, whoever asks
            key = "http=" + fault.status if fault.status else fault.key
            self._fail(state, ev, HOST + target[5:], target, key, fault.line, out)

    def _fail(
        self, state: BlockerState, ev: Event, scope: str, target: str, key: str, line: str,
        out: Monitor,
    ) -> None:  # fmt: skip
        groups = state.groups
        faults = groups.get(scope)
        if faults is None:
            if len(groups) >= MAX_SCOPES:
                del groups[next(iter(groups))]
                state.tidy()
            faults = groups[scope] = {}
            if scope.startswith(HOST):
                state.hosts += 1
        group = faults.get(key)
        if len(faults) > (0 if group is None else 1):
            stale = [k for k, other in faults.items() if k != key and other.epoch != ev.epoch]
            for old in stale:  # a change since, and now another failure: the change moved it
                del faults[old]
        if group is None:
            if len(faults) >= MAX_FAULTS:
                del faults[next(iter(faults))]
            group = faults[key] = Blocked(ev.seq, ev.epoch, line, ev.batch_id)
            group.add(target, ev.tool, ev.known_args)
            return
        if ev.batch_id is not None and ev.batch_id == group.batch:
            group.add(
                target, ev.tool, ev.known_args
            )  # issued with the last one, not a retry after it
            return
        group.batch = ev.batch_id
        group.count += 1
        group.epoch = ev.epoch
        group.line = line
        group.add(target, ev.tool, ev.known_args)
        add_seq(group.seqs, ev.seq)
        level = ev.settings.thresholds["blocker"].level(group.count)
        if level is None:
            return
        host = scope[len(HOST) :] if scope.startswith(HOST) else ""
        if not group.signature:
            where = "host:" + host if host else "tool:" + scope
            group.signature = f"blocker:{where[:120]}:{digest(key)}"
        out.report(
            ("blocker", scope, key, group.first_seq), level, group.count, ev.tool,
            group.signature, group.seqs, _blocker_message,
            (ev.tool, group.targets, group.tools, host, group.count, group.first_seq, line),
            True,
        )  # fmt: skip

    def _unknown_failure(self, state: BlockerState, ev: Event) -> None:
        """A failure whose error the trace does not carry could be any error: after a change,
        one that fails differently moved the failure, so this one forgets, as a different
        error would, what failed before the change in every scope it could belong to (its
        tool's; its host's; with unknown arguments too, every host's). It counts against
        no blocker: two unknowns are never the same error."""
        scopes = [ev.tool]
        if not ev.known_args:
            scopes += [scope for scope in state.groups if scope.startswith(HOST)]
        else:
            target = self.target(ev)
            if target.startswith("host:"):
                scopes.append(HOST + target[5:])
        for scope in scopes:
            faults = state.groups.get(scope)
            if faults:
                for key in [k for k, group in faults.items() if group.epoch != ev.epoch]:
                    del faults[key]
        state.tidy()

    def _success(self, state: BlockerState, ev: Event) -> None:
        """A success re-arms what it is related to (see the module docstring)."""
        groups = state.groups
        faults = groups.get(ev.tool)
        fixes = ev.settings.mutating and state.files
        if faults is None and not state.hosts and not fixes:
            return  # nothing this success could re-arm
        if read_target(ev.tool, ev.args) is not None:
            return  # a read of the file changes nothing
        target = self.target(ev)
        if faults:  # the tool went through on a target that failed (or it has no target)
            anything = target == "tool:" + ev.tool
            for key in [k for k, group in faults.items() if anything or _failed_on(group, target)]:
                del faults[key]
        if target.startswith("host:"):
            groups.pop(HOST + target[5:], None)
        elif fixes and target.startswith("file:"):  # an edit of a failing file
            for faults in groups.values():
                for key in [k for k, group in faults.items() if _failed_on(group, target)]:
                    del faults[key]
        elif fixes and target.startswith("cmd:") and target[4:] not in _READS:
            command = command_text(ev.args) or ""
            for faults in groups.values():
                for key in [k for k, group in faults.items() if _names_a_file(command, group)]:
                    del faults[key]
        state.tidy()

    def _invalid(self, state: BlockerState, ev: Event, out: Monitor) -> None:
        line = ev.result if isinstance(ev.result, str) else repr(ev.result)
        group = state.invalid
        if group is None:
            state.invalid = Blocked(ev.seq, ev.epoch, line)
            return
        group.count += 1
        group.line = line
        add_seq(group.seqs, ev.seq)
        level = ev.settings.thresholds["blocker"].level(group.count)
        if level is not None:
            out.report(
                ("blocker", "invalid", group.first_seq), level, group.count, ev.tool,
                "blocker:invalid", group.seqs, _invalid_message,
                (group.count, group.first_seq, line), False,
            )  # fmt: skip

    def predict(self, state: BlockerState, ev: Event) -> list[tuple[Any, ...]]:
        """Return (level, count, seqs, message) the call would reach if it fails the same way."""
        out: list[tuple[Any, ...]] = []
        if not state.groups:
            return out
        target = self.target(ev)
        scopes = [ev.tool] + ([HOST + target[5:]] if target.startswith("host:") else [])
        threshold = ev.settings.thresholds["blocker"]
        for scope in scopes:
            for group in (state.groups.get(scope) or {}).values():
                related = scope != ev.tool or target == "tool:" + ev.tool
                if not (related or target in group.targets):
                    continue
                level = threshold.level(group.count + 1)
                if level is None:
                    continue
                message = (
                    f"{ev.tool} already failed {group.count} times since step "
                    f"{group.first_seq} with \u201c{short(group.line, 100)}\u201d. If nothing "
                    "the error names has changed, this call "
                    "will fail the same way: fix the cause first, or report the blocker."
                )
                out.append((level, group.count + 1, group.seqs, message))
        return out


def _failed_on(group: Blocked, target: str) -> bool:
    """Return whether a blocker failed on this target (or may have: ``Blocked.anywhere``)."""
    return group.anywhere or target in group.targets


def _names_a_file(command: str, group: Blocked) -> bool:
    """Return whether a command names one of the files a blocker failed on (or may have: a
    failure with unknown arguments)."""
    if group.anywhere:
        return True
    for target in group.targets:
        if target.startswith("file:"):
            name = posixpath.basename(target[5:])
            if name and name in command:
                return True
    return False


__all__ = ["Blocker", "BlockerState", "call_target", "command_head"]
