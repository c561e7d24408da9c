"""Canonical forms and digests of tool arguments and results.

Two calls are "the same" when their normalised values are equal:

- object keys are sorted at every depth (``{a, b}`` equals ``{b, a}``);
- volatile keys (timestamps, request/trace ids, nonces, durations) are dropped at every depth;
- a string that holds a JSON object or array is parsed and normalised as that value
  (Codex, OpenAI-style ``arguments`` arrive as JSON text);
- runs of ASCII whitespace in strings collapse to one space, ends are stripped;
- a path-like string (no whitespace, has ``/``, not a URL) is canonicalised:
  ``./a//b/`` -> ``a/b``.

Digests are xxh3-64 over orjson's sorted-key encoding: deterministic across processes and
machines, and about 20x cheaper than ``json.dumps(sort_keys=True)`` + SHA-256 (see
bench/bench_detection.py). They identify values; they are not cryptographic.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any

import orjson
from xxhash import xxh3_64_hexdigest, xxh3_128_intdigest

__all__ = [
    "DEFAULT_VOLATILE",
    "call_signature",
    "digest",
    "digester",
    "normalize",
    "progress_signature",
    "value_digest",
]

#: Keys whose values change on every call without saying anything about the work:
#: timestamps, correlation ids, nonces and timings. Dropped at every depth, in args and results.
DEFAULT_VOLATILE: frozenset[str] = frozenset(
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
    }
)

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_WS = re.compile(r"[ \t\n\r\f\v]+")
_WS_ANY = re.compile(r"[ \t\n\r\f\v]")
_SEPARATORS = ("\x1c", "\x1d", "\x1e", "\x1f")  # whitespace to str.split(), not to _WS
_EMPTY: frozenset[str] = frozenset()


def _canonical_str(text: str) -> bool:
    """Return whether ``_normalize_str`` leaves a string as it is (a quick, exact test)."""
    if not text:
        return True
    if not text.isprintable():
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


def _normalize_str(text: str, volatile: frozenset[str]) -> Any:
    stripped = text.strip()
    if not stripped:
        return stripped
    if stripped[0] in "{[" and stripped[-1] in "}]":
        try:
            parsed = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            pass
        else:
            return _normalize(parsed, volatile)
    if _WS_ANY.search(stripped) is None:  # one word: nothing to collapse
        if "/" in stripped and "://" not in stripped and len(stripped) < 4096:
            return canonical_path(stripped)
        return stripped
    return _collapse(stripped)


def _normalize(value: Any, volatile: frozenset[str], sort: bool = True) -> Any:
    """Return the canonical form of a value (the volatile keys being the full set).

    ``sort=False`` (for hashing) leaves string-keyed objects in their order: the encoding
    sorts keys anyway (_encode), so the bytes are the same without a sort per object.
    """
    if isinstance(value, str):
        return _normalize_str(value, volatile)
    if isinstance(value, dict):
        if not sort and all(type(key) is str for key in value):
            return {
                key: _normalize(item, volatile, False)
                for key, item in value.items()
                if key not in volatile
            }
        return {
            str(key): _normalize(value[key], volatile, sort)
            for key in sorted(value, key=str)
            if key not in volatile
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
        return orjson.dumps(value, option=_OPTS)
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
_MEMO_MAX = 2048
_MEMO_SIZE = 512  # only values whose text/encoding is shorter than this are remembered


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
            raw = orjson.dumps(value, option=_OPTS)
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


_digesters: dict[frozenset[str], Digester] = {}


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
