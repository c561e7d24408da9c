"""Canonical forms and digests of tool arguments and results.

Two calls are "the same" when their normalised values are equal:

- object keys are sorted at every depth (``{a, b}`` equals ``{b, a}``);
- volatile keys (timestamps, request/trace ids, nonces, durations, the id of the tool call
  itself) are dropped at every depth;
- an object that names the tool call it answers (a ``tool_call_id`` or ``tool_use_id`` key:
  a serialised LangChain ToolMessage, a tool_result block) is a message *about* the call:
  its own ids (``id``, ``call_id``, ``run_id``, ``parent_run_id``, ``message_id``) are
  dropped too, so it compares by what it says (content, status, name);
- a string that holds a JSON object or array is parsed and normalised as that value
  (Codex, OpenAI-style ``arguments`` arrive as JSON text; ``json_in_text`` is the rule, for
  every reader of arguments and results);
- runs of ASCII whitespace in strings collapse to one space, ends are stripped;
- a path-like string (no whitespace, has ``/``, not a URL) is canonicalised:
  ``./a//b/`` -> ``a/b``.

The key rule (``dropped_keys``) and the JSON rule (``json_in_text``) are the only ones:
call signatures, result digests, loop fingerprints (detection/fingerprints.py) and the run
comparison all read values through them, so what is "the same" cannot drift between them.

Digests are xxh3-64 over orjson's sorted-key encoding: deterministic across processes and
machines, and about 20x cheaper than ``json.dumps(sort_keys=True)`` + SHA-256 (see
bench/bench_detection.py). They identify values; they are not cryptographic.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any, Final

import orjson
import xxhash

__all__ = [
    "CALL_ID_KEYS",
    "DEFAULT_VOLATILE",
    "MESSAGE_ID_KEYS",
    "call_signature",
    "digest",
    "digester",
    "dropped_keys",
    "json_in_text",
    "normalize",
    "progress_signature",
    "value_digest",
]

#: Keys whose values change on every call without saying anything about the work:
#: timestamps, correlation ids, nonces and timings. Dropped at every depth, in args and results.
DEFAULT_VOLATILE: Final[frozenset[str]] = frozenset(
    {
        "ts",
        "timestamp",
        "request_id",
        "trace_id",
        "span_id",
        "nonce",
        # the same ideas under the spellings real tools use
        "requestId",
        "traceId",
        "spanId",
        "created_at",
        "createdAt",
        "updated_at",
        "updatedAt",
        "duration_ms",
        "durationMs",
        "totalDurationMs",
        "elapsed",
        "elapsed_ms",
        "execution_time",
        "wall_time",
        # the id of the tool call itself, echoed back in its result (never a tool's target)
        "tool_call_id",
        "toolCallId",
        "tool_use_id",
        "toolUseId",
    }
)

#: Keys that name the tool call an object answers: such an object is a message about the
#: call (a serialised ToolMessage, a tool_result block), and its own ids go too.
CALL_ID_KEYS: Final[frozenset[str]] = frozenset(
    {"tool_call_id", "toolCallId", "tool_use_id", "toolUseId"}
)

#: The ids of a message about a call: the message's, the call's and the framework run's.
#: Dropped only inside such a message: elsewhere an ``id`` or a ``run_id`` may be the very
#: thing a tool is asked about (``get_workflow_run(run_id=...)``).
MESSAGE_ID_KEYS: Final[frozenset[str]] = frozenset(
    {
        "id",
        "call_id",
        "callId",
        "run_id",
        "runId",
        "parent_run_id",
        "parentRunId",
        "message_id",
        "messageId",
    }
)

_OPTS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
# The library functions of the hot path, bound once: the compiled engine reads a Final name
# directly, where it looks any other module-level name up in the module's dict at each use.
_dumps: Final = orjson.dumps
_loads: Final = orjson.loads
xxh3_64_hexdigest: Final = xxhash.xxh3_64_hexdigest
xxh3_128_intdigest: Final = xxhash.xxh3_128_intdigest
_isprintable: Final = str.isprintable  # (a method the compiled engine would look up by name)
_CALL_ID_KEYS: Final = tuple(sorted(CALL_ID_KEYS))
_WS: Final = re.compile(r"[ \t\n\r\f\v]+")
_WS_ANY: Final = re.compile(r"[ \t\n\r\f\v]")
_SEPARATORS: Final = ("\x1c", "\x1d", "\x1e", "\x1f")  # whitespace to str.split(), not to _WS
_EMPTY: Final[frozenset[str]] = frozenset()


def _canonical_str(text: str) -> bool:
    """Return whether ``_normalize_str`` leaves a string as it is (a quick, exact test)."""
    if not text:
        return True
    if not _isprintable(text):
        return False  # tabs, newlines (to collapse) and other rare characters: normalise
    # printable text holds no whitespace but the plain space
    first, last = text[0], text[-1]
    if first == " " or last == " " or "  " in text:
        return False  # strip() or collapsing would change it
    if first in "{[" and last in "}]":
        return False  # JSON text: parsed and normalised as a value
    if " " in text or "/" not in text or "://" in text or len(text) >= 4096:
        return True  # not a path: nothing more to do
    return canonical_path(text) == text


def canonical_path(path: str) -> str:
    """Return ``posixpath.normpath(path)``, without calling it when it could change nothing.

    normpath only rewrites "//", "." and ".." segments, a leading "./" and a trailing "/".
    """
    if "//" in path or "/." in path or path.startswith(".") or path.endswith("/"):
        return posixpath.normpath(path)
    return path if path else "."


def _canonical(value: Any, volatile: frozenset[str]) -> bool:
    """Return whether ``_normalize(value)`` encodes to the same JSON as ``value`` itself.

    True for most tool arguments: string keys, no volatile key, strings already trimmed,
    collapsed and canonical paths. Then the orjson encoding (keys sorted) of the value as it
    is can be hashed, with no normalised copy made.
    """
    if isinstance(value, str):
        return _canonical_str(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str or key in volatile or not _canonical(item, volatile):
                return False
        return True
    if isinstance(value, (list, tuple)):  # noqa: UP038 (a tuple is a constant)
        return all(_canonical(item, volatile) for item in value)
    return True  # numbers, booleans, null (and what orjson encodes the same either way)


def _collapse(text: str) -> str:
    """Return ``text`` with each run of ASCII whitespace made one space.

    ``str.split()`` does it several times faster than the regex, and for ASCII text it splits
    on the same characters but for the four separators \x1c-\x1f, which the regex keeps.
    """
    if text.isascii() and not any(sep in text for sep in _SEPARATORS):
        return " ".join(text.split())
    return _WS.sub(" ", text)


def json_in_text(text: str) -> Any:
    """Return the JSON object or array a string holds, or None when it holds none.

    The one rule for JSON inside a string, for every reader of arguments and results (the
    importers, signatures, loop fingerprints, run comparison): the stripped text starts with
    ``{`` or ``[``, ends with ``}`` or ``]`` and parses as JSON. Anything else is text, so a
    bare scalar such as "42", "true" or '"x"' stays text.
    """
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[" or stripped[-1] not in "}]":
        return None
    try:
        return _loads(stripped)
    except orjson.JSONDecodeError:  # not JSON, or nested deeper than orjson reads
        return None


def _normalize_str(text: str, volatile: frozenset[str]) -> Any:
    stripped = text.strip()
    if not stripped:
        return stripped
    if stripped[0] in "{[" and stripped[-1] in "}]":
        parsed = json_in_text(stripped)
        if parsed is not None:
            return _normalize(parsed, volatile)
    if _WS_ANY.search(stripped) is None:  # one word: nothing to collapse
        if "/" in stripped and "://" not in stripped and len(stripped) < 4096:
            return canonical_path(stripped)
        return stripped
    return _collapse(stripped)


def dropped_keys(obj: dict[Any, Any], volatile: frozenset[str]) -> frozenset[str]:
    """Return the keys of an object that say nothing about the work: the volatile keys, and
    in a message about a call (it holds a key of CALL_ID_KEYS) its ids too.

    The one rule for keys, for signatures, result digests, loop fingerprints and the run
    comparison. It holds at the object's level: what a message holds keeps its ``id``, as a
    result's content may be about one.
    """
    for key in _CALL_ID_KEYS:  # (four lookups: cheaper than a walk over the object's keys)
        if key in obj:
            return volatile | MESSAGE_ID_KEYS
    return volatile


def _normalize(value: Any, volatile: frozenset[str], sort: bool = True) -> Any:
    """Return the canonical form of a value (the volatile keys being the full set).

    ``sort=False`` (for hashing) leaves string-keyed objects in their order: the encoding
    sorts keys anyway (_encode), so the bytes are the same without a sort per object.
    """
    if isinstance(value, str):
        return _normalize_str(value, volatile)
    if isinstance(value, dict):
        drop = dropped_keys(value, volatile)
        if not sort and all(type(key) is str for key in value):
            return {
                key: _normalize(item, volatile, False)
                for key, item in value.items()
                if key not in drop
            }
        return {
            str(key): _normalize(value[key], volatile, sort)
            for key in sorted(value, key=str)
            if key not in drop
        }
    if isinstance(value, (list, tuple)):  # noqa: UP038 (a tuple is a constant)
        return [_normalize(item, volatile, sort) for item in value]
    return value


def normalize(value: Any, volatile: Iterable[str] = _EMPTY) -> Any:
    """Return the canonical form of a JSON value (see the module docstring).

    ``volatile`` lists extra keys to drop on top of DEFAULT_VOLATILE.
    """
    keys = DEFAULT_VOLATILE | frozenset(volatile) if volatile else DEFAULT_VOLATILE
    return _normalize(value, keys)


def _encode(value: Any) -> bytes:
    try:
        return _dumps(value, option=_OPTS)
    except TypeError:  # ints beyond 64 bits, odd types from a live caller
        import json

        return json.dumps(value, sort_keys=True, default=repr, separators=(",", ":")).encode()


def digest(value: Any) -> str:
    """Return a short hex digest of a value as it is (normalise it first for call identity)."""
    if isinstance(value, bytes):
        return xxh3_64_hexdigest(value)
    return xxh3_64_hexdigest(_encode(value))


#: Digesters remember the digests of short values (loops repeat the same arguments and
#: results); each memo is cleared when full, so memory stays bounded.
_MEMO_MAX: Final = 2048
_MEMO_SIZE: Final = 512  # only values whose text/encoding is shorter than this are remembered


class Digester:
    """``value_digest`` for one full volatile key set: call it with a value.

    The engine keeps one per tool: the pattern and the memo are bound once instead of being
    looked up on every call.
    """

    __slots__ = ("canonical", "memo", "volatile")

    def __init__(self, volatile: frozenset[str]) -> None:
        self.volatile = volatile
        self.canonical = False  # whether the last value digested was canonical as it was
        self.memo: dict[Any, str] = {}  # short text, or encoding of a value to normalise

    def __call__(self, value: Any) -> str:
        return self.digest(value)

    def _remember(self, key: Any, found: str) -> None:
        memo = self.memo
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = found

    def digest(self, value: Any) -> str:
        """Return digest(normalize(value)) with this digester's volatile keys.

        A value already canonical is hashed as it is. Others are normalised, and remembered
        when short: strings by their text, other values by a 128-bit hash of their encoding
        (orjson's bytes each hold a 4 KiB buffer; a key collision would be as unlikely as
        the 64-bit digests colliding, which signatures accept anyway).
        """
        volatile = self.volatile
        if isinstance(value, str):
            if _canonical_str(value):
                self.canonical = True
                return xxh3_64_hexdigest(_encode(value))
            self.canonical = False
            if len(value) >= _MEMO_SIZE:
                return xxh3_64_hexdigest(_encode(_normalize_str(value, volatile)))
            known = self.memo.get(value)
            if known is None:
                known = xxh3_64_hexdigest(_encode(_normalize_str(value, volatile)))
                self._remember(value, known)
            return known
        try:
            raw = _dumps(value, option=_OPTS)
        except TypeError:
            raw = _encode(value)
        self.canonical = _canonical(value, volatile)
        if self.canonical:
            return xxh3_64_hexdigest(raw)  # most values: hashed as they are, nothing kept
        if len(raw) >= _MEMO_SIZE:
            return xxh3_64_hexdigest(_encode(_normalize(value, volatile, False)))
        key = xxh3_128_intdigest(raw)
        known = self.memo.get(key)
        if known is None:
            known = xxh3_64_hexdigest(_encode(_normalize(value, volatile, False)))
            self._remember(key, known)
        return known


_digesters: Final[dict[frozenset[str], Digester]] = {}


def clear_memo() -> None:
    """Forget remembered digests (benchmarks start each job cold with this)."""
    _digesters.clear()


def digester(volatile: frozenset[str] = DEFAULT_VOLATILE) -> Digester:
    """Return the shared Digester for one full volatile key set."""
    found = _digesters.get(volatile)
    if found is None:
        if len(_digesters) >= 256:
            _digesters.clear()
        found = _digesters[volatile] = Digester(volatile)
    return found


def value_digest(value: Any, volatile: frozenset[str] = DEFAULT_VOLATILE) -> str:
    """Return digest(normalize(value)) with ``volatile`` as the full key set, fast.

    Equal to ``digest(normalize(value))`` by construction: most arguments are already
    canonical once sorted (``_canonical`` checks that on the value, without copying it), and
    their encoding is hashed as it is. Short strings and values that do need normalising are
    answered from a memo when seen recently (loops repeat them).
    """
    return digester(volatile).digest(value)


def _volatile_set(volatile: Iterable[str]) -> frozenset[str]:
    if isinstance(volatile, frozenset) and volatile >= DEFAULT_VOLATILE:
        return volatile
    return DEFAULT_VOLATILE | frozenset(volatile)


def call_signature(tool: str, args: Any, volatile: Iterable[str] = _EMPTY) -> str:
    """Return ``"tool:digest"`` identifying a call: the tool and its normalised arguments."""
    return f"{tool}:{value_digest(args, _volatile_set(volatile))}"


def progress_signature(
    call_sig: str, result: Any, status: str = "ok", volatile: Iterable[str] = _EMPTY
) -> str:
    """Return the call signature plus the normalised result's digest and the status.

    Same call, different result (a poll that moved, the next page) gives a different
    progress signature: that is progress.
    """
    return f"{call_sig}:{value_digest(result, _volatile_set(volatile))}:{status}"


# -- error fingerprints ---------------------------------------------------------------------
#
# Two failures with the same fingerprint hit the same blocker, whatever the attempts varied.
# The fingerprint keeps what names the blocker: the error class and the words of the message
# (its template), the exit code, the HTTP status, and short quoted names that do not come from
# the call (the module in "No module named 'foo'", the symbol in "'bar' undeclared": fixing
# one such error and hitting the next is progress, not the same blocker). It drops what
# varies between attempts at one blocker:
#
# - what the call echoes back: a whole argument value, and the paths, file names and other
#   punctuated words of the arguments (an ``old_str``, a URL, a path, a package name);
# - quoted spans that are long or span lines (an echoed code snippet);
# - numbers, line numbers and counts (but not the exit code or HTTP status, read first);
# - hex ids, hashes, UUIDs, timestamps, and URLs down to their host (paths, query strings);
# - the directories of a path (``/tmp/x/build/a.c`` and ``build/a.c`` both name ``a.c``);
# - a validation error's echo of the input: pydantic's ``input_value=…``, ``input_type=…``
#   and its "For further information visit https://errors.pydantic.dev/…" line (three
#   bookings each missing ``payment_id`` are one blocker, whatever else they sent).
#
# Only the error's salient lines are read: the lines that say what failed (an error word,
# an exception class), the first four and the last four of them. A failure whose text has
# none (a grep that found nothing: exit code 1, no output) is *weak*: it names no blocker,
# and only the exact-repeat rule counts it.

FAULT_HEAD: Final = 4000
FAULT_TAIL: Final = 2000
FAULT_LINES: Final = 4  # salient lines kept from the start and from the end
FAULT_MAX: Final = 400  # characters of the fingerprint text

_SALIENT: Final = re.compile(
    r"error|exception|fail|fatal|denied|refused|not found|no such|cannot|can't|could not"
    r"|couldn't|unable|invalid|unknown|missing|timed? ?out|traceback|panic|abort|forbidden"
    r"|unauthori[sz]ed|too many|rate.?limit|not allowed|not permitted|unrecognized"
    r"|unexpected|does not exist|doesn't exist|no module|undefined|undeclared|no replacement"
    r"|did not appear|no match|not a directory|is a directory|already exists|conflict"
    r"|reject|violat|illegal|not supported|unsupported|out of memory|killed|segmentation"
    r"|usage:|captcha|cloudflare|just a moment|err!|\bwrong\b|mismatch|refus|blocked"
    r"|not recognized|no rule to make|required|expected|exactly one|formatted|format error",
    re.IGNORECASE,
)
_EXCEPTION_LINE: Final = re.compile(r"^\s*[\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b")
_EXIT: Final = re.compile(
    r"(?:exit|return)[ _-]?(?:code|status)[ \t]*[:=]?[ \t]*(-?\d+)"
    r"|exited with (?:exit )?(?:code|status)[ \t]*(-?\d+)"
    r"|<returncode>\s*(-?\d+)\s*</returncode>|non-zero exit status (\d+)"
    r"|\[(?:exit code|exit status)[: ]+(-?\d+)\]",
    re.IGNORECASE,
)
_HTTP: Final = re.compile(
    r"\b(?:http(?:/[\d.]+)?|status(?:[ _]?code)?|response(?: code)?|error(?: code)?|code)"
    r"[\s:=#]*([45]\d\d)\b"
    r"|\b([45]\d\d)[ \t]+(?:(?:client|server) error|too many requests|forbidden|not found"
    r"|unauthori[sz]ed|bad request"
    r"|internal server error|bad gateway|service unavailable|gateway time-?out|gone"
    r"|method not allowed|conflict|payment required|request time-?out)",
    re.IGNORECASE,
)
_URL: Final = re.compile(
    r"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^@/\s'\"`<>]*@)?([^/\s'\"`<>?#:]+)[^\s'\"`<>]*"
)
_QUOTED: Final = re.compile(
    r"(?<![\w'\"`])(?:'([^'\n]{0,400})'|\"([^\"\n]{0,400})\"|`([^`]{0,400})`|‘([^’]{0,400})’"
    r"|“([^”]{0,400})”)(?![\w'\"`])"
)
_TIME: Final = re.compile(
    r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"
)
_HEX: Final = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
    r"|\b0x[0-9a-fA-F]+\b|\b(?=[a-fA-F]*\d)(?=\d*[a-fA-F])[0-9a-fA-F]{7,}\b"
)
_PATH: Final = re.compile(r"(?:[\w.~@+-]*/)+([\w.@+-]*)")
_NUMBER: Final = re.compile(r"\d+(?:[.,]\d+)*")
_VALIDATION_ECHO: Final = re.compile(
    r",[ \t]*input_value=.*?,[ \t]*input_type=[\w.]+(?=\])"
    r"|[ \t]*For further information visit https?://errors\.pydantic\.dev\S*",
    re.IGNORECASE,
)
#: A pydantic error names its field on the line before the message: joined, "payment_id:
#: Field required" and "seat: Field required" stay two blockers.
_VALIDATION_LOC: Final = re.compile(r"^(\S[^\n]*)\n[ \t]+(?=[^\n]*\[type=)", re.MULTILINE)
_ECHO_TOKEN: Final = re.compile(r"[^\s'\"`=,;()\[\]{}<>|&]+")


class Fault:
    """The fingerprint of one failure: its key, its own words, and whether it names a blocker."""

    __slots__ = ("key", "line", "status", "strong")

    def __init__(self, key: str, line: str, strong: bool, status: str = "") -> None:
        self.key = key  # the fingerprint: the same key is the same blocker
        self.line = line  # the first salient line as the tool wrote it (for messages)
        self.strong = strong  # an error line or an HTTP status: it says what failed
        self.status = status  # the HTTP status it names, if any ("429")

    def __repr__(self) -> str:
        return f"Fault({self.key!r}, strong={self.strong})"


def _fault_text(value: Any, out: list[str], depth: int = 0) -> None:
    """Collect the text of a result: strings as they are, codes as ``key: value`` lines."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        if depth < 4:
            for key, item in list(value.items())[:50]:
                if isinstance(item, (int, float)) and not isinstance(item, bool):  # noqa: UP038
                    out.append(f"{key}: {item}")
                else:
                    _fault_text(item, out, depth + 1)
    elif isinstance(value, (list, tuple)) and depth < 4:  # noqa: UP038 (a tuple is a constant)
        for item in value[:50]:
            _fault_text(item, out, depth + 1)


