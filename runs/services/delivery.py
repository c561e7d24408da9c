"""Send an alert to a channel and log the attempt: a signed JSON POST, a Slack Block Kit
message, or an email.

Every message is rendered from the alert's payload (`alerts` builds it): `title`, `text`
(what fired and why, in the finding's own words), `url`, `facts` (label/value pairs),
`sections` (a heading and lines each) and `held` (alerts summed into this one); the rest of
the payload is there for machines. Each attempt is one `Delivery` row. A webhook body
carries an `idempotency_key` (also the `Idempotency-Key` header), the same on every attempt,
so a receiver can drop the duplicate that at-least-once delivery may bring.

Requests go only to the configured URL: redirects are not followed, the host is resolved and
checked again before sending and the connection made to that address (`channels.address_for`),
the read of the answer is capped and every request has a timeout. URLs and secrets never go
into the log or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import re
import smtplib
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import InterfaceError, OperationalError, connection
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from ..models import Alert, Channel, Delivery, Project
from . import alerts, channels, queue

log = logging.getLogger(__name__)

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # no header may hold these
MAX_RESPONSE_BYTES = 64 * 1024
ERROR_CHARS = 500
USER_AGENT = "loopboard-alerts/1"
SLACK_TEXT_CHARS = 2900  # Slack refuses a section text over 3000 characters
SLACK_SECTIONS = 10


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt gave: sent, or why not and whether another attempt may succeed."""

    sent: bool
    retry: bool = False
    code: int | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    """A rendered message: the bytes sent (a webhook or Slack body, or an email's text) and
    the email's subject."""

    body: bytes
    subject: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def deliver(alert_id: int, channel_id: int) -> float | None:
    """Make the next attempt to send an alert to a channel and log it; return in how many
    seconds to try again (`backoff`), or None when done (sent, refused, or given up).

    Sending what was already sent changes nothing (a task run twice). A deleted alert or
    channel, or a disabled channel, is not sent to.
    """
    alert = Alert.objects.select_related("rule").filter(pk=alert_id).first()
    channel = Channel.objects.filter(pk=channel_id, enabled=True).first()
    if alert is None or channel is None:
        return None
    attempts = Delivery.objects.filter(alert=alert, channel=channel)
    if attempts.filter(status=Delivery.Status.SENT).exists():
        return None
    with receiver_slot(channel) as free:
        if not free:  # this receiver has its share of the pool: later, and no attempt spent
            return busy_delay()
        attempt = attempts.count() + 1
        message, outcome = render_and_send(alert, channel)
    last = attempt >= settings.LOOPBOARD_ALERT_ATTEMPTS
    if outcome.sent:
        status = Delivery.Status.SENT
    elif not outcome.retry:
        status = Delivery.Status.FAILED
    else:
        status = Delivery.Status.GAVE_UP if last else Delivery.Status.RETRYING
    _log(alert, channel, attempt, status, outcome, message)
    return backoff(attempt) if status == Delivery.Status.RETRYING else None


RECEIVER_LOCK = 0x6C62_646C  # advisory lock class id ("lbdl") of a receiver's delivery slots
BUSY_SECONDS = 2.0  # a delivery whose receiver is busy tries again about this much later


def receiver_of(channel: Channel) -> str:
    """What a channel sends to: the host and port of its URL (so four channels pointing at
    one slow server share its slots), or the channel itself for email."""
    if channel.kind == Channel.Kind.EMAIL:
        return f"channel:{channel.pk}"
    try:
        parts = urlsplit(channels.url_of(channel))
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except Exception:  # noqa: BLE001 - an unreadable URL: the attempt itself will say why
        return f"channel:{channel.pk}"
    return f"{(parts.hostname or '').lower()}:{port}"


@contextmanager
def receiver_slot(channel: Channel) -> Iterator[bool]:
    """Take one of the channel's receiver's LOOPBOARD_DELIVERIES_PER_RECEIVER delivery slots
    for the length of an attempt; yield whether one was free.

    A slot is a session-level PostgreSQL advisory lock, let go when the attempt ends or by
    the server when its worker dies, so a slow receiver holds at most that many of the
    delivery pool's processes, and the other receivers' deliveries go on beside it.
    """
    digest = zlib.crc32(receiver_of(channel).encode())
    slots = max(1, settings.LOOPBOARD_DELIVERIES_PER_RECEIVER)
    taken = None
    with connection.cursor() as cursor:
        for slot in range(slots):
            key = ((digest + slot) & 0xFFFFFFFF) - (1 << 31)
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [RECEIVER_LOCK, key])
            if cursor.fetchone()[0]:
                taken = key
                break
    try:
        yield taken is not None
    finally:
        if taken is not None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [RECEIVER_LOCK, taken])
            except (OperationalError, InterfaceError):  # the session is gone, and its lock
                pass


