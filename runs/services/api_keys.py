"""Issue and revoke project API keys (the key is shown once, stored hashed)."""

from __future__ import annotations

from django.utils import timezone

from ..models import ApiKey, Project
from . import access


def create_key(
    project: Project, name: str, *, user=None, scope: str = ApiKey.Scope.INGEST
) -> tuple[ApiKey, str]:
    """Create a named key for the project; return the row and the plain key (shown once).

    `user` None is an operator (the management command). Raises PermissionError when the
    user may not give the key that scope.
    """
    if scope not in access.key_scopes_for(user):
        raise PermissionError(f"You may not create a key with the {scope!r} scope")
    creator = user if user and user.is_authenticated else None
    return ApiKey.issue(project, name[:100], user=creator, scope=scope)


def revoke_key(key: ApiKey) -> None:
    """Revoke a key: requests with it get 403 from now on."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
