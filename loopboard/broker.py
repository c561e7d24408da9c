"""The embedded broker: kombu's filesystem transport, made safe for several processes.

kombu's filesystem channel (5.x) creates a message's file in the queue folder and only then
writes it. A worker polling the folder in between takes the empty file, fails to decode it,
and stops consuming: the message is lost and so is the worker (seen here: 123 of 5,000
messages lost with two publishers and one consumer; on `make run`, an upload of 10,000 runs
that was never analyzed). Its reader also moved a message it claimed to the system's
temporary folder, a copy across filesystems that two readers can both make.

Here a message is written whole under a draft name in the processed folder and renamed into
the queue folder, so a reader sees all of it or nothing; a reader claims one by renaming it
into the processed folder, which only one reader can do, then reads and deletes it. Both
folders must be on one filesystem (`embedded.broker_transport_options` keeps them side by
side under var/broker). Installed as the transport of `filesystem://` URLs by `install()`,
which loopboard/celery.py calls, so the web and the workers use it alike.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from functools import cached_property
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

DRAFT = ".part"  # a message being written; never matches a queue's `<queue>.msg` suffix


class Channel(filesystem.Channel):
    """Put and get that never expose or take a half-written message."""

    def _put(self, queue, payload, **kwargs):  # type: ignore[no-untyped-def]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"  # kombu's order
        draft = os.path.join(self._drafts, name + DRAFT)
        try:
            with open(draft, "wb") as out:
                out.write(str_to_bytes(dumps(payload)))
            os.replace(draft, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(draft)
            raise ChannelError(f"cannot add message {name!r} to {self.data_folder_out}") from exc

    @cached_property
    def _drafts(self) -> str:
        """Where messages are written before they are renamed into the queue folder."""
        os.makedirs(self.processed_folder, exist_ok=True)
        return self.processed_folder

    def _get(self, queue):  # type: ignore[no-untyped-def]
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(self.processed_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except FileNotFoundError:  # another reader claimed it first
                continue
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise ChannelError(
                        f"the broker's processed folder {self.processed_folder} must be on the "
                        f"same filesystem as its queue folder {self.data_folder_in}"
                    ) from exc
                raise
            try:
                with open(claimed, "rb") as message:
                    payload = message.read()
                if not self.store_processed:
                    os.remove(claimed)
            except OSError as exc:
                raise ChannelError(f"cannot read message {claimed!r}") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel


def install() -> None:
    """Make `filesystem://` broker URLs use this transport in this process."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