def _echoes(value: Any, whole: set[str], tokens: set[str], depth: int = 0) -> None:
    """Collect what a call could echo: its string values, and their punctuated words."""
    if isinstance(value, str):
        text = value.strip()
        if not text or len(whole) >= 32:
            return
        whole.add(text[:2000])
        if text != value and len(value) <= 2000:
            whole.add(value)  # echoed as it was, surrounding whitespace and all
        for token in _ECHO_TOKEN.findall(text[:2000]):
            if len(token) >= 4 and not token.isalpha():
                tokens.add(token.rstrip(".:"))
    elif isinstance(value, dict):
        if depth < 3:
            for item in list(value.values())[:32]:
                _echoes(item, whole, tokens, depth + 1)
    elif isinstance(value, (list, tuple)) and depth < 3:  # noqa: UP038 (a tuple is a constant)
        for item in value[:32]:
            _echoes(item, whole, tokens, depth + 1)


def _code(match: re.Match[str] | None) -> str:
    if match is None:
        return ""
    return next((group for group in match.groups() if group is not None), "")


def _line_template(line: str, whole: set[str], tokens: set[str]) -> str:
    def quoted(match: re.Match[str]) -> str:
        inner = next((group for group in match.groups() if group is not None), "").strip()
        if inner == "<arg>" or inner in whole or inner in tokens:
            return "<arg>"
        if len(inner) >= 8 and any(inner in value for value in whole):
            return "<arg>"
        if len(inner) > 40:
            return "<q>"  # a snippet: what it quotes varies with the attempt
        return "'" + inner + "'"

    line = _QUOTED.sub(quoted, line)
    if tokens:
        line = _ECHO_TOKEN.sub(
            lambda m: "<arg>" if m.group(0).rstrip(".:") in tokens else m.group(0), line
        )
    line = _TIME.sub("<t>", line)
    line = _HEX.sub("<h>", line)
    line = _PATH.sub(lambda m: m.group(1) or "/", line)
    line = _NUMBER.sub("#", line)
    return " ".join(line.lower().split())


