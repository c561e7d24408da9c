"""The embedded broker (loopboard/broker.py) under a race: publishers and consumers in processes
of their own on one folder, as the web, `manage.py ingest` and the worker pools use it. Every
message arrives exactly once and nothing reads a half-written one. kombu's own filesystem
transport lost 123 of 5,000 such messages (an empty file read between its create and write),
and its consumer then stopped."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

from kombu import Connection
from kombu.transport import filesystem

from loopboard import broker

PER_PUBLISHER = 1500
PUBLISHERS = 2
CONSUMERS = 2


def options(root: Path) -> dict:
    return {
        "data_folder_in": str(root / "queue"),
        "data_folder_out": str(root / "queue"),
        "processed_folder": str(root / "processed"),
        "polling_interval": 0.001,
    }


def publish(root: Path, first: int) -> None:
    broker.install()
    with Connection("filesystem://", transport_options=options(root)) as connection:
        queue = connection.SimpleQueue("q")
        for n in range(first, first + PER_PUBLISHER):
            queue.put({"n": n, "pad": "x" * (n % 5000)})  # sizes vary: writes take a while


def consume(root: Path, total: int, out) -> None:  # type: ignore[no-untyped-def]
    broker.install()
    got, errors = [], []
    with Connection("filesystem://", transport_options=options(root)) as connection:
        queue = connection.SimpleQueue("q")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                message = queue.get_nowait()  # one message, nothing prefetched
            except queue.Empty:
                if (root / "published").exists() and not os.listdir(root / "queue"):
                    break  # all published, none left
                time.sleep(0.001)
                continue
            except Exception as exc:  # noqa: BLE001 - what the stock transport raised
                errors.append(repr(exc))
                continue
            got.append(message.payload["n"])
            message.ack()
    out.put((got, errors))


def test_racing_publishers_and_consumers_lose_and_double_nothing(tmp_path):
    (tmp_path / "queue").mkdir()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    total = PER_PUBLISHER * PUBLISHERS
    consumers = [
        context.Process(target=consume, args=(tmp_path, total, out)) for _ in range(CONSUMERS)
    ]
    for process in consumers:
        process.start()
    publishers = [
        context.Process(target=publish, args=(tmp_path, n * PER_PUBLISHER))
        for n in range(PUBLISHERS)
    ]
    for process in publishers:
        process.start()
    for process in publishers:
        process.join(60)
        assert process.exitcode == 0
    (tmp_path / "published").touch()
    results = [out.get(timeout=90) for _ in consumers]
    for process in consumers:
        process.join(10)
    got = sorted(n for numbers, _ in results for n in numbers)
    errors = [error for _, failures in results for error in failures]
    assert errors == []
    assert got == list(range(total))  # each message once, none lost
    assert os.listdir(tmp_path / "processed") == []  # nothing claimed and left behind


class Spied:
    """A file being written whose every write first notes what the queue folder holds, which
    is what a worker polling at that moment would find."""

    def __init__(self, handle, folder: Path, seen: list[str]) -> None:
        self.handle, self.folder, self.seen = handle, folder, seen

    def write(self, data: bytes) -> int:
        self.seen.extend(os.listdir(self.folder))
        return self.handle.write(data)

    def fileno(self) -> int:
        return self.handle.fileno()

    def close(self) -> None:
        self.handle.close()

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc) -> None:  # type: ignore[no-untyped-def]
        self.handle.close()


def test_a_message_is_never_in_the_queue_folder_before_it_is_written_whole(tmp_path, monkeypatch):
    queue_folder = tmp_path / "queue"
    queue_folder.mkdir()
    seen: list[str] = []

    def spying_open(path, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        handle = open(path, mode, *args, **kwargs)  # noqa: SIM115 - closed by the caller
        return Spied(handle, queue_folder, seen) if "w" in mode else handle

    for module in (broker, filesystem):  # the name `open` the channel's code looks up
        monkeypatch.setattr(module, "open", spying_open, raising=False)
    broker.install()
    with Connection("filesystem://", transport_options=options(tmp_path)) as connection:
        queue = connection.SimpleQueue("q")
        queue.put({"n": 1})
        assert seen == []  # kombu's own channel had the message's empty file there already
        assert queue.get_nowait().payload == {"n": 1}
