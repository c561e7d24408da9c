"""Issue 25, part 2: a delivery attempt cut off by a worker's time limit is logged and retried.

Celery's prefork pool enforces a task's soft time limit by signalling the child process
(SIGUSR1), whose handler raises SoftTimeLimitExceeded wherever the task is: for a delivery,
inside the HTTP call. Before, that lost the attempt (no row in the delivery log, no retry);
now it is a failed attempt like any other, logged and tried again."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from runs import tasks
from runs.models import Channel, Delivery
from runs.services import channels, delivery
from tests.cli.test_hook_install import Trickle

pytestmark = pytest.mark.django_db


def channel_to(project, url: str, kind: str) -> Channel:
    return channels.create_channel(project, channels.ChannelData(name=kind, kind=kind, url=url))[0]


@pytest.fixture
def soft_limit_signal():
    """Install the handler Celery's pool child has for the soft time limit and return a
    function that sends that signal to this process after `seconds`."""

    def on_soft_limit(signum, frame):  # what billiard's pool child does
        raise SoftTimeLimitExceeded()

    previous = signal.signal(signal.SIGUSR1, on_soft_limit)
    timers: list[threading.Timer] = []

    def fire_in(seconds: float) -> None:
        timer = threading.Timer(seconds, signal.raise_signal, args=(signal.SIGUSR1,))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    yield fire_in
    for timer in timers:
        timer.cancel()
    signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("kind", [Channel.Kind.WEBHOOK, Channel.Kind.SLACK])
def test_a_delivery_attempt_cut_off_by_a_worker_limit_is_logged_and_retried(
    project, settings, soft_limit_signal, kind
):
    """A receiver that trickles its answer and an overall deadline (30 s) longer than the
    worker's soft limit (here 1 s): the limit strikes mid-call; the attempt gets its row and
    the task is told to try again."""
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    settings.LOOPBOARD_ALERT_TIMEOUT_SECONDS = 30
    trickle = Trickle()
    try:
        channel = channel_to(project, trickle.url + "/hook", kind)
        alert = delivery.test_alert(channel)
        started = time.monotonic()
        soft_limit_signal(1.0)
        retry_in = delivery.deliver(alert.pk, channel.pk)
        took = time.monotonic() - started
    finally:
        trickle.close()
    assert took < 10  # cut off by the limit, not the 30 s deadline
    assert retry_in == delivery.backoff(1)
    [row] = Delivery.objects.filter(alert=alert, channel=channel)
    assert (row.attempt, row.status) == (1, Delivery.Status.RETRYING)
    assert row.error.startswith("SoftTimeLimitExceeded")


def test_a_delivery_cut_off_by_a_worker_limit_is_sent_on_its_retry(project, eager, monkeypatch):
    """The task itself: the first attempt is cut off by the limit, the retry it asks for
    sends; the log holds both attempts."""
    channel = channel_to(project, "http://127.0.0.1:9/hook", Channel.Kind.WEBHOOK)
    alert = delivery.test_alert(channel)
    calls: list[str] = []

    def post(url, body, headers):
        calls.append(url)
        if len(calls) == 1:
            raise SoftTimeLimitExceeded()
        return delivery.Outcome(True, code=200)

    monkeypatch.setattr(delivery, "post", post)
    tasks.deliver.apply(args=(alert.pk, channel.pk))
    rows = list(
        Delivery.objects.filter(alert=alert).order_by("attempt").values_list("attempt", "status")
    )
    assert rows == [(1, Delivery.Status.RETRYING), (2, Delivery.Status.SENT)]
    assert len(calls) == 2
