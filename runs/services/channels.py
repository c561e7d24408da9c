"""A project's alert channels: create and update them with validation, keep their secrets
encrypted (sending, and the test message, are `delivery`'s).

A channel's URL (a Slack incoming webhook URL is itself the secret) and its signing secret
are stored as Fernet tokens under a key derived from SECRET_KEY; the pages and the API show
only `Channel.hint`. Webhook and Slack URLs must be http(s) and must not resolve to a
loopback, link-local or private address unless LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS is set; the
address is checked again at send time (`delivery`).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.validators import EmailValidator, ValidationError
from django.db import transaction

from ..models import Channel, Project
from . import storage

SLACK_HOST = "hooks.slack.com"
MAX_RECIPIENTS = 20


class ChannelInvalid(ValueError):
    """A channel that cannot be saved; the message says why, for the form or the API."""


@dataclass(frozen=True, slots=True)
class ChannelData:
    """What a form or the API gives to create or change a channel. None leaves a field as
    it is on update; a blank secret on a new webhook gets a generated one."""

    name: str | None = None
    kind: str | None = None
    url: str | None = None
    secret: str | None = None
    recipients: list[str] | None = None
    enabled: bool | None = None


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"loopboard.channels:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode() if value else ""


def decrypt(token: str) -> str:
    """Return the plain value; '' when there is none or SECRET_KEY changed since."""
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        return ""


def url_of(channel: Channel) -> str:
    return decrypt(channel.url_encrypted)


def secret_of(channel: Channel) -> str:
    return decrypt(channel.secret_encrypted)


def create_channel(project: Project, data: ChannelData, *, user=None) -> tuple[Channel, str]:
    """Validate and save a new channel; return it and its signing secret (a webhook's, shown
    once; '' for the other kinds). Raises ChannelInvalid."""
    if data.kind not in Channel.Kind.values:
        raise ChannelInvalid(f"kind must be one of {', '.join(Channel.Kind.values)}")
    channel = Channel(project=project, kind=data.kind, created_by=_user(user))
    secret = _apply(channel, data, new=True)
    channel.save()
    return channel, secret


def update_channel(channel: Channel, data: ChannelData) -> str:
    """Validate and save changes to a channel (its kind stays); return a new signing secret
    when one was given, else ''. Raises ChannelInvalid."""
    with transaction.atomic():
        locked = Channel.objects.select_for_update().get(pk=channel.pk)
        secret = _apply(locked, data, new=False)
        locked.save()
    for field in ("name", "url_encrypted", "secret_encrypted", "hint", "recipients", "enabled"):
        setattr(channel, field, getattr(locked, field))
    return secret


def _apply(channel: Channel, data: ChannelData, *, new: bool) -> str:
    """Set the validated fields on the channel (unsaved); return the secret to show once."""
    if data.name is not None or new:
        name = storage.clean_text((data.name or "").strip()[:100])
        if not name:
            raise ChannelInvalid("give the channel a name")
        channel.name = name
    if data.enabled is not None:
        channel.enabled = data.enabled
    if channel.kind == Channel.Kind.EMAIL:
        if data.recipients is not None or new:
            channel.recipients = clean_recipients(data.recipients or [])
            channel.hint = ", ".join(channel.recipients)[:120]
        return ""
    url = url_of(channel)
    if data.url is not None or new:
        url = check_url(data.url or "", slack=channel.kind == Channel.Kind.SLACK)
        channel.url_encrypted = encrypt(url)
    shown = ""
    if channel.kind == Channel.Kind.WEBHOOK and (data.secret is not None or new):
        shown = (data.secret or "").strip() or secrets.token_urlsafe(32)
        if len(shown) < 16:
            raise ChannelInvalid("a signing secret needs at least 16 characters")
        channel.secret_encrypted = encrypt(shown)
    channel.hint = storage.clean_text(hint(url, shown or secret_of(channel)))
    return shown


def hint(url: str, secret: str = "") -> str:
    """What is shown of a URL and a secret after saving: the host and their last 4 characters."""
    host = urlsplit(url).hostname or ""
    shown = f"{host}/…{url[-4:]}" if url else ""
    if secret:
        shown += f" · secret ••••{secret[-4:]}"
    return shown[:120]


def clean_recipients(recipients: list[str]) -> list[str]:
    """Return the recipients stripped and de-duplicated; raise ChannelInvalid on a bad one."""
    out: list[str] = []
    for address in recipients:
        address = address.strip()
        if not address or address in out:
            continue
        try:
            EmailValidator()(address)
        except ValidationError:
            raise ChannelInvalid(f"{address!r} is not an email address") from None
        out.append(address)
    if not out:
        raise ChannelInvalid("give at least one recipient")
    if len(out) > MAX_RECIPIENTS:
        raise ChannelInvalid(f"at most {MAX_RECIPIENTS} recipients")
    return out


def check_url(url: str, *, slack: bool = False) -> str:
    """Return the URL if alerts may be sent to it; raise ChannelInvalid otherwise.

    http(s) only, no credentials in it, and (unless LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS) a host
    that resolves only to public addresses; a Slack URL must be https://hooks.slack.com/….
    """
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a bad port or an unbalanced bracket
        raise ChannelInvalid(f"the URL cannot be read: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ChannelInvalid("the URL must start with http:// or https:// and name a host")
    if parts.username or parts.password:
        raise ChannelInvalid("put no user name or password in the URL")
    if len(url) > 2000:
        raise ChannelInvalid("the URL is longer than 2000 characters")
    private_ok = settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS
    if slack and not private_ok and (parts.scheme != "https" or parts.hostname != SLACK_HOST):
        raise ChannelInvalid(f"a Slack incoming webhook URL starts with https://{SLACK_HOST}/")
    if not private_ok:
        refused = refused_address(parts.hostname, port or _default_port(parts.scheme))
        if refused:
            raise ChannelInvalid(refused)
    return url


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


class Unresolved(ChannelInvalid):
    """A host that does not resolve (now: at send time it is worth another attempt)."""


def address_for(host: str, port: int, *, private_ok: bool = False) -> str:
    """Return the address to connect to for this host; raise Unresolved when it does not
    resolve, and (unless private_ok) ChannelInvalid when one of its addresses is loopback,
    link-local, private, multicast or reserved."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unresolved(f"{host} does not resolve ({exc})") from None
    for info in infos if not private_ok else ():
        address = ipaddress.ip_address(info[4][0])
        if any(not a.is_global or a.is_multicast for a in (address, *_embedded_ipv4(address))):
            raise ChannelInvalid(
                f"{host} resolves to {address}, a loopback, link-local or private address "
                "(set LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS to allow it)"
            )
    return str(infos[0][4][0])


# IPv6 ranges whose last 32 bits are an IPv4 address a packet may end up at: NAT64 (the
# well-known and the local-use prefix) and the deprecated IPv4-compatible form.
_IPV4_IN_LAST_32_BITS = [
    ipaddress.ip_network(net) for net in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96")
]


def _embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list:
    """Return the IPv4 addresses an IPv6 address stands for (mapped, 6to4, Teredo's server
    and client, NAT64, IPv4-compatible), judged as well as the address itself."""
    if address.version == 4:
        return []
    assert isinstance(address, ipaddress.IPv6Address)
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    found += list(address.teredo or ())
    if any(address in net for net in _IPV4_IN_LAST_32_BITS):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def refused_address(host: str, port: int) -> str:
    """Return why sending to this host is refused, or '' (see `address_for`)."""
    try:
        address_for(host, port)
    except ChannelInvalid as exc:
        return str(exc)
    return ""


def delete_channel(channel: Channel) -> None:
    """Delete a channel, its delivery log and its place in the rules."""
    channel.delete()


def _user(user):  # type: ignore[no-untyped-def]
    return user if user is not None and user.is_authenticated else None
