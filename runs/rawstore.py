"""Where a trace's raw bytes are kept: in PostgreSQL, a folder, or an S3-compatible store.

`LOOPBOARD_RAW_STORE` chooses (see the README's "Retention and storage"):
- `database` (the default): `Trace.raw` holds the bytes, compressed (`models.pack_raw`), so
  one PostgreSQL backup holds everything and deleting a trace deletes its bytes in the same
  transaction;
- `filesystem`: files under `LOOPBOARD_RAW_DIR`;
- `s3`: an S3-compatible bucket through django-storages (`LOOPBOARD_S3_*`, or the `AWS_*`
  variables boto3 reads).

Outside the database the bytes are stored as `pack_raw` packs them, under a key named after
the project and the content's SHA-256, and `Trace.raw_key` names the object (`Trace.raw` is
then empty). A project holds one trace per content, so one object belongs to one trace row: it
is deleted when that row is deleted or retention empties it, once that commits. The object is
written before the row is inserted, every time (the same bytes again write it again, so its
time is always that of the latest upload): a transaction that rolls back, or a process that
dies between a commit and the deletion after it, leaves an object no row names. The daily
sweep (`retention.sweep_raw_store`) deletes those. An upload writes its object inside its
transaction, holding SWEEP_LOCK shared until it commits; the sweep holds it exclusively while
it checks and deletes a chunk, so it never deletes an object a commit is about to name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import storages
from django.db import connection, transaction

ALIAS = "raw_traces"  # the entry of settings.STORAGES used outside the database
SWEEP_LOCK = 0x6C62_7377  # pg advisory lock id ("lbsw"): uploads share it, the sweep takes it


def external() -> bool:
    """Whether raw bytes go to a storage backend rather than into `Trace.raw`."""
    return settings.LOOPBOARD_RAW_STORE != "database"


def key_for(project_id: int, sha256: str, encoding: str) -> str:
    """Return the object name of a project's trace with this content's SHA-256."""
    return f"traces/{project_id}/{sha256[:2]}/{sha256}.{encoding or 'bin'}"


def keep(
    project_id: int, sha256: str, packed: bytes | IO[bytes], encoding: str
) -> tuple[bytes | IO[bytes], str]:
    """Store packed bytes (or a file of them, read from its start) where the deployment keeps
    them; return what `Trace.raw` holds and `Trace.raw_key` (the object's name, or "" when
    the bytes stay in the database). Called inside the transaction that inserts the trace
    row."""
    if not external():
        return packed, ""
    if not connection.in_atomic_block:
        raise RuntimeError("rawstore.keep runs inside the transaction that inserts the trace")
    with connection.cursor() as cursor:  # held until that transaction ends (see the top)
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [SWEEP_LOCK])
    # Written even when it exists (the store overwrites: `file_overwrite` / `allow_overwrite`),
    # so an object a row is about to name is never one the sweep finds old and unnamed.
    content = ContentFile(packed) if isinstance(packed, bytes) else File(packed)
    key = storages[ALIAS].save(key_for(project_id, sha256, encoding), content)
    return b"", key


def read(raw: bytes | memoryview, key: str) -> bytes:
    """Return a trace's packed bytes: the object `key` names, else the `Trace.raw` column."""
    if not key:
        return bytes(raw)
    with storages[ALIAS].open(key, "rb") as stored:
        return stored.read()


def reader(key: str) -> IO[bytes]:
    """Open the object `key` names for reading, a chunk at a time."""
    return storages[ALIAS].open(key, "rb")


def forget(keys: Iterable[str]) -> None:
    """Delete these objects once the current transaction commits (their rows are gone or
    emptied by then; a rollback keeps them)."""
    keys = [key for key in keys if key]
    if keys:
        transaction.on_commit(lambda: _delete(keys))


def stored_keys() -> Iterator[list[str]]:
    """Yield the names of the objects under `traces/`, a folder (project/prefix) at a time."""
    store = storages[ALIAS]
    try:
        projects, _ = store.listdir("traces")
    except FileNotFoundError:  # a folder store nothing was written to yet
        return
    for project in projects:
        prefixes, _ = store.listdir(f"traces/{project}")
        for prefix in prefixes:
            _, files = store.listdir(f"traces/{project}/{prefix}")
            if files:
                yield [f"traces/{project}/{prefix}/{name}" for name in files]


def modified(key: str) -> datetime:
    """When the object was last written (aware, UTC)."""
    return storages[ALIAS].get_modified_time(key)


def delete_now(keys: Iterable[str]) -> None:
    """Delete these objects at once (the sweep's: no row names them)."""
    _delete([key for key in keys if key])


def _delete(keys: list[str]) -> None:
    store = storages[ALIAS]
    for key in keys:
        store.delete(key)
