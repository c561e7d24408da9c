"""Services: replace a project's detection policy, record the change, re-analyze its runs."""

from __future__ import annotations

import json

from django.db import transaction

import detection

from . import analysis
from .models import PolicyChange, Project, ToolPolicy


def save_policy(project: Project, data: dict, *, user=None) -> PolicyChange:
    """Store a policy in the `loopboard scan --policy` shape as the project's ToolPolicy rows.

    `data` is `{"defaults": {...}, "tools": {"name-or-glob": {...}}}`; it is validated by the
    engine first (ValueError names the bad key). The old rows are replaced, a PolicyChange
    records before/after, and every run of the project is queued for analysis again.
    """
    policy = detection.Policy.from_dict(data)  # validates; raises ValueError
    canonical = policy.to_dict()
    _check_storable(canonical)
    with transaction.atomic():
        before = project.policy_dict()
        project.tool_policies.all().delete()
        rows = [_row(project, "", canonical.get("defaults", {}), user)]
        rows += [_row(project, tool, table, user) for tool, table in canonical.get("tools", {}).items()]
        ToolPolicy.objects.bulk_create(rows)
        after = project.policy_dict()
        change = PolicyChange.objects.create(
            project=project,
            user=user if user is not None and user.is_authenticated else None,
            before=before,
            after=after,
            summary=_summary(before, after),
        )
        change.reanalyzed = analysis.reanalyze(project.runs.all())
        change.save(update_fields=["reanalyzed"])
    return change


def _check_storable(data: dict) -> None:
    """Raise ValueError for what the engine accepts but the rows cannot hold."""
    limit = 2**31 - 1
    tables = [("defaults", data.get("defaults", {}))]
    for tool, table in data.get("tools", {}).items():
        if not tool or len(tool) > 200:
            raise ValueError(f"tools: a tool name or glob must be 1 to 200 characters: {tool!r}")
        tables.append((f'tools."{tool}"', table))
    for where, table in tables:
        for key, value in table.items():
            if key in ("detectors", "volatile", "scope"):
                continue
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, int | float) and not 0 <= value <= limit:
                raise ValueError(f"{where}.{key}: expected a number from 0 to {limit}")


def _row(project: Project, tool: str, table: dict, user) -> ToolPolicy:
    fields = {k: v for k, v in table.items() if k in ToolPolicy.FIELDS}
    if tool:
        fields.pop("scope", None)
    return ToolPolicy(
        project=project,
        tool=tool,
        updated_by=user if user is not None and user.is_authenticated else None,
        **fields,
    )


def _summary(before: dict, after: dict) -> str:
    if before == after:
        return "no change"
    changed = []
    for section in ("defaults", "tools"):
        if before.get(section) != after.get(section):
            changed.append(section)
    return "changed " + " and ".join(changed) + ": " + json.dumps(after, sort_keys=True)[:400]
