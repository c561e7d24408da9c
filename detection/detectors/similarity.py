"""Result stall, near repeat and read range: loops that change the arguments a little.

None of these look at mutating or polling tools (an edit's "OK" is no stall; a poll is
exempt), nor at failures (errors escalate as tool failures, see repeat.py).
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

from ..keys import _normalize, _normalize_str
from .base import Event, Lane, Reporter, add_seq, advice, jaccard, short, words

#: Tools whose result is a fixed acknowledgement, whatever the arguments.
ACK_TOOLS = frozenset({"think", "todowrite", "todoread", "update_plan", "plan", "memory"})
MAX_CLUSTERS = 4  # near-repeat clusters remembered per tool
ARGS_SIMILAR = 0.6
RESULT_SIMILAR = 0.8
SHORT_RESULT = 4000


def _skip(ev: Event) -> bool:
    if ev.quiet is not None:
        return ev.quiet
    settings = ev.settings
    return (
        settings is None
        or settings.mutating
        or settings.polling
        or ev.status == "error"
        or (ev.tool or "").lower() in ACK_TOOLS
    )


class ResultStall:
    """The same tool returning the same result in a row although the arguments vary."""

    name = "result_stall"

    def new_state(self) -> list[Any]:
        return [None, "", set(), 0, [], 0]  # tool, result, sigs, first seq, seqs, epoch

    def new_turn(self, state: list[Any], scope: str) -> list[Any]:
        return self.new_state() if scope == "turn" else state

    def observe(self, state: list[Any], ev: Event, lane: Lane, out: Reporter) -> None:
        if _skip(ev):
            if ev.tool != state[0] or ev.status == "error":
                state[0] = None
            return
        if state[0] != ev.tool or state[1] != ev.rdig or state[5] != lane.epoch:
            state[:] = [ev.tool, ev.rdig, {ev.sig}, ev.seq, [ev.seq], lane.epoch]
            return
        if ev.sig in state[2]:
            return  # the very same call again: the repeat detector's business
        state[2].add(ev.sig)
        add_seq(state[4], ev.seq)
        count = len(state[2])
        settings = ev.settings
        assert settings is not None
        level = settings.thresholds["result_stall"].level(count)
        if level is not None:

            def message() -> str:
                return (
                    f"{ev.tool} has returned the same result ({short(ev.result, 60)}) for "
                    f"{count} different arguments in a row since step {state[3]}. Rephrasing "
                    "the request is not getting anywhere: use another source or tool, or report "
                    "that the information is not there."
                )

            out.report(
                "result_stall", (ev.tool, ev.rdig, state[3]), level, count, ev.tool,
                f"{ev.tool}:{ev.rdig}", state[4], message, secondary=True,
            )  # fmt: skip


def _tokens(value: Any, prefix: str, out: set[str], depth: int = 0) -> None:
    if isinstance(value, dict):
        if depth < 4:
            for key, item in value.items():
                _tokens(item, f"{prefix}{key}.", out, depth + 1)
    elif isinstance(value, list):
        if depth < 4:
            for item in value[:50]:
                _tokens(item, prefix, out, depth + 1)
    elif isinstance(value, str):
        if " " in value:
            out.update(prefix + word for word in words(value, 1000))
        else:
            out.add(prefix + value[:200].lower())
    elif isinstance(value, bool) or value is None:
        out.add(f"{prefix}{value}")
    elif isinstance(value, int | float):
        out.add(f"{prefix}#{int(abs(value)).bit_length()}")  # 9 ~ 10, 100 !~ 200


def _arg_tokens(value: Any, prefix: str, out: set[str], depth: int, volatile: frozenset[str]):
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
    elif isinstance(value, list | tuple):
        if depth < 4:
            for item in value[:50]:
                _arg_tokens(item, prefix, out, depth + 1, volatile)
    else:
        _tokens(value, prefix, out, depth)


def arg_tokens(args: Any, volatile: frozenset[str]) -> frozenset[str]:
    """Return the tokens of normalised arguments: key path + word / path / number bucket.

    ``volatile`` is the full set of keys to drop (a tool's ``ToolSettings.volatile``, which
    holds keys.DEFAULT_VOLATILE).
    """
    out: set[str] = set()
    _arg_tokens(args, "", out, 0, volatile)
    return frozenset(out)


def result_tokens(result: Any) -> frozenset[str]:
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

    __slots__ = ("_args", "_result", "epoch", "first_seq", "rdigs", "seqs", "sigs", "volatile")

    def __init__(self, ev: Event, epoch: int, volatile: frozenset[str]) -> None:
        self._args: Any = ev.args  # the call's arguments, until tokenised
        result = ev.result
        self._result: Any = result[:SHORT_RESULT] if isinstance(result, str) else result
        self.volatile = volatile
        self.epoch = epoch
        self.rdigs = {ev.rdig}
        self.sigs = {ev.sig}
        self.first_seq = ev.seq
        self.seqs = [ev.seq]

    def __deepcopy__(self, memo: dict[int, Any]) -> Cluster:
        """Copy for a new lane (Lane.copy): the call's values are shared, never changed."""
        twin = copy.copy(self)
        twin.rdigs, twin.sigs, twin.seqs = set(self.rdigs), set(self.sigs), list(self.seqs)
        return twin

    @property
    def args(self) -> frozenset[str]:
        if not isinstance(self._args, frozenset):
            self._args = arg_tokens(self._args, self.volatile)
        return self._args

    @property
    def result(self) -> frozenset[str]:
        if not isinstance(self._result, frozenset):
            self._result = result_tokens(self._result)
        return self._result


