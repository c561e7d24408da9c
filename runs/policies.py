"""Services: check a policy from the API before it is stored (runs.tuning.save_policy stores)."""

from __future__ import annotations

import detection

INT_LIMIT = 2**31 - 1


def validated(data: dict) -> dict:
    """Return the policy in canonical `{"defaults", "tools"}` shape, or raise ValueError.

    The engine checks keys and types (the message names the bad key); this also refuses what
    the engine accepts but the ToolPolicy rows cannot hold (negative or huge numbers, an empty
    or over-long tool pattern).
    """
    canonical = detection.Policy.from_dict(data).to_dict()
    tables = [("defaults", canonical.get("defaults", {}))]
    for tool, table in canonical.get("tools", {}).items():
        if not tool or len(tool) > 200:
            raise ValueError(f"tools: a tool name or glob must be 1 to 200 characters: {tool!r}")
        tables.append((f'tools."{tool}"', table))
    for where, table in tables:
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not 0 <= value <= INT_LIMIT:
                raise ValueError(f"{where}.{key}: expected a number from 0 to {INT_LIMIT}")
        for name, sub in (table.get("detectors") or {}).items():
            for key, value in sub.items():
                if (
                    isinstance(value, int)
                    and not isinstance(value, bool)
                    and not (0 <= value <= INT_LIMIT)
                ):
                    raise ValueError(f"{where}.detectors.{name}.{key}: out of range")
    return canonical