def error_fault(result: Any, args: Any = None) -> Fault:
    """Return the fingerprint of a failed call's result (see the comment above).

    ``args`` are the call's arguments: what of them the error echoes is dropped.
    """
    parts: list[str] = []
    _fault_text(result, parts)
    text = "\n".join(parts)
    if len(text) > FAULT_HEAD + FAULT_TAIL:
        text = text[:FAULT_HEAD] + "\n" + text[-FAULT_TAIL:]
    exit_code = _code(_EXIT.search(text))
    status = _code(_HTTP.search(text))
    first = ""
    for raw in text.split("\n"):
        line = raw.strip()
        hit = _SALIENT.search(line) or _EXCEPTION_LINE.match(line)
        if line and hit and not _EXIT.fullmatch(line):
            first = line  # the error in the tool's own words, for messages
            break
    whole: set[str] = set()
    tokens: set[str] = set()
    _echoes(args, whole, tokens)

    def url(match: re.Match[str]) -> str:
        found = match.group(0)
        if found in whole or found.rstrip(".,;:)") in whole:
            return "<arg>"
        return "<url " + match.group(1).lower().removeprefix("www.") + ">"

    if "[type=" in text or "errors.pydantic.dev" in text:
        text = _VALIDATION_ECHO.sub("", _VALIDATION_LOC.sub(r"\1: ", text))
    text = _URL.sub(url, text)  # first: an echoed value must not cut a URL in two
    for value in sorted((v for v in whole if len(v) >= 4), key=len, reverse=True):
        if value in text:
            text = text.replace(value, "<arg>")
    salient: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or _EXIT.fullmatch(line):
            continue
        if _SALIENT.search(line) is None and _EXCEPTION_LINE.match(line) is None:
            continue
        shape = _line_template(line, whole, tokens)
        if shape and shape not in salient:
            salient.append(shape)
    strong = bool(salient) or bool(status)
    if not salient:  # a weak failure: its first and last lines, for exact comparisons
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        first = first or (lines[0] if lines else "")
        salient = [_line_template(line, whole, tokens) for line in lines[:1] + lines[-1:]]
    elif len(salient) > 2 * FAULT_LINES:
        salient = salient[:FAULT_LINES] + salient[-FAULT_LINES:]
    body = " | ".join(salient)[:FAULT_MAX]
    key = f"exit={exit_code};http={status};{body}" if strong else f"weak;exit={exit_code};{body}"
    return Fault(key, first[:300], strong, status)
