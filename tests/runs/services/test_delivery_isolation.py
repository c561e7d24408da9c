"""A slow receiver can only delay its own deliveries: deliveries have their own queue and
pool, and one receiver (a host and port) holds at most LOOPBOARD_DELIVERIES_PER_RECEIVER of
the pool's processes at once; its other deliveries are put off, no attempt spent. Against
a real local receiver that trickles its answer a byte at a time, and a real worker."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection

from runs.models import Delivery
from runs.services import channels, delivery, queue
from tests.runs.services.test_worker import ROOT, stop_worker, worker_env


class Trickler:
    """A server that reads a request, then answers one byte every `every` seconds, for ever;
    it counts the connections open at once."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.open = 0
        self.most = 0
        self.seen = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.closed = False
        threading.Thread(target=self.serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def serve(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.trickle, args=(client,), daemon=True).start()

    def trickle(self, client: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.seen += 1
            self.most = max(self.most, self.open)
        try:
            client.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 1000:
                client.sendall(bytes([byte]))
                # wait between bytes, but see at once a client that hung up (it reads as
                # b""): a connection counts as open only while its client holds it
                readable, _, _ = select.select([client], [], [], self.every)
                if readable and not client.recv(65536):
                    break
        except OSError:
            pass
        finally:
            client.close()
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def hook(project, url: str, name: str):
    return channels.create_channel(
        project, channels.ChannelData(name=name, kind="webhook", url=url)
    )[0]


def send(channel) -> int:
    alert = delivery.test_alert(channel)
    queue.queue_delivery(alert.pk, [channel.pk])
    return alert.pk


@pytest.mark.django_db
def test_channels_at_one_host_and_port_share_its_slots(project, settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    one = hook(project, "http://127.0.0.1:9/a", "a")
    two = hook(project, "http://127.0.0.1:9/b", "b")
    other = hook(project, "http://127.0.0.1:10/a", "c")
    assert delivery.receiver_of(one) == delivery.receiver_of(two) == "127.0.0.1:9"
    assert delivery.receiver_of(other) == "127.0.0.1:10"


@pytest.mark.django_db(transaction=True)
def test_a_busy_receiver_puts_a_delivery_off_without_spending_an_attempt(project, settings):
    """While another worker's session holds the receiver's one slot, `deliver` sends
    nothing, logs nothing, and asks to be tried again in a few seconds."""
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    channel = hook(project, "http://127.0.0.1:9/hook", "slow")
    alert = delivery.test_alert(channel)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with delivery.receiver_slot(channel) as free:
                assert free
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(30)
        retry_in = delivery.deliver(alert.pk, channel.pk)
        assert (
            retry_in is not None and delivery.BUSY_SECONDS <= retry_in <= 2 * delivery.BUSY_SECONDS
        )
        assert not Delivery.objects.exists()
    finally:
        release.set()
        holder.join(30)
    with delivery.receiver_slot(channel) as free:
        assert free  # let go when the attempt ended


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_delays_only_its_own_deliveries(project, other_project, settings):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    slow = Trickler()
    fast = socket.create_server(("127.0.0.1", 0))  # a receiver that answers at once
    fast_port = fast.getsockname()[1]
    answered: list[float] = []

    def answer() -> None:
        while True:
            try:
                client, _ = fast.accept()
            except OSError:
                return
            client.recv(65536)
            client.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            client.close()
            answered.append(time.monotonic())

    threading.Thread(target=answer, daemon=True).start()
    log = open(ROOT / "var" / "test-worker-delivery.log", "wb")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "loopboard.celery", "worker", "--queues",
         "delivery", "--hostname", "delivery@test", "--concurrency", "2", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env=worker_env(LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS="true", LOOPBOARD_ALERT_TIMEOUT_SECONDS="6"),
    )  # fmt: skip
    try:
        # four channels at the slow receiver, as in the report; then another project's alert
        slow_alerts = [send(hook(project, slow.url, f"slow {i}")) for i in range(4)]
        deadline = time.monotonic() + 120
        while not slow.seen and time.monotonic() < deadline:  # the worker is up, and busy
            time.sleep(0.1)
        assert slow.seen, (ROOT / "var" / "test-worker-delivery.log").read_text()[-3000:]
        time.sleep(1)  # the other slow deliveries find their receiver busy
        started = time.monotonic()
        theirs = hook(other_project, f"http://127.0.0.1:{fast_port}/hook", "fast")
        send(theirs)
        deadline = time.monotonic() + 60
        while not answered and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answered, (ROOT / "var" / "test-worker-delivery.log").read_text()[-3000:]
        waited = answered[0] - started
        assert waited < 5, waited  # not behind the slow receiver's 6-second attempts
        assert slow.most == 1  # the slow receiver never held both processes
        logged = Delivery.objects.filter(channel=theirs, status=Delivery.Status.SENT)
        deadline = time.monotonic() + 30  # the attempt is logged once the answer is read
        while not logged.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert logged.exists()
        # the slow ones are tried in turn, each attempt logged (timed out, to retry)
        deadline = time.monotonic() + 60
        while slow.seen < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slow.seen >= 2 and slow.most == 1
        logged = Delivery.objects.filter(alert_id__in=slow_alerts)
        assert logged.exists() and set(logged.values_list("status", flat=True)) <= {"retrying"}
    finally:
        stop_worker(worker)
        log.close()
        slow.close()
        fast.close()
