"""Result stall, near repeat and read range: loops that change the arguments a little.

None of these look at mutating or polling tools (an edit's "OK" is no stall; a poll is
exempt), nor at failures (errors escalate as tool failures, see repeat.py and blocker.py).
Result stall and near repeat judge results, so they never count a call whose result the
trace does not carry (``Event.known_result``): two unknown results are not the same result.

A result stall is a result that carries no information (``carries_nothing``: empty, not
found, zero hits, an error in words) coming back for different arguments, or any one result
coming back for near-duplicate arguments (a rephrased query). A sweep over different targets
(``retargets``: another flight number, file or id) that gets one short answer each
("available") is not a stall: each answer is news about its own target.

Exploration is progress: a call whose arguments narrow the previous call's target (a deeper
path, a tighter range, a query with more words) and whose result is new is not a near
repeat (``refines``), however alike the two look. A narrower call that gets the same result
again is still counted.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Final

from ..keys import _normalize, _normalize_str, canonical_path, json_in_text
from .base import Event, Tally, add_seq, advice, jaccard, make_room, short, words

if TYPE_CHECKING:
    from ..engine import Monitor

#: Tools whose result is a fixed acknowledgement, whatever the arguments.
ACK_TOOLS: Final = frozenset({"think", "todowrite", "todoread", "update_plan", "plan", "memory"})
MAX_CLUSTERS: Final = 4  # near-repeat clusters remembered per tool
ARGS_SIMILAR: Final = 0.6
RESULT_SIMILAR: Final = 0.8
SHORT_RESULT: Final = 4000
#: Argument tokens remembered by call signature. Small on purpose: a near-repeat loop comes
#: back to a call within a few steps, and sets kept longer outlive the young generations of
#: the garbage collector, whose full passes then walk the caller's whole run.
TOKEN_CACHE: Final = 256


SHORT_NOTHING: Final = 300  # a longer text says something, whatever words it holds
_NOTHING: Final = re.compile(
    r"^\W*(?:none|null|nil|n/a|empty|nothing)\W*$"
    r"|\b(?:no|zero|0)\s+(?:\w+\s+)?(?:results?|matches|hits|items|records|entries|rows"
    r"|documents|files|pages|issues|messages|data)\b"
    r"|\bnot found\b|\bno match|\bnothing (?:found|matched|to show)|\bfound nothing\b"
    r"|\bno such\b|\bdoes ?n[o']t exist\b|\bno data\b|\bcould not find\b|\bunknown\b"
    r"|^\W*(?:error|exception|failed|failure|traceback)\b",
    re.IGNORECASE,
)
_ERROR_KEYS: Final = ("error", "errors", "exception")


def carries_nothing(result: Any, depth: int = 0) -> bool:
    """Return whether a (known) result tells nothing: empty, not found, zero hits, an error.

    Text says nothing when it is blank, or short and says that nothing was found (or starts
    with an error word); JSON text counts as its value. An object says nothing when it names
    an error, or when every value in it says nothing (``{"results": [], "total": 0}``); an
    array when every item does; ``null`` and ``0`` say nothing (``false`` and "no" are
    answers).
    """
    if isinstance(result, str):
        text = result.strip()
        if not text:
            return True
        if text[0] in "{[" and depth < 4:
            parsed = json_in_text(text)
            if parsed is not None:
                return carries_nothing(parsed, depth + 1)
        return len(text) <= SHORT_NOTHING and _NOTHING.search(text) is not None
    if isinstance(result, dict):
        if depth >= 4:
            return False
        for key in _ERROR_KEYS:
            if result.get(key):
                return True
        return all(carries_nothing(item, depth + 1) for item in result.values())
    if isinstance(result, (list, tuple)):  # noqa: UP038 (a tuple is a constant)
        if depth >= 4:
            return False
        return all(carries_nothing(item, depth + 1) for item in result[:50])
    return result is None or (_number(result) and result == 0)


def _one_token(value: Any) -> bool:
    """A string that names a thing (an id, a code, a name, a path), not words said."""
    return isinstance(value, str) and len(value.split()) <= 1


def _names(words: set[str]) -> set[str]:
    """The words of a text that name a thing: a code with letters and digits, a path."""
    return {
        word
        for word in words
        if "/" in word or (any(c.isdigit() for c in word) and any(c.isalpha() for c in word))
    }


def _texts_retarget(new: str, old: str) -> bool:
    """Two texts ask about other targets: one-token names that differ, or sentences that
    name other things (``status of AA100`` after ``status of BA2490``)."""
    new, old = new.strip(), old.strip()
    if new == old:
        return False
    if _one_token(new) or _one_token(old):
        return True
    new_words, old_words = set(new.lower().split()), set(old.lower().split())
    return bool(_names(new_words - old_words)) and bool(_names(old_words - new_words))


def retargets(new: Any, old: Any, volatile: frozenset[str] = frozenset()) -> bool:
    """Return whether a call asks about another target than the previous call did.

    A target is a one-token string argument (a flight number, an id, a path, a name): one
    that changed is a new target, and so is a text of several words that names other things
    (a code of letters and digits, a path) than before. Any other change of a text is the
    same question put another way; a changed number, an added or a dropped argument is a
    variation.
    """
    if isinstance(new, str) and new[:1] in "{[":
        parsed = json_in_text(new)
        new = parsed if parsed is not None else new
    if isinstance(old, str) and old[:1] in "{[":
        parsed = json_in_text(old)
        old = parsed if parsed is not None else old
    if isinstance(new, str) and isinstance(old, str):
        return _texts_retarget(new, old)
    if not (isinstance(new, dict) and isinstance(old, dict)):
        return False
    for key, value in new.items():
        if key in volatile or key not in old:
            continue
        before = old[key]
        if value != before and retargets(value, before, volatile):
            return True
    return False


class StallState:
    """The current run of one tool returning one result (see ResultStall)."""

    __slots__ = ("epoch", "first_seq", "last", "nothing", "rdig", "seqs", "sigs", "tool")

    def __init__(self) -> None:
        self.tool: str | None = None  # None: no run going
        self.rdig = ""
        self.sigs: set[str] = set()
        self.first_seq = 0
        self.seqs: list[int] = []
        self.epoch = 0
        self.last: Any = None  # the arguments of the run's last call
        self.nothing = -1  # whether the result carries nothing: 1 yes, 0 no, -1 not judged

    def start(self, ev: Event) -> None:
        """Start a new run with this call (the containers are reused: most runs are one call)."""
        self.tool, self.rdig, self.first_seq, self.epoch = ev.tool, ev.rdig, ev.seq, ev.epoch
        self.last, self.nothing = ev.args, -1
        if len(self.sigs) > 1 or len(self.seqs) > 1:
            self.sigs, self.seqs = set(), []  # a finding may hold the old seqs
        else:
            self.sigs.clear()
            self.seqs.clear()
        self.sigs.add(ev.sig)
        self.seqs.append(ev.seq)

    def copy(self) -> StallState:
        twin = StallState()
        twin.tool, twin.rdig, twin.sigs = self.tool, self.rdig, set(self.sigs)
        twin.first_seq, twin.seqs, twin.epoch = self.first_seq, list(self.seqs), self.epoch
        twin.last, twin.nothing = self.last, self.nothing
        return twin


def _stall_message(tool: str, result: Any, count: int, first: int) -> str:
    return (
        f"{tool} has returned the same result ({short(result, 60)}) for {count} different "
        f"arguments in a row since step {first}. Rephrasing the request is not getting "
        "anywhere: use another source or tool, or report that the information is not there."
    )


class ResultStall:
    """The same tool returning the same result in a row although the arguments vary: a
    result that carries nothing, or any result for near-duplicate arguments."""

    name = "result_stall"

    def observe(self, state: StallState, ev: Event, out: Monitor) -> None:
        if ev.quiet:  # mutating, polling, an acknowledgement or an error
            if ev.tool != state.tool or ev.status == "error":
                state.tool = None
            return
        if not (ev.known_result and ev.known_args):
            state.tool = None  # an unknown result is no "same result": it ends the run
            return
        if state.tool != ev.tool or state.rdig != ev.rdig or state.epoch != ev.epoch:
            state.start(ev)
            return
        if ev.sig in state.sigs:
            return  # the very same call again: the repeat detector's business
        if state.nothing < 0:  # judged once per run, when a second call gets the result
            state.nothing = 1 if carries_nothing(ev.result) else 0
        if state.nothing == 0 and retargets(ev.args, state.last, ev.settings.volatile):
            state.start(ev)  # a sweep: one answer per target is news about each target
            return
        state.last = ev.args
        state.sigs.add(ev.sig)
        add_seq(state.seqs, ev.seq)
        count = len(state.sigs)
        level = ev.settings.thresholds["result_stall"].level(count)
        if level is not None:
            out.report(
                ("result_stall", ev.tool, ev.rdig, state.first_seq), level, count, ev.tool,
                f"{ev.tool}:{ev.rdig}", state.seqs, _stall_message,
                (ev.tool, ev.result, count, state.first_seq), True,
            )  # fmt: skip


def _tokens(value: Any, prefix: str, out: set[str], depth: int = 0) -> None:
    if isinstance(value, str):
        if " " in value:
            for word in words(value, 1000):
                out.add(prefix + word)
        else:
            out.add(prefix + value[:200].lower())
    elif isinstance(value, dict):
        if depth < 4:
            for key, item in value.items():
                name = key if isinstance(key, str) else str(key)
                _tokens(item, prefix + name + ".", out, depth + 1)
    elif isinstance(value, (list, tuple)):  # noqa: UP038 (a tuple is a constant)
        if depth < 4:
            for item in value[:50]:
                _tokens(item, prefix, out, depth + 1)
    elif isinstance(value, bool) or value is None:
        out.add(f"{prefix}{value}")
    elif isinstance(value, (int, float)):  # noqa: UP038 (a tuple is a constant)
        if isinstance(value, float) and not math.isfinite(value):
            out.add(f"{prefix}#{value}")  # inf, nan (a live caller may pass them)
        else:
            out.add(f"{prefix}#{int(abs(value)).bit_length()}")  # 9 ~ 10, 100 !~ 200


def _arg_tokens(
    value: Any, prefix: str, out: set[str], depth: int, volatile: frozenset[str]
) -> None:
    """``_tokens(keys._normalize(value, volatile), prefix, out, depth)`` in one pass.

    Normalising first would sort and copy every dict only for the tokens to ignore the
    order; here each part is normalised as it is reached, and parts below the depth limit
    are not normalised at all.
    """
    if isinstance(value, str):
        value = _normalize_str(value, volatile)  # may be parsed JSON, already normalised
        _tokens(value, prefix, out, depth)
    elif isinstance(value, dict):
        if depth < 4:
            if not all(type(key) is str for key in value):
                _tokens(_normalize(value, volatile), prefix, out, depth)  # str(key) may collide
                return
            for key, item in value.items():
                if key not in volatile:
                    _arg_tokens(item, f"{prefix}{key}.", out, depth + 1, volatile)
    elif isinstance(value, (list, tuple)):  # noqa: UP038
        if depth < 4:
            for item in value[:50]:
                _arg_tokens(item, prefix, out, depth + 1, volatile)
    else:
        _tokens(value, prefix, out, depth)


def arg_tokens(args: Any, volatile: frozenset[str], canonical: bool = False) -> set[str]:
    """Return the tokens of normalised arguments: key path + word / path / number bucket.

    ``volatile`` is the full set of keys to drop (a tool's ``ToolSettings.volatile``, which
    holds keys.DEFAULT_VOLATILE); ``canonical`` says the arguments are known to be in
    canonical form already (keys.Digester.canonical): nothing to normalise or drop.
    """
    out: set[str] = set()
    if canonical:
        _tokens(args, "", out, 0)
    else:
        _arg_tokens(args, "", out, 0, volatile)
    return out


def result_tokens(result: Any) -> set[str]:
    text = result if isinstance(result, str) else repr(result)
    return words(text, SHORT_RESULT)


class Cluster:
    """Calls of one tool with nearly the same arguments and results.

    Tokens are computed lazily: most clusters are one healthy call that no later call is
    ever compared with (a new successful edit starts a new epoch, which retires them), so
    their words are never needed. The cluster keeps the first call's arguments and (the
    first SHORT_RESULT characters of) its result until then; steps are plain data that
    nobody changes after observing them.
    """

    __slots__ = (
        "_arg_words", "_args", "_canonical", "_result", "_result_words", "epoch",
        "first_seq", "last", "rdig", "rdigs", "seqs", "sig", "sigs", "volatile",
    )  # fmt: skip

    def __init__(
        self, args: Any, canonical: bool, result: Any, volatile: frozenset[str], epoch: int,
        sig: str, rdig: str, seq: int,
    ) -> None:  # fmt: skip
        self._args: Any = args  # the first call's arguments, until tokenised
        self.last: Any = args  # the last call's arguments (to tell a narrower call)
        self._canonical = canonical  # (keys.Digester.canonical)
        self._result: Any = result[:SHORT_RESULT] if isinstance(result, str) else result
        self._arg_words: set[str] | None = None
        self._result_words: set[str] | None = None
        self.volatile = volatile
        self.epoch = epoch
        self.sig = sig  # the first call's signatures and seq; the sets and the list of
        self.rdig = rdig  # all calls are only made when a second call joins
        self.first_seq = seq
        self.sigs: set[str] | None = None
        self.rdigs: set[str] | None = None
        self.seqs: list[int] | None = None

    def copy(self) -> Cluster:
        """Copy for a new lane: the call's values and word sets are shared (never changed)."""
        twin = Cluster(
            self._args, self._canonical, self._result, self.volatile, self.epoch, self.sig,
            self.rdig, self.first_seq,
        )  # fmt: skip
        twin._arg_words, twin._result_words = self._arg_words, self._result_words
        twin.last = self.last
        if self.sigs is not None and self.rdigs is not None and self.seqs is not None:
            twin.sigs, twin.rdigs, twin.seqs = set(self.sigs), set(self.rdigs), list(self.seqs)
        return twin

    def has_sig(self, sig: str) -> bool:
        return sig == self.sig or (self.sigs is not None and sig in self.sigs)

    def has_rdig(self, rdig: str) -> bool:
        return rdig == self.rdig or (self.rdigs is not None and rdig in self.rdigs)

    def join(self, ev: Event) -> tuple[int, list[int]]:
        """Add a call; return the count of distinct calls and the seqs, for a finding."""
        sigs, rdigs, seqs = self.sigs, self.rdigs, self.seqs
        if sigs is None or rdigs is None or seqs is None:
            sigs, rdigs, seqs = {self.sig}, {self.rdig}, [self.first_seq]
            self.sigs, self.rdigs, self.seqs = sigs, rdigs, seqs
        sigs.add(ev.sig)
        rdigs.add(ev.rdig)
        add_seq(seqs, ev.seq)
        self.last = ev.args
        return len(sigs), seqs

    def args(self) -> set[str]:
        found = self._arg_words
        if found is None:
            found = self._arg_words = arg_tokens(self._args, self.volatile, self._canonical)
            self._args = None
        return found

    def result(self) -> set[str]:
        found = self._result_words
        if found is None:
            found = self._result_words = result_tokens(self._result)
            self._result = None
        return found


