"""Issue and revoke project API keys (the key is shown once, stored hashed)."""

from __future__ import annotations

from django.utils import timezone

from ..models import ApiKey, Project


def create_key(project: Project, name: str, *, user=None) -> tuple[ApiKey, str]:
    """Create a named key for the project; return the row and the plain key (shown once)."""
    return ApiKey.issue(project, name[:100], user=user if user and user.is_authenticated else None)


def revoke_key(key: ApiKey) -> None:
    """Revoke a key: requests with it get 403 from now on."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