def busy_delay() -> float:
    """Seconds until a delivery put off by a busy receiver tries again (spread, so the ones
    waiting do not all come back at once)."""
    return BUSY_SECONDS * (1 + random.random())


def backoff(attempt: int) -> float:
    """Seconds to wait after a failed attempt before the next: doubling, at most an hour."""
    return min(settings.LOOPBOARD_ALERT_RETRY_SECONDS * 2 ** (attempt - 1), 3600)


def send_test(channel: Channel, alert: Alert | None = None) -> Delivery:
    """Send a test message to a channel now (one attempt, no retry); return its log row."""
    alert = alert or test_alert(channel)
    message, outcome = render_and_send(alert, channel)
    status = Delivery.Status.SENT if outcome.sent else Delivery.Status.FAILED
    return _log(alert, channel, 1, status, outcome, message)


def queue_test(channel: Channel) -> Alert:
    """Queue a test message to a channel (the worker sends it, once the transaction
    commits): a page never waits on a slow receiver. Its result goes to the delivery log."""
    alert = test_alert(channel)
    queue.queue_test_delivery(alert.pk, channel.pk)
    return alert


def send_queued_test(alert_id: int, channel_id: int) -> Delivery | None:
    """The worker's half of `queue_test`: send it, unless the channel or alert is gone."""
    alert = Alert.objects.filter(pk=alert_id, rule=None).first()
    channel = Channel.objects.filter(pk=channel_id).select_related("project").first()
    if alert is None or channel is None:
        return None
    if channel.deliveries.filter(alert=alert).exists():
        return None  # a redelivered task: the attempt is logged already
    with receiver_slot(channel) as free:
        if not free:
            raise ReceiverBusy(busy_delay())
        return send_test(channel, alert)


