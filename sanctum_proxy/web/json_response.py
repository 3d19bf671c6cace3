"""The proxy's HTTP responses: JSON rendered with orjson (the hot path), and the one place an error becomes a
response (status, body, `x-should-retry`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from sanctum_proxy.errors import ProxyError, retry_headers


class JsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: ProxyError, body: Mapping[str, Any] | None = None) -> JsonResponse:
    """The error's response; `body` when a dialect shapes its own (Anthropic Messages), else OpenAI's."""
    return JsonResponse(error.body() if body is None else body, status_code=error.status,
                        headers=retry_headers(error) or None)