def _near_message(tool: str, args: Any, count: int, first: int) -> str:
    return (
        f"You have called {tool} {count} times since step {first} with nearly the same "
        f"arguments (now {short(args)}) and got nearly the same result each time. Small "
        "variations are not helping. " + advice(tool)
    )


class NearRepeat:
    """The same tool with nearly the same arguments and nearly the same result.

    The engine does not call it for mutating, polling or acknowledgement tools, nor for
    failures (see ``Monitor._plan`` and ``Event.quiet``).
    """

    name = "near_repeat"

    def __init__(self) -> None:
        self._tokens: dict[str, set[str]] = {}  # call sig -> arg tokens (bounded cache)

    def observe(self, state: dict[str, list[Cluster]], ev: Event, out: Monitor) -> None:
        if ev.quiet or not (ev.known_result and ev.known_args):
            return  # nearly the same needs results (and arguments) the trace carries
        clusters = state.get(ev.tool)
        if clusters is None:
            clusters = state[ev.tool] = []
        epoch = ev.epoch
        compare = False  # any cluster of this epoch to compare with?
        for cluster in clusters:
            if cluster.epoch == epoch:
                if cluster.has_sig(ev.sig):
                    return  # an exact repeat: the repeat detector's business
                compare = True
        args: set[str] | None = None
        if compare:
            args = self._arg_words(ev)
            if self._match(clusters, ev, args, out):
                return
        cluster = Cluster(
            ev.args, ev.canonical, ev.result, ev.settings.volatile, ev.epoch, ev.sig, ev.rdig,
            ev.seq,
        )  # fmt: skip
        if args is not None:
            cluster._arg_words, cluster._args = args, None
        clusters.append(cluster)
        if len(clusters) > MAX_CLUSTERS:
            del clusters[0]

    def _arg_words(self, ev: Event) -> set[str]:
        args = self._tokens.get(ev.sig)
        if args is None:
            args = arg_tokens(ev.args, ev.settings.volatile, ev.canonical)
            if len(self._tokens) >= TOKEN_CACHE:
                self._tokens.clear()
            self._tokens[ev.sig] = args
        return args

    def _match(self, clusters: list[Cluster], ev: Event, args: set[str], out: Monitor) -> bool:
        """Join the first cluster of this epoch the call is near to; False when none."""
        result: set[str] | None = None
        for cluster in clusters:
            if cluster.epoch != ev.epoch or jaccard(args, cluster.args()) < ARGS_SIMILAR:
                continue
            if not cluster.has_rdig(ev.rdig):
                if refines(ev.args, cluster.last, ev.settings.volatile):
                    continue  # exploration: a narrower target, a new result
                if result is None:
                    result = result_tokens(ev.result)
                if jaccard(result, cluster.result()) < RESULT_SIMILAR:
                    continue
            count, seqs = cluster.join(ev)
            level = ev.settings.thresholds["near_repeat"].level(count)
            if level is not None:
                out.report(
                    ("near_repeat", ev.tool, cluster.first_seq), level, count, ev.tool,
                    f"{ev.tool}~{cluster.first_seq}", seqs, _near_message,
                    (ev.tool, ev.args, count, cluster.first_seq), True,
                )  # fmt: skip
            return True
        return False


