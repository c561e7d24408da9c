"""Bearer authentication with a project API key; each authenticated request takes a token
from the key's rate limit (`ratelimit.take_token`)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest

from ..models import ApiKey, Project
from ..services import access
from .ratelimit import take_token


class AuthError(Exception):
    """A request whose key is missing, unknown (401) or revoked (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class KeyAuth:
    """Who is calling: the key and the project it acts on."""

    key: ApiKey
    project: Project

    def may(self, act: access.Act) -> bool:
        return access.key_may(self.key, act)

    def require(self, act: access.Act, doing: str = "") -> None:
        """Raise AuthError(403) unless the key may do `act` (`doing` says it more exactly)."""
        if refusal := access.key_refusal(self.key, act, doing):
            raise AuthError(refusal, status=403)


def bearer_token(request: HttpRequest) -> str:
    """Return the token of an `Authorization: Bearer <key>` header, or ''."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def authenticate_key(token: str) -> KeyAuth:
    """Return the key and project for a plain key, or raise AuthError / RateLimited."""
    if not token:
        raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
    key = (
        ApiKey.objects.select_related("project")
        .filter(key_hash=ApiKey.hash(token))
        .only("id", "name", "scope", "revoked_at", "last_used_at", "project")
        .first()
    )
    if key is None:
        raise AuthError("invalid API key")
    if key.revoked_at is not None:
        raise AuthError("this API key was revoked", status=403)
    take_token(key)
    return KeyAuth(key=key, project=key.project)


def authenticate_request(request: HttpRequest) -> KeyAuth:
    """Authenticate a request by its Bearer key and remember the result on the request."""
    auth = authenticate_key(bearer_token(request))
    request.key_auth = auth  # type: ignore[attr-defined]
    return auth
