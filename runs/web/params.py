"""Reading a page's query parameters."""

from __future__ import annotations


def int_param(value: str | None, default: int | None = 0) -> int | None:
    """Return a non-negative whole number parameter, or `default` when it is absent or not one."""
    return int(value) if value and value.isdigit() else default
