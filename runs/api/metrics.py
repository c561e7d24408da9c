"""`GET /metrics`: the Prometheus text exposition (`runs.services.metrics`).

Never open: the caller sends `Authorization: Bearer <token>`, either the operator's
`LOOPBOARD_METRICS_TOKEN` (every project, and the queue depth) or a project API key of any
scope (that project only). Anything else is a 401.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from ..models import Project
from ..services import access
from ..services.metrics import exposition
from . import auth, middleware, ratelimit


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = auth.bearer_token(request)
    try:
        project = scrape_scope(token)
    except auth.AuthError as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        return middleware.error_response(request, exc.message, exc.status, **headers)
    except ratelimit.RateLimited as exc:
        retry = {"Retry-After": str(exc.retry_after)}
        return middleware.error_response(request, str(exc), 429, **retry)
    body = exposition(project)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def scrape_scope(token: str) -> Project | None:
    """Return the project a token may scrape, or None for the operator's token (all);
    raise AuthError for no token or a wrong one."""
    operator = settings.LOOPBOARD_METRICS_TOKEN
    if operator and token and hmac.compare_digest(token.encode(), operator.encode()):
        return None
    key_auth = auth.authenticate_key(token)
    key_auth.require(access.READ, "reading metrics")
    return key_auth.project
