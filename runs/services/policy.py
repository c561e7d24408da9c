"""A project's detection policy: the one validation, loading and saving.

Every path that changes a policy goes through `save_policy`, which validates with `validate`
first: the API, the Tuning page and the admin. A policy that is invalid anyway (a row edited
in the database) never breaks an upload: `engine_policy_or_default` falls back to the built-in
defaults and says why, and `engine_policy` raises `PolicyInvalid` with the reason.

What a draft would change over stored runs is the back-test's (`services.backtest`).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

import detection

from ..models import PolicyChange, Project, Run, ToolPolicy
from . import queue, storage

INT_LIMIT = 2**31 - 1  # what a ToolPolicy integer column holds
TOOL_PATTERN_CHARS = 200
_UNSET = (None, "", [], {})


class PolicyInvalid(ValueError):
    """A stored policy that the engine cannot use; the message says which key and why."""


def validate(data: Any) -> dict:
    """Return the policy in canonical `{"defaults", "tools"}` shape, or raise ValueError.

    The engine checks keys, types and `1 <= warn <= stop` (the message names the bad key);
    this also refuses what the engine accepts but the ToolPolicy rows cannot hold (negative
    or huge numbers, an empty or over-long tool pattern).
    """
    canonical = detection.Policy.from_dict(data).to_dict()
    tables = [("defaults", canonical.get("defaults", {}))]
    for tool, table in canonical.get("tools", {}).items():
        if not tool or len(tool) > TOOL_PATTERN_CHARS:
            raise ValueError(
                f"tools: a tool name or glob must be 1 to {TOOL_PATTERN_CHARS} characters: {tool!r}"
            )
        if _unstorable(tool):
            raise ValueError(
                f"tools: a tool name or glob holds a NUL or a lone surrogate: {tool!r}"
            )
        tables.append((f'tools."{tool}"', table))
    for where, table in tables:
        _check_bounds(where, table)
        _check_text(where, table)
        for name, sub in (table.get("detectors") or {}).items():
            _check_bounds(f"{where}.detectors.{name}", sub)
    return canonical


def _unstorable(text: str) -> bool:
    """Whether PostgreSQL cannot hold this text as it is (a NUL, a lone surrogate)."""
    return storage.clean_text(text) != text


def _check_text(where: str, value: Any) -> None:
    """Raise ValueError naming the first key or string under `where` PostgreSQL cannot hold."""
    if isinstance(value, str) and _unstorable(value):
        raise ValueError(f"{where}: holds a NUL or a lone surrogate: {value!r}")
    if isinstance(value, dict):
        for key, sub in value.items():
            if isinstance(key, str) and _unstorable(key):
                raise ValueError(f"{where}: a key holds a NUL or a lone surrogate: {key!r}")
            _check_text(f"{where}.{key}", sub)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_text(where, item)


def _check_bounds(where: str, table: dict) -> None:
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not 0 <= value <= INT_LIMIT:
            raise ValueError(f"{where}.{key}: expected a number from 0 to {INT_LIMIT}")


def row_dict(row: ToolPolicy) -> dict:
    """Return a policy row's set fields in the policy's TOML shape (unset fields left out)."""
    values = {name: getattr(row, name) for name in ToolPolicy.FIELDS}
    return {k: v for k, v in values.items() if v not in _UNSET}


def current(project: Project) -> dict:
    """Return the project's stored policy: `{"defaults": {...}, "tools": {...}}`."""
    defaults: dict = {}
    tools: dict = {}
    for row in project.tool_policies.all():
        if row.tool:
            tools[row.tool] = row_dict(row)
        else:
            defaults = row_dict(row)
    return {"defaults": defaults, "tools": tools}


def with_row(project: Project, old_tool: str | None, tool: str, values: dict) -> dict:
    """Return the project's policy with one row set (renamed from `old_tool` when given).

    `values` are a row's fields (ToolPolicy.FIELDS); unset ones are left out.
    """
    draft = without_row(project, old_tool) if old_tool is not None else current(project)
    row = {k: v for k, v in values.items() if k in ToolPolicy.FIELDS and v not in _UNSET}
    if tool:
        draft["tools"][tool] = row
    else:
        draft["defaults"] = row
    return draft


def without_row(project: Project, tool: str) -> dict:
    """Return the project's policy without one row (the defaults row when tool is '')."""
    draft = current(project)
    if tool:
        draft["tools"].pop(tool, None)
    else:
        draft["defaults"] = {}
    return draft


def current_version(project: Project) -> int:
    """The project's policy version: the id of its latest PolicyChange (0 before any).

    Findings, labels and back-tests record it; the live guard caches the policy by it.
    """
    return version_query(project).first() or 0


def version_query(project: Project) -> QuerySet:
    """The query of `current_version` (one id, or none), to embed in another as a Subquery."""
    latest = PolicyChange.objects.filter(project=project).order_by("-id")
    return latest.values_list("id", flat=True)[:1]