def _narrower_text(new: str, old: str) -> bool:
    """A deeper path (``a/`` -> ``a/b``) or a query with all the old words and more."""
    new, old = new.strip(), old.strip()
    if new == old:
        return False
    if "/" in old or "/" in new:
        base = canonical_path(old).rstrip("/")
        deeper = canonical_path(new)
        return base in ("", ".") or deeper.startswith(base + "/")
    old_words, new_words = old.lower().split(), new.lower().split()
    return len(new_words) > len(old_words) and set(old_words) <= set(new_words)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # noqa: UP038


def _narrower_range(new: Any, old: Any) -> bool:
    """A range ``[a, b]`` inside the old one, and not the same."""
    if not (isinstance(new, list) and isinstance(old, list) and len(new) == len(old) == 2):
        return False
    if not all(_number(value) for value in (*new, *old)) or new == old:
        return False
    return bool(old[0] <= new[0] <= new[1] <= old[1] or old[1] == -1 and old[0] <= new[0])


def refines(new: Any, old: Any, volatile: frozenset[str] = frozenset()) -> bool:
    """Return whether a call's arguments narrow the previous call's target (and no more).

    Every argument that changed must narrow (a deeper path, a tighter ``[start, end]``
    range, a query with more words), and at least one must; an argument the new call adds
    narrows it too. Anything else that changed (another number, another word) is no
    narrowing: ``limit: 10`` after ``limit: 9`` is a near repeat.
    """
    if isinstance(new, str) and isinstance(old, str):
        return _narrower_text(new, old)
    if not (isinstance(new, dict) and isinstance(old, dict)):
        return False
    narrowed = False
    for key, value in new.items():
        if key in volatile:
            continue
        if key not in old:
            narrowed = True
            continue
        before = old[key]
        if value == before:
            continue
        text = isinstance(value, str) and isinstance(before, str)
        if not (_narrower_text(value, before) if text else _narrower_range(value, before)):
            return False
        narrowed = True
    return narrowed and all(key in new or key in volatile for key in old)