class ReceiverBusy(Exception):
    """The channel's receiver has all its delivery slots taken: try again in `delay` s."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"the receiver is busy; again in {delay:.1f} s")
        self.delay = delay


def test_alert(channel: Channel) -> Alert:
    """Make the alert row of a test message to a channel."""
    project = channel.project
    payload = {
        "kind": "test",
        "title": f"Test message from loopboard for {project.name}",
        "text": f"Channel “{channel.name}” works: alerts of {project.name} will arrive here.",
        "url": alerts.absolute(reverse("runs:project_settings", args=[project.slug])),
        "project": alerts.project_ref(project),
        "created_at": timezone.now().isoformat(),
    }
    return Alert.objects.create(
        rule=None, key=f"test:{channel.pk}:{uuid.uuid4().hex}", payload=payload
    )


def render_and_send(alert: Alert, channel: Channel) -> tuple[Message, Outcome]:
    """Render and send once. Whatever goes wrong (a channel whose stored URL no longer
    decrypts, a message the mail library refuses, a worker's time limit) comes back as a
    failed Outcome to retry, so every attempt gets its row in the delivery log."""
    message = Message(b"")
    try:
        message = render(alert, channel)
        return message, send(channel, message, idempotency_key(alert, channel))
    except Exception as exc:  # noqa: BLE001 - logged here and in the delivery log
        log.exception("alert %s to channel %s could not be sent", alert.pk, channel.pk)
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return message, Outcome(False, retry=True, error=error[:ERROR_CHARS])


def log_of(project: Project) -> QuerySet[Delivery]:
    """The project's delivery attempts, newest first, with their channel, alert and rule."""
    rows = Delivery.objects.filter(channel__project=project).order_by("-created_at", "-id")
    return rows.select_related("channel", "alert__rule")


def idempotency_key(alert: Alert, channel: Channel) -> str:
    """The same on every attempt of one alert to one channel."""
    return f"loopboard-{alert.pk}-{channel.pk}"


def _log(
    alert: Alert, channel: Channel, attempt: int, status: str, outcome: Outcome, message: Message
) -> Delivery:
    log.info(
        "alert %s to channel %s, attempt %s: %s %s",
        alert.pk, channel.pk, attempt, status, outcome.code or outcome.error[:100],
    )  # fmt: skip
    return Delivery.objects.create(
        alert=alert,
        channel=channel,
        attempt=attempt,
        status=status,
        response_code=outcome.code,
        error=outcome.error[:ERROR_CHARS],
        payload_sha256=message.sha256,
    )


# --- rendering ------------------------------------------------------------------------------


# The order a webhook body's keys are sent in (the stored payload is jsonb: its order is lost).
BODY_ORDER = (
    "kind", "event", "title", "text", "url", "project", "rule", "run", "issue", "rate",
    "findings", "facts", "sections", "held", "created_at",
)  # fmt: skip


def body_of(alert: Alert, channel: Channel) -> dict:
    """The JSON a webhook receives: the payload, plus the alert id and idempotency key."""
    payload = alert.payload
    ordered = {key: payload[key] for key in BODY_ORDER if key in payload}
    rest = {key: value for key, value in payload.items() if key not in ordered}
    return (
        ordered | rest | {"alert_id": alert.pk, "idempotency_key": idempotency_key(alert, channel)}
    )


def render(alert: Alert, channel: Channel) -> Message:
    """Render the alert for the channel's kind."""
    if channel.kind == Channel.Kind.EMAIL:
        return Message(email_text(alert.payload).encode(), subject=email_subject(alert.payload))
    if channel.kind == Channel.Kind.SLACK:
        data = slack_message(alert.payload)
    else:
        data = body_of(alert, channel)
    return Message(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())


def lines(payload: dict) -> list[str]:
    """The message as plain lines: what fired, why, the facts, the sections, what was held."""
    out = [payload.get("text", "")]
    for fact in payload.get("facts", []):
        out.append(f"{fact['label']}: {fact['value']}")
    for section in payload.get("sections", []):
        out += ["", section["heading"], *(f"- {line}" for line in section["lines"])]
    if held := payload.get("held"):
        out += ["", held["text"]]
    return [line for line in out if line is not None]


def email_subject(payload: dict) -> str:
    """The subject line: the title with every line separator (CR, LF, U+0085, U+2028,
    U+2029, ...) and control character made a space, as a mail header must be one line."""
    subject = f"[loopboard] {payload.get('title', 'alert')}"
    return _CONTROL.sub(" ", " ".join(subject.splitlines()))[:200]


def email_text(payload: dict) -> str:
    return "\n".join([*lines(payload), "", payload.get("url", "")]) + "\n"


def slack_escape(text: str) -> str:
    """Escape text for Slack mrkdwn: trace content must not become links or mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(payload: dict) -> dict:
    """A Slack incoming-webhook body: a fallback `text` and Block Kit `blocks`."""
    title = payload.get("title", "loopboard alert")
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": False}},
        _mrkdwn(slack_escape(payload.get("text", ""))),
    ]
    if facts := payload.get("facts"):
        fields = [
            {
                "type": "mrkdwn",
                "text": f"*{slack_escape(f['label'])}*\n{slack_escape(str(f['value']))}",
            }
            for f in facts[:10]
        ]
        blocks.append({"type": "section", "fields": fields})
    for section in payload.get("sections", [])[:SLACK_SECTIONS]:
        text = "\n".join(f"• {slack_escape(line)}" for line in section["lines"])
        blocks.append(_mrkdwn(f"*{slack_escape(section['heading'])}*\n{text}"))
    if held := payload.get("held"):
        blocks.append(_mrkdwn(slack_escape(held["text"])))
    if url := payload.get("url"):
        button = {"type": "button", "text": {"type": "plain_text", "text": "Open in loopboard"}}
        blocks.append({"type": "actions", "elements": [{**button, "url": url}]})
    context = " · ".join(
        part
        for part in (
            "loopboard",
            payload.get("project", {}).get("name"),
            payload.get("rule", {}).get("name"),
        )
        if part
    )
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(context)}]}
    )
    return {"text": slack_escape(title), "blocks": blocks}


def _mrkdwn(text: str) -> dict:
    if len(text) > SLACK_TEXT_CHARS:
        text = text[: SLACK_TEXT_CHARS - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text or " "}}


# --- sending --------------------------------------------------------------------------------


def send(channel: Channel, message: Message, key: str) -> Outcome:
    """Send a rendered message to the channel once."""
    if channel.kind == Channel.Kind.EMAIL:
        return send_email(channel, message)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Idempotency-Key": key}
    if channel.kind == Channel.Kind.WEBHOOK:
        headers |= signature_headers(channels.secret_of(channel), message.body)
    return post(channels.url_of(channel), message.body, headers)


def signature_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """`X-Loopboard-Timestamp` and `X-Loopboard-Signature: sha256=<hex HMAC-SHA256 of
    "{timestamp}.{body}" under the channel's secret>`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    mac = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Loopboard-Timestamp": stamp, "X-Loopboard-Signature": f"sha256={mac}"}


def post(url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST the body to exactly this URL: no redirect followed, a timeout, the answer read up
    to MAX_RESPONSE_BYTES, the host's addresses checked again first."""
    parts = urlsplit(url)
    if not url or not parts.hostname:
        return Outcome(False, error="the channel has no usable URL (was SECRET_KEY changed?)")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    private_ok = settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS
    try:
        address = channels.address_for(parts.hostname, port, private_ok=private_ok)
    except channels.Unresolved as exc:
        return Outcome(False, retry=True, error=str(exc))
    except channels.ChannelInvalid as exc:
        return Outcome(False, error=str(exc))
    # Connect to the address just checked, so a second lookup cannot answer another one (DNS
    # rebinding); the Host header and TLS (SNI and the certificate) still name the host.
    target = pinned(url, address)
    headers = {**headers, "Host": parts.netloc}
    extensions = {"sni_hostname": parts.hostname}
    timeout = settings.LOOPBOARD_ALERT_TIMEOUT_SECONDS
    # httpx's timeout holds per read: a peer that trickles a byte at a time would hold the
    # call for ever. The deadline is for the whole call: at it, the connection is closed.
    client = httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)
    deadline = threading.Timer(timeout, client.close)
    deadline.daemon = True
    deadline.start()
    started = time.monotonic()
    try:
        with (
            client,
            client.stream(
                "POST", target, content=body, headers=headers, extensions=extensions
            ) as response,
        ):
            answer = _read_capped(response, started + timeout)
    except (httpx.TimeoutException, DeadlinePassed):
        return Outcome(False, retry=True, error=f"timed out after {timeout:g} s")
    except (httpx.HTTPError, RuntimeError) as exc:
        if time.monotonic() - started >= timeout:  # closed at the deadline, mid-read
            return Outcome(False, retry=True, error=f"timed out after {timeout:g} s")
        return Outcome(False, retry=True, error=f"{type(exc).__name__} reaching {parts.hostname}")
    finally:
        deadline.cancel()
    code = response.status_code
    if 200 <= code < 300:
        return Outcome(True, code=code)
    if response.is_redirect:
        where = urlsplit(response.headers.get("location", "")).hostname or "elsewhere"
        return Outcome(False, code=code, error=f"redirect to {where} not followed")
    retry = code >= 500 or code == 429
    return Outcome(False, retry=retry, code=code, error=_error_text(code, answer))


def pinned(url: str, address: str) -> str:
    """The URL with its host replaced by this IP address (the port and path kept)."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=host + port))


class DeadlinePassed(Exception):
    """A call's overall deadline passed while its answer was still coming."""


def _read_capped(response: httpx.Response, deadline: float) -> bytes:
    answer = b""
    for chunk in response.iter_bytes():
        answer += chunk
        if len(answer) >= MAX_RESPONSE_BYTES:
            break
        if time.monotonic() > deadline:
            raise DeadlinePassed
    return answer[:MAX_RESPONSE_BYTES]


def _error_text(code: int, answer: bytes) -> str:
    text = answer[:ERROR_CHARS].decode("utf-8", "replace").replace("\x00", "").strip()
    return f"HTTP {code}: {text}" if text else f"HTTP {code}"


def send_email(channel: Channel, message: Message) -> Outcome:
    """Send through Django's email backend; a refused address is not retried."""
    email = EmailMessage(message.subject, message.body.decode(), to=channel.recipients)
    try:
        email.send()
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
        return Outcome(False, error=f"{type(exc).__name__}: refused")
    except (smtplib.SMTPException, OSError) as exc:
        return Outcome(False, retry=True, error=f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
    return Outcome(True)
