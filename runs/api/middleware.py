"""Request middleware for the API and the OTLP receiver."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

API_PREFIXES = ("/api/", "/v1/")


class BodyLimitMiddleware:
    """Answer 413 to an API or OTLP request whose declared body is over MAX_UPLOAD_BYTES."""

    def __init__(self, get_response) -> None:  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIXES):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > settings.MAX_UPLOAD_BYTES:
                return JsonResponse(
                    {
                        "detail": f"request body of {length} bytes is over the limit of "
                        f"{settings.MAX_UPLOAD_BYTES} bytes"
                    },
                    status=413,
                )
        return self.get_response(request)