READ_WORDS: Final = ("read", "view", "open", "cat", "get_file")
PATH_KEYS: Final = (
    "path",
    "file_path",
    "filePath",
    "file",
    "filename",
    "absolute_path",
    "target_file",
)
RANGE_KEYS: Final = (
    "offset", "limit", "view_range", "start", "end", "line", "start_line", "end_line",
    "lines", "line_number", "page", "range",
)  # fmt: skip


_READ_TOOLS: Final[dict[str, bool]] = {}


def read_target(tool: str, args: Any) -> str | None:
    """Return the path when the call reads (part of) a file, else None."""
    if not isinstance(args, dict):
        return None
    reads = _READ_TOOLS.get(tool)
    if reads is None:
        reads = any(word in tool.lower() for word in READ_WORDS)
        if len(_READ_TOOLS) < 10_000:
            _READ_TOOLS[tool] = reads
    if not (reads or args.get("command") == "view"):
        return None
    for key in PATH_KEYS:
        path = args.get(key)
        if isinstance(path, str) and path:
            return canonical_path(path.strip())
    return None


def read_span(args: dict[str, Any]) -> str:
    """Return the part of the file a read asks for: its range arguments, one per line.

    (Each is a repr, which never holds a raw newline or NUL: "span NUL path" names one
    range of one file unambiguously.)
    """
    return "\n".join([repr(args[key]) for key in RANGE_KEYS if args.get(key) is not None])


