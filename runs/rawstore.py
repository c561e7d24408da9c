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
written before the row is inserted: a transaction that rolls back leaves an object no row
names, which the same bytes sent again reuse.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import transaction

ALIAS = "raw_traces"  # the entry of settings.STORAGES used outside the database
STORES = ("database", "filesystem", "s3")


def external() -> bool:
    """Whether raw bytes go to a storage backend rather than into `Trace.raw`."""
    return settings.LOOPBOARD_RAW_STORE != "database"


def key_for(project_id: int, sha256: str, encoding: str) -> str:
    """Return the object name of a project's trace with this content's SHA-256."""
    return f"traces/{project_id}/{sha256[:2]}/{sha256}.{encoding or 'bin'}"


def keep(project_id: int, sha256: str, packed: bytes, encoding: str) -> tuple[bytes, str]:
    """Store packed bytes where the deployment keeps them; return what `Trace.raw` holds
    and `Trace.raw_key` (the object's name, or "" when the bytes stay in the database)."""
    if not external():
        return packed, ""
    key = key_for(project_id, sha256, encoding)
    store = storages[ALIAS]
    if not store.exists(key):  # the same content again (a retry) reuses its object
        key = store.save(key, ContentFile(packed))
    return b"", key


def read(raw: bytes | memoryview, key: str) -> bytes:
    """Return a trace's packed bytes: the object `key` names, else the `Trace.raw` column."""
    if not key:
        return bytes(raw)
    with storages[ALIAS].open(key, "rb") as stored:
        return stored.read()


def forget(keys: Iterable[str]) -> None:
    """Delete these objects once the current transaction commits (their rows are gone or
    emptied by then; a rollback keeps them)."""
    keys = [key for key in keys if key]
    if keys:
        transaction.on_commit(lambda: _delete(keys))


def _delete(keys: list[str]) -> None:
    store = storages[ALIAS]
    for key in keys:
        store.delete(key)
