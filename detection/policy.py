"""Thresholds and per-tool settings: what counts as a loop for this project.

A policy is a TOML document (or the same shape as a dict)::

    [defaults]
    scope = "turn"        # "turn": successful repeats count per user turn; "run": whole run
    warn = 3              # repeat: warn at this many calls that brought nothing new
    stop = 5              # repeat: stop at this many
    volatile = []         # extra keys to drop before hashing (on top of keys.DEFAULT_VOLATILE)
    max_steps = 0         # budgets; 0 or absent = off
    max_tokens = 0
    max_cost = 0.0
    [defaults.detectors.oscillation]   # any detector: warn, stop, enabled
    warn = 3
    [tools."mcp__*__bash"]   # exact name or fnmatch glob
    mutating = true
    polling = false
    warn = 4              # this tool's repeat thresholds
    stop = 6
    max_repeats = 2       # at most 2 repeats of one call, whatever the results
    quota = 50            # at most 50 calls of this tool per run
    volatile = ["cursor"]
    [tools."mcp__*__bash".detectors.near_repeat]
    enabled = false

Matching: an exact tool name beats any glob; among globs the most specific (most literal
characters) wins. Only the winning row applies; what it leaves unset comes from
``[defaults]`` and the built-in defaults.

Built-in mutating tools (each attempt changes the world, so failures count from 2 and a
new successful call re-arms checks after it), matched case-insensitively:
edit/write/patch/replace/insert tools (``Edit``, ``MultiEdit``, ``Write``, ``NotebookEdit``,
``str_replace*``, ``apply_patch``, ``edit_file``, ``write_file``, ``create_file``...),
shells (``bash``, ``Bash``, ``*__bash``, ``shell``, ``run``, ``execute_command``, ``terminal``...)
and deletes/moves (``delete*``, ``remove*``, ``rm``, ``mv``, ``move*``). Interpreters
(``run_ipython``, ``ipython``, ``python``) are *not* mutating by default: agents use them
as much to read as to write (OpenHands' ``open_file`` and ``search_dir`` run through
``run_ipython``), so they get the ordinary repeat thresholds; a project that uses one to
change things declares it (``[tools.run_ipython] mutating = true``). No tool is ``polling``
by default: a status poll that returns the same answer again and again *is* a loop unless the
project says the tool is a poll.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import catalogue
from .keys import DEFAULT_VOLATILE

__all__ = [
    "DETECTOR_DEFAULTS",
    "MUTATING_PATTERNS",
    "Policy",
    "Threshold",
    "ToolRule",
    "ToolSettings",
]

#: Built-in (warn, stop) per detector; None = that severity is never reached.
DETECTOR_DEFAULTS = catalogue.DEFAULTS

MUTATING_PATTERNS: tuple[str, ...] = (
    "edit", "*_edit", "edit_*", "*edit", "*__edit*",
    "write", "*_write", "write_*", "*write", "*__write*",
    "str_replace*", "*apply_patch*", "patch", "*_patch", "insert", "*_insert",
    "create_file", "*__create*", "replace", "*_replace*",
    "bash", "*__bash", "*_bash", "shell", "*_shell", "shell_*", "*__shell*",
    "run", "run_command", "run_shell*", "execute_command", "exec", "exec_command",
    "terminal", "*__terminal*",
    "delete*", "*_delete*", "*__delete*", "remove*", "*_remove*", "rm", "mv", "move*",
    "rename*", "mkdir",
)  # fmt: skip

_DEFAULT_KEYS = {
    "scope": str,
    "warn": int,
    "stop": int,
    "volatile": list,
    "max_steps": int,
    "max_tokens": int,
    "max_cost": (int, float),
    "detectors": dict,
}
_TOOL_KEYS = {
    "mutating": bool,
    "polling": bool,
    "warn": int,
    "stop": int,
    "max_repeats": int,
    "quota": int,
    "volatile": list,
    "detectors": dict,
}
_DETECTOR_KEYS = {"warn": int, "stop": int, "enabled": bool}


@lru_cache(maxsize=4096)
def builtin_mutating(tool: str) -> bool:
    """Return whether a tool name matches the built-in mutating patterns."""
    name = tool.lower()
    return any(fnmatchcase(name, pattern) for pattern in MUTATING_PATTERNS)


def _check(table: Any, allowed: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table, got {type(table).__name__}")
    for key, value in table.items():
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")
        kind = allowed[key]
        bad_bool = isinstance(value, bool) and kind is not bool
        if bad_bool or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "number"
            raise ValueError(f"{where}.{key}: expected {names}, got {value!r}")
        if kind is int and value < 0 or key == "max_cost" and value < 0:
            raise ValueError(f"{where}.{key}: must not be negative, got {value!r}")
        if key == "volatile" and not all(isinstance(item, str) for item in value):
            raise ValueError(f"{where}.volatile: expected a list of strings")
    return table


def _detectors(table: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name, sub in table.items():
        if name not in DETECTOR_DEFAULTS:
            known = ", ".join(DETECTOR_DEFAULTS)
            raise ValueError(f"{where}.detectors: unknown detector {name!r} (known: {known})")
        out[name] = dict(_check(sub, _DETECTOR_KEYS, f"{where}.detectors.{name}"))
    return out


@dataclass(frozen=True, slots=True)
class ToolRule:
    """One ``[tools."pattern"]`` row; None = not set by this row."""

    pattern: str
    mutating: bool | None = None
    polling: bool | None = None
    warn: int | None = None
    stop: int | None = None
    max_repeats: int | None = None
    quota: int | None = None
    volatile: tuple[str, ...] = ()
    detectors: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f'tools."{self.pattern}"'

    @property
    def is_glob(self) -> bool:
        return any(char in self.pattern for char in "*?[")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("mutating", "polling", "warn", "stop", "max_repeats", "quota"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        if self.volatile:
            out["volatile"] = list(self.volatile)
        if self.detectors:
            out["detectors"] = {name: dict(sub) for name, sub in self.detectors.items()}
        return out


class Threshold:
    """A detector's thresholds for one tool, and the policy row that set each.

    Read-only by convention. ``level()`` runs on every repeated call, so the answers it can
    give are built once here (a plain class: mypyc compiles its constructor and methods).
    """

    __slots__ = ("_info", "_stop", "_warn", "enabled", "info", "stop", "stop_rule", "warn", "warn_rule")  # fmt: skip

    def __init__(
        self,
        warn: int | None,
        stop: int | None,
        enabled: bool = True,
        warn_rule: str = "defaults",
        stop_rule: str = "defaults",
        info: int | None = None,
    ) -> None:
        self.warn = warn
        self.stop = stop
        self.enabled = enabled
        self.warn_rule = warn_rule
        self.stop_rule = stop_rule
        self.info = info
        self._stop = ("stop", stop, stop_rule) if stop is not None else None
        self._warn = ("warn", warn, warn_rule) if warn is not None else None
        self._info = ("info", info, warn_rule) if info is not None else None

    def level(self, count: int) -> tuple[str, int, str] | None:
        """Return (severity, threshold, rule) reached by ``count``, or None below warn."""
        if self.stop is not None and count >= self.stop:
            return self._stop
        if self.warn is not None and count >= self.warn:
            return self._warn
        if self.info is not None and count >= self.info:
            return self._info
        return None

    def _fields(self) -> tuple[Any, ...]:
        return (self.warn, self.stop, self.enabled, self.warn_rule, self.stop_rule, self.info)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Threshold):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Threshold(warn={self.warn!r}, stop={self.stop!r}, enabled={self.enabled!r}, "
            f"warn_rule={self.warn_rule!r}, stop_rule={self.stop_rule!r}, info={self.info!r})"
        )


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """Everything the detectors need to know about one tool, resolved from the policy."""

    tool: str
    rule: str  # the row that matched the tool ("defaults" when none did)
    mutating: bool
    mutating_rule: str
    polling: bool
    max_repeats: int | None
    quota: int | None
    volatile: frozenset[str]
    thresholds: dict[str, Threshold]

    def threshold(self, detector: str) -> Threshold:
        return self.thresholds[detector]


@dataclass(frozen=True, slots=True)
class Policy:
    """A project's detection settings (see the module docstring for the TOML shape)."""

    scope: str = "turn"
    warn: int = 3
    stop: int = 5
    volatile: tuple[str, ...] = ()
    max_steps: int = 0
    max_tokens: int = 0
    max_cost: float = 0.0
    detectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: tuple[ToolRule, ...] = ()
    _cache: dict[str, ToolSettings] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.scope not in ("turn", "run"):
            raise ValueError(f"defaults.scope: expected 'turn' or 'run', got {self.scope!r}")
        if self.warn < 1 or self.stop < self.warn:
            raise ValueError(f"defaults: need 1 <= warn <= stop, got {self.warn}, {self.stop}")

    # -- building -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Policy:
        """Return a policy from ``{"defaults": {...}, "tools": {pattern: {...}}}``."""
        data = data or {}
        if not isinstance(data, dict):
            raise ValueError("policy: expected a table with 'defaults' and/or 'tools'")
        for key in data:
            if key not in ("defaults", "tools"):
                raise ValueError(f"policy: unknown key {key!r} (allowed: defaults, tools)")
        defaults = dict(_check(data.get("defaults", {}), _DEFAULT_KEYS, "defaults"))
        detectors = _detectors(defaults.pop("detectors", {}), "defaults")
        rules = []
        tools = data.get("tools", {})
        if not isinstance(tools, dict):
            raise ValueError("tools: expected a table of tool patterns")
        for pattern, table in tools.items():
            where = f'tools."{pattern}"'
            row = dict(_check(table, _TOOL_KEYS, where))
            row["detectors"] = _detectors(row.get("detectors", {}), where)
            row["volatile"] = tuple(row.get("volatile", ()))
            rules.append(ToolRule(pattern=pattern, **row))
        defaults["volatile"] = tuple(defaults.get("volatile", ()))
        if "max_cost" in defaults:
            defaults["max_cost"] = float(defaults["max_cost"])
        return cls(detectors=detectors, tools=tuple(rules), **defaults)

    @classmethod
    def from_toml(cls, text: str) -> Policy:
        """Return a policy from TOML text; ValueError names the bad key."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"policy: invalid TOML: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Return the policy stored in a TOML file."""
        return cls.from_toml(Path(path).read_text(encoding="utf-8"))

    def to_dict(self) -> dict[str, Any]:
        """Return the dict shape ``from_dict`` reads (round-trips)."""
        defaults: dict[str, Any] = {"scope": self.scope, "warn": self.warn, "stop": self.stop}
        defaults["volatile"] = list(self.volatile)
        for key in ("max_steps", "max_tokens", "max_cost"):
            if getattr(self, key):
                defaults[key] = getattr(self, key)
        if self.detectors:
            defaults["detectors"] = {name: dict(sub) for name, sub in self.detectors.items()}
        out: dict[str, Any] = {"defaults": defaults}
        if self.tools:
            out["tools"] = {rule.pattern: rule.to_dict() for rule in self.tools}
        return out

    # -- resolving ----------------------------------------------------------------------
    def rule_for(self, tool: str) -> ToolRule | None:
        """Return the row that applies to a tool: exact name, else the most specific glob."""
        best: tuple[int, int] | None = None
        winner = None
        for index, rule in enumerate(self.tools):
            if rule.pattern == tool and not rule.is_glob:
                return rule
            if rule.is_glob and fnmatchcase(tool, rule.pattern):
                literal = sum(1 for char in rule.pattern if char not in "*?[]")
                rank = (literal, -index)
                if best is None or rank > best:
                    best, winner = rank, rule
        return winner

    def for_tool(self, tool: str) -> ToolSettings:
        """Return the resolved settings for a tool, with the rule names that set them."""
        cached = self._cache.get(tool)
        if cached is not None:
            return cached
        rule = self.rule_for(tool)
        if rule is not None and rule.mutating is not None:
            mutating, mutating_rule = rule.mutating, rule.name
        else:
            mutating, mutating_rule = builtin_mutating(tool), "builtin mutating patterns"
        volatile = DEFAULT_VOLATILE | frozenset(self.volatile)
        if rule is not None:
            volatile |= frozenset(rule.volatile)
        thresholds = {name: self._threshold(name, rule) for name in DETECTOR_DEFAULTS}
        settings = ToolSettings(
            tool=tool,
            rule=rule.name if rule else "defaults",
            mutating=mutating,
            mutating_rule=mutating_rule,
            polling=bool(rule and rule.polling),
            max_repeats=rule.max_repeats if rule else None,
            quota=rule.quota if rule else None,
            volatile=volatile,
            thresholds=thresholds,
        )
        if len(self._cache) < 10_000:
            self._cache[tool] = settings
        return settings

    def threshold(self, detector: str) -> Threshold:
        """Return a detector's thresholds when no tool is involved (messages, batches)."""
        return self._threshold(detector, None)

    def _threshold(self, name: str, rule: ToolRule | None) -> Threshold:
        warn, stop = DETECTOR_DEFAULTS[name]
        warn_rule = stop_rule = "defaults"
        if name == "repeat":
            warn, stop = self.warn, self.stop
        enabled = True
        layers: list[tuple[str, dict[str, Any]]] = []
        if name in self.detectors:
            layers.append((f"defaults.detectors.{name}", self.detectors[name]))
        if rule is not None:
            if name == "repeat":
                layers.append((rule.name, {"warn": rule.warn, "stop": rule.stop}))
            if name in rule.detectors:
                layers.append((f"{rule.name}.detectors.{name}", rule.detectors[name]))
        for where, sub in layers:
            if sub.get("warn") is not None:
                warn, warn_rule = sub["warn"], where
            if sub.get("stop") is not None:
                stop, stop_rule = sub["stop"], where
            if sub.get("enabled") is not None:
                enabled = sub["enabled"]
        if warn is not None and stop is not None and stop < warn:
            stop = warn
        return Threshold(
            warn, stop, enabled, warn_rule, stop_rule, catalogue.INFO_DEFAULTS.get(name)
        )