class Reads(Tally):
    """One part (range) of a file as read on a path."""

    __slots__ = ("at", "epoch")

    def __init__(self, seq: int, at: int, epoch: int) -> None:
        super().__init__(seq)
        self.at = at  # the file's read count when this range was last read
        self.epoch = epoch

    def copy(self) -> Reads:
        twin = Reads(self.first_seq, self.at, self.epoch)
        self.copy_tally(twin)
        return twin


class ReadState:
    """The reads of a path: how often each file was read, and each range's reads.

    Each map is remembered up to HORIZON keys (base.py), then the older half is forgotten. A
    forgotten file counts its reads again from one, so the next read of a range read before then
    is never taken as a re-read after other ranges (the range's count is ahead of the file's
    new one): forgetting can miss a re-read, never invent one.
    """

    __slots__ = ("files", "ranges")

    def __init__(self) -> None:
        self.files: dict[str, int] = {}  # path -> reads of it
        self.ranges: dict[str, Reads] = {}  # "span NUL path" -> that range's reads

    def copy(self) -> ReadState:
        twin = ReadState()
        twin.files = dict(self.files)
        twin.ranges = {key: reads.copy() for key, reads in self.ranges.items()}
        return twin


def _read_message(where: str, path: str, count: int, first: int) -> str:
    return (
        f"You have read {where} of {path} {count} times since step {first}, in between reads "
        "of other parts of it. Nothing changed it since: use what you read before (note what "
        "you need) instead of reading it again."
    )