class NearRepeat:
    """The same tool with nearly the same arguments and nearly the same result.

    The engine does not call it for mutating, polling or acknowledgement tools (see
    ``_skip`` and ``Monitor._plan``).
    """

    name = "near_repeat"

    def __init__(self) -> None:
        self._tokens: dict[str, frozenset[str]] = {}  # call sig -> arg tokens (bounded cache)

    def new_state(self) -> dict[str, list[Cluster]]:
        return {}

    def new_turn(self, state: dict[str, list[Cluster]], scope: str) -> dict[str, list[Cluster]]:
        return {} if scope == "turn" else state

    def observe(self, state: dict[str, list[Cluster]], ev: Event, lane: Lane, out: Reporter):
        if _skip(ev):
            return
        settings = ev.settings
        assert settings is not None and ev.tool is not None
        clusters = state.get(ev.tool)
        if clusters is None:
            clusters = state[ev.tool] = []
        epoch = lane.epoch
        compare = False  # any cluster of this epoch to compare with?
        for cluster in clusters:
            if cluster.epoch == epoch:
                if ev.sig in cluster.sigs:
                    return  # an exact repeat: the repeat detector's business
                compare = True
        if compare and self._match(clusters, ev, epoch, settings, out):
            return
        clusters.append(Cluster(ev, epoch, settings.volatile))
        if len(clusters) > MAX_CLUSTERS:
            del clusters[0]

    def _match(
        self, clusters: list[Cluster], ev: Event, epoch: int, settings: Any, out: Reporter
    ) -> bool:
        """Join the first cluster of this epoch the call is near to; False when none."""
        args = self._tokens.get(ev.sig)
        if args is None:
            args = arg_tokens(ev.args, settings.volatile)
            if len(self._tokens) >= 4096:
                self._tokens.clear()
            self._tokens[ev.sig] = args
        result: frozenset[str] | None = None
        for cluster in clusters:
            if cluster.epoch != epoch or jaccard(args, cluster.args) < ARGS_SIMILAR:
                continue
            if ev.rdig not in cluster.rdigs:
                if result is None:
                    result = result_tokens(ev.result)
                if jaccard(result, cluster.result) < RESULT_SIMILAR:
                    continue
            cluster.sigs.add(ev.sig)
            cluster.rdigs.add(ev.rdig)
            add_seq(cluster.seqs, ev.seq)
            count = len(cluster.sigs)
            level = settings.thresholds["near_repeat"].level(count)
            if level is not None:

                def message(count: int = count, first: int = cluster.first_seq) -> str:
                    return (
                        f"You have called {ev.tool} {count} times since step {first} "
                        f"with nearly the same arguments (now {short(ev.args)}) and got nearly "
                        "the same result each time. Small variations are not helping. "
                        + advice(ev.tool)
                    )

                out.report(
                    "near_repeat", (ev.tool, cluster.first_seq), level, count, ev.tool,
                    f"{ev.tool}~{cluster.first_seq}", cluster.seqs, message, secondary=True,
                )  # fmt: skip
            return True
        return False


