"""The NinjaAPI: the JSON API under /api/ (OpenAPI schema at /api/openapi.json, docs at
/api/docs). Errors are JSON `{"detail": "..."}` with the right 4xx status."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError
from ninja.parser import Parser

from runs.api import alerts, auth, issues, labels, middleware, ratelimit, retention
from runs.api.router import router
from runs.importers.reading import json_depth_ok


class BoundedJSONParser(Parser):
    """Parse JSON bodies, refusing undecodable or too deeply nested ones with a 400."""

    def parse_body(self, request: HttpRequest):  # type: ignore[no-untyped-def]
        try:
            data = json.loads(request.body or b"null")
        except RecursionError:
            data = None
            deep = True
        else:
            deep = not json_depth_ok(data, settings.LOOPBOARD_MAX_JSON_DEPTH)
        if deep:
            raise BodyError(
                f"the JSON body nests deeper than {settings.LOOPBOARD_MAX_JSON_DEPTH} levels"
            )
        return data


class BodyError(Exception):
    """A request body that cannot be taken."""


api = NinjaAPI(
    title="loopboard API",
    version="1",
    description=(
        "Upload traces, read runs and findings, tune the policy and ask the live loop check. "
        "Authenticate with a project API key: `Authorization: Bearer <key>`. The key's "
        "project is the one every call acts on. OTLP/HTTP traces go to `POST /v1/traces` "
        "(not part of this schema; see the README)."
    ),
    parser=BoundedJSONParser(),
    urls_namespace="api",
)
api.add_router("/", router)
api.add_router("/", alerts.router)
api.add_router("/", labels.router)
api.add_router("/", issues.router)
api.add_router("/", retention.router)


def _error(request: HttpRequest, message: str, status: int, **headers: str) -> HttpResponse:
    response = api.create_response(request, {"detail": message}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@api.exception_handler(auth.AuthError)
def on_auth_error(request: HttpRequest, exc: auth.AuthError) -> HttpResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    return _error(request, exc.message, exc.status, **headers)


@api.exception_handler(AuthenticationError)
def on_authentication_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    return _error(request, "missing or invalid API key", 401, **{"WWW-Authenticate": "Bearer"})


@api.exception_handler(ratelimit.RateLimited)
def on_rate_limited(request: HttpRequest, exc: ratelimit.RateLimited) -> HttpResponse:
    return _error(request, str(exc), 429, **{"Retry-After": str(exc.retry_after)})


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_outage(request: HttpRequest, exc: Exception) -> HttpResponse:
    """503 with Retry-After, so that clients retry instead of dropping what they send."""
    return middleware.outage_response(request)


@api.exception_handler(BodyError)
def on_body_error(request: HttpRequest, exc: BodyError) -> HttpResponse:
    return _error(request, str(exc), 400)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """422 with a readable message plus the field errors."""
    parts = []
    for error in exc.errors[:10]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "payload"))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    errors = [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors[:50]
    ]
    body = {"detail": "invalid request: " + "; ".join(parts), "errors": errors}
    return api.create_response(request, body, status=422)