class ReadRange:
    """The same part of a file read again and again, between reads of its other parts."""

    name = "read_range"

    def observe(self, state: ReadState, ev: Event, out: Monitor) -> None:
        if ev.quiet:
            return
        path = read_target(ev.tool, ev.args)
        if path is None:
            return
        span = read_span(ev.args)
        key = span + "\0" + path
        n = state.files.pop(path, 0) + 1  # (put back last: the files read longest ago go first)
        state.files = make_room(state.files)
        state.files[path] = n
        entry = state.ranges.get(key)
        if entry is None or entry.epoch != ev.epoch:
            if entry is None:
                state.ranges = make_room(state.ranges)
            state.ranges[key] = Reads(ev.seq, n, ev.epoch)
            return
        interleaved = n - entry.at > 1  # other ranges were read since
        entry.at = n
        if not interleaved:
            return  # back-to-back rereads are the repeat detector's business
        seqs = entry.again(ev.seq)
        level = ev.settings.thresholds["read_range"].level(entry.count)
        if level is not None:
            where = f"range {span.replace(chr(10), ', ')}" if span else "the whole file"
            out.report(
                ("read_range", key, entry.first_seq), level, entry.count,
                ev.tool, ev.sig, seqs, _read_message, (where, path, entry.count, entry.first_seq),
                True,
            )  # fmt: skip