READ_WORDS = ("read", "view", "open", "cat", "get_file")
PATH_KEYS = ("path", "file_path", "filePath", "file", "filename", "absolute_path", "target_file")
RANGE_KEYS = (
    "offset", "limit", "view_range", "start", "end", "line", "start_line", "end_line",
    "lines", "line_number", "page", "range",
)  # fmt: skip


_READ_TOOLS: dict[str, bool] = {}


def read_target(ev: Event) -> tuple[str, tuple[Any, ...]] | None:
    """Return (path, range) when the call reads part of a file, else None."""
    args = ev.args
    if not isinstance(args, dict):
        return None
    name = ev.tool or ""
    reads = _READ_TOOLS.get(name)
    if reads is None:
        reads = any(word in name.lower() for word in READ_WORDS)
        if len(_READ_TOOLS) < 10_000:
            _READ_TOOLS[name] = reads
    if not (reads or args.get("command") == "view"):
        return None
    for key in PATH_KEYS:
        path = args.get(key)
        if isinstance(path, str) and path:
            break
    else:
        return None
    span = tuple(repr(args[key]) for key in RANGE_KEYS if args.get(key) is not None)
    return posixpath.normpath(path.strip()), span


class ReadRange:
    """The same part of a file read again and again, between reads of its other parts."""

    name = "read_range"

    def new_state(self) -> dict[str, Any]:
        return {}  # path -> {"n": reads, "ranges": {range: [count, first, seqs, n_at, epoch]}}

    def new_turn(self, state: dict[str, Any], scope: str) -> dict[str, Any]:
        return {} if scope == "turn" else state

    def observe(self, state: dict[str, Any], ev: Event, lane: Lane, out: Reporter) -> None:
        if _skip(ev):
            return
        target = read_target(ev)
        if target is None:
            return
        path, span = target
        file = state.setdefault(path, {"n": 0, "ranges": {}})
        file["n"] += 1
        entry = file["ranges"].get(span)
        if entry is None or entry[4] != lane.epoch:
            file["ranges"][span] = [1, ev.seq, [ev.seq], file["n"], lane.epoch]
            return
        interleaved = file["n"] - entry[3] > 1  # other ranges were read since
        entry[3] = file["n"]
        if not interleaved:
            return  # back-to-back rereads are the repeat detector's business
        entry[0] += 1
        add_seq(entry[2], ev.seq)
        settings = ev.settings
        assert settings is not None
        level = settings.thresholds["read_range"].level(entry[0])
        if level is not None:
            where = f"range {', '.join(span)}" if span else "the whole file"

            def message() -> str:
                return (
                    f"You have read {where} of {path} {entry[0]} times since step {entry[1]}, "
                    "in between reads of other parts of it. Nothing changed it since: use what "
                    "you read before (note what you need) instead of reading it again."
                )

            out.report(
                "read_range", (path, span, entry[1]), level, entry[0], ev.tool, ev.sig,
                entry[2], message, secondary=True,
            )  # fmt: skip