def engine_policy(project: Project) -> detection.Policy:
    """Return the project's policy for the engine, or raise PolicyInvalid saying why."""
    try:
        return detection.Policy.from_dict(current(project))
    except ValueError as exc:
        raise PolicyInvalid(
            f"the policy of project {project.slug!r} is invalid: {exc}; fix it on the Tuning page"
        ) from None


def engine_policy_or_default(project: Project) -> tuple[detection.Policy, str]:
    """Return the project's policy and '', or the built-in defaults and why they are used."""
    try:
        return engine_policy(project), ""
    except PolicyInvalid as exc:
        return detection.Policy(), f"{exc}; the built-in defaults were used"


def project_tools(project: Project) -> list[str]:
    """Return the distinct tool names seen in the project's runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT unnest(tools) FROM runs_run WHERE project_id = %s", [project.pk]
        )
        return [row[0] for row in cursor.fetchall()]


def affected_runs(project: Project, before: dict, after: dict) -> QuerySet[Run]:
    """Return the runs a policy change can alter: all when defaults change, else by tool."""
    runs = Run.objects.filter(project=project)
    patterns = changed_patterns(before, after)
    if patterns is None:
        return runs
    if not patterns:
        return runs.none()
    tools = [t for t in project_tools(project) if any(fnmatchcase(t, p) for p in patterns)]
    return runs.filter(tools__overlap=tools) if tools else runs.none()


def changed_patterns(before: dict, after: dict) -> set[str] | None:
    """Return the tool rows (names or globs) a policy change touches; None when the defaults
    change, which can alter every run. A run none of whose tools match one is unaltered."""
    if before.get("defaults") != after.get("defaults"):
        return None
    old, new = before.get("tools", {}), after.get("tools", {})
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}


def describe(before: dict, after: dict) -> str:
    """Return a one-line-per-change summary of a policy change, in words a person reads
    ("defaults.warn: 3 → 4", "added tool row b: warn 7, stop 9")."""
    lines = []
    for key in sorted(before.get("defaults", {}).keys() | after.get("defaults", {}).keys()):
        a, b = before.get("defaults", {}).get(key), after.get("defaults", {}).get(key)
        if a != b:
            lines.append(f"defaults.{key}: {_value_text(a)} → {_value_text(b)}")
    old, new = before.get("tools", {}), after.get("tools", {})
    for tool in sorted(old.keys() | new.keys()):
        if tool not in new:
            lines.append(f"removed tool row {tool}")
        elif tool not in old:
            lines.append(f"added tool row {tool}: {_row_text(new[tool])}")
        elif old[tool] != new[tool]:
            lines.append(f"{tool}: {_row_text(old[tool])} → {_row_text(new[tool])}")
    return "\n".join(lines)


def _value_text(value: Any) -> str:
    """One setting's value as the Tuning page shows it: unset, yes/no, a list, a number."""
    if value is None or value == "" or value == [] or value == {}:
        return "unset"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    if isinstance(value, dict):
        return "; ".join(f"{key} {_value_text(sub)}" for key, sub in value.items())
    return str(value)


def _row_text(values: dict) -> str:
    """A tool row's settings in the form's order, e.g. "warn 7, stop 9, polling yes"."""
    order = ["warn", "stop", "max_repeats", "quota", "polling", "mutating"]
    keys = [k for k in order if k in values] + sorted(k for k in values if k not in order)
    shown = [f"{key.replace('_', ' ')} {_value_text(values[key])}" for key in keys]
    return ", ".join(shown) or "no settings"


def save_policy(project: Project, policy: dict, user) -> PolicyChange:
    """Replace the project's policy rows, record who changed what, re-analyze affected runs.

    Raises ValueError (from `validate`) when the policy is invalid; nothing is written then.
    """
    validate(policy)
    before = current(project)
    with transaction.atomic():
        rows = {"": policy.get("defaults", {})} | policy.get("tools", {})
        ToolPolicy.objects.filter(project=project).exclude(tool__in=list(rows)).delete()
        for tool, values in rows.items():
            fields = {name: values.get(name) for name in ToolPolicy.FIELDS}
            fields["volatile"] = fields["volatile"] or []
            fields["detectors"] = fields["detectors"] or {}
            fields["scope"] = fields["scope"] or ""
            ToolPolicy.objects.update_or_create(
                project=project, tool=tool, defaults=fields | {"updated_by": user}
            )
        after = current(project)
        run_ids = list(affected_runs(project, before, after).values_list("pk", flat=True))
        queue.queue_analysis(run_ids, bulk=True)
        return PolicyChange.objects.create(
            project=project,
            user=user,
            before=before,
            after=after,
            summary=describe(before, after),
            reanalyzed=len(run_ids),
        )
