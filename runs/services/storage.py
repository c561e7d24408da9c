"""How a step is stored: rows <-> the engine's values, COPY, and jsonb's own order of keys.

Ingest writes steps with one COPY (`step_values`, `copy_rows`), a live append the same rows
with one INSERT (`INSERT_STEPS_SQL`); analysis, the live check and the back-test read them
back (`iter_steps`). Both sides go through this module, so a step
the engine analyzes from memory right after ingest equals the one it reads back later.
Text that reaches PostgreSQL goes through `clean_text` (PostgreSQL text holds no NUL).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

import orjson
from django.db import connection

import detection
from detection import keys

from ..models import Step

# The step columns that make up the engine's view of a step, in order: `iter_steps` reads
# them back, `step_values` writes them (with the run id first and the call signature last).
STEP_FIELDS = (
    "seq",
    "kind",
    "source_id",
    "parent_id",
    "tool",
    "args",
    "result",
    "status",
    "batch_id",
    "text",
    "started_at",
    "ended_at",
    "tokens_in",
    "tokens_out",
    "cost",
    "lane",
)
STEP_COLUMNS = ("run_id", *STEP_FIELDS, "call_sig")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def engine_step(
    seq, kind, source_id, parent_id, tool, args, result, status, batch_id, text,
    started_at, ended_at, tokens_in, tokens_out, cost, lane="",
) -> detection.Step:  # fmt: skip
    """Return the engine's step for one row's STEP_FIELDS values (blank text means absent)."""
    return detection.Step(
        seq=seq,
        kind=kind,
        id=source_id or None,
        parent_id=parent_id or None,
        tool=tool or None,
        args=args,
        result=result,
        status=status,
        batch_id=batch_id or None,
        text=text or None,
        started_at=started_at.timestamp() if started_at else None,
        ended_at=ended_at.timestamp() if ended_at else None,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost=cost,
        lane=lane or None,
    )


def iter_steps(run_id: int) -> Iterator[detection.Step]:
    """Yield a stored run's steps as the engine's steps, in order, without model instances."""
    rows = (
        Step.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list(*STEP_FIELDS)
        .iterator(chunk_size=1000)
    )
    for row in rows:
        yield engine_step(*row)


def step_values(
    run_id: int | None, step: detection.Step, policy: detection.Policy
) -> tuple[tuple, detection.Step]:
    """Return the column values (STEP_COLUMNS, JSON columns as JSON text) of one step, and the
    engine's step as it reads those values back from the database (`iter_steps`)."""
    call_sig = ""
    if step.kind == "tool_call" and step.tool:
        volatile = policy.for_tool(step.tool).volatile  # the same signature the engine uses
        call_sig = clean_text(keys.call_signature(step.tool, step.args, volatile=volatile)[:80])
    source_id = clean_text((step.id or "")[:255])
    parent_id = clean_text((step.parent_id or "")[:255])
    tool = clean_text((step.tool or "")[:200])
    args = as_stored(step.args)
    result = as_stored(step.result)
    status = step.status if step.status in ("ok", "error", "invalid") else "ok"
    batch_id = clean_text((step.batch_id or "")[:255])
    text = clean_text(step.text or "")
    started_at, ended_at = timestamp(step.started_at), timestamp(step.ended_at)
    tokens_in, tokens_out = int_or_none(step.tokens_in), int_or_none(step.tokens_out)
    cost = float_or_none(step.cost)
    lane = clean_text(str(step.lane)[:255]) if step.lane is not None else ""
    values = (run_id, step.seq, step.kind, source_id, parent_id, tool, json_text(args),
              json_text(result), status, batch_id, text, started_at, ended_at, tokens_in,
              tokens_out, cost, lane, call_sig)  # fmt: skip
    read_back = engine_step(step.seq, step.kind, source_id, parent_id, tool, args, result, status,
                            batch_id, text, started_at, ended_at, tokens_in, tokens_out, cost,
                            lane)  # fmt: skip
    return values, read_back


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[tuple]) -> None:
    """Insert rows with one COPY on the default connection (inside the caller's transaction)."""
    rows = iter(rows)
    first = next(rows, None)
    if first is None:
        return
    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        copy.write_row(first)
        for row in rows:
            copy.write_row(row)


# The same rows as one INSERT of unnest()ed arrays, for a statement that does more than insert
# (the live append's CTE also updates its run): `step_arrays` gives its parameters, named after
# the columns, and the caller gives `run`. jsonb columns travel as text and are cast on the way in.
_ARRAY_TYPES = {
    "seq": "int", "started_at": "timestamptz", "ended_at": "timestamptz", "tokens_in": "int",
    "tokens_out": "int", "cost": "float8",
}  # fmt: skip
_UNNESTED = STEP_COLUMNS[1:]
_SELECTED = ", ".join(f"u.{c}::jsonb" if c in ("args", "result") else f"u.{c}" for c in _UNNESTED)
_ARRAYS = ", ".join(f"%({c})s::{_ARRAY_TYPES.get(c, 'text')}[]" for c in _UNNESTED)
INSERT_STEPS_SQL = f"""INSERT INTO {Step._meta.db_table} ({", ".join(STEP_COLUMNS)})
    SELECT %(run)s, {_SELECTED} FROM unnest({_ARRAYS}) AS u({", ".join(_UNNESTED)})"""


def step_arrays(rows: Sequence[tuple]) -> dict[str, list]:
    """Return INSERT_STEPS_SQL's parameters for `step_values` rows: each column's values."""
    columns = list(zip(*rows, strict=True))
    return {name: list(columns[i + 1]) for i, name in enumerate(_UNNESTED)}


def json_text(value) -> str | None:
    """Return JSON text for a jsonb column; None (SQL NULL, as Django stores it) for None."""
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # ints over 64 bits, odd types: the standard library's way
        return json.dumps(value, default=str)


def clean_text(text: str) -> str:
    """Return text that PostgreSQL can hold: NUL characters and lone surrogates (which
    UTF-8 cannot encode) replaced by U+FFFD."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    return _UNSAFE.sub("\ufffd", text)


def as_stored(value):
    """Return value as a jsonb column gives it back: NUL characters replaced (jsonb refuses
    \\u0000), non-finite floats as text, object keys in jsonb's order (shorter first)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        items = [(clean_text(str(k)), as_stored(v)) for k, v in value.items()]
        if len(items) > 1:
            items.sort(key=lambda item: _jsonb_key(item[0]))
        return dict(items)
    if isinstance(value, list | tuple):
        return [as_stored(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw), raw


def timestamp(epoch: float | None) -> datetime | None:
    """Return an aware datetime for epoch seconds, or None when absent or out of range."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def int_or_none(value) -> int | None:
    """Return value as an int clamped to an integer column, or None."""
    if value is None:
        return None
    try:
        return max(INT_MIN, min(int(value), INT_MAX))
    except (TypeError, ValueError, OverflowError):
        return None


def float_or_none(value) -> float | None:
    """Return value as a finite float, or None."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number == number and abs(number) != float("inf") else None
