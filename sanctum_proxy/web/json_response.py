"""The proxy's HTTP responses: JSON rendered with orjson (the hot path), and the one place an error becomes a
response (status, body, `x-should-retry`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from sanctum_proxy.errors import ProxyError, internal, retry_headers

log = logging.getLogger("sanctum_proxy.errors")


class JsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: ProxyError, body: Mapping[str, object] | None = None, trace_id: str | None = None
                   ) -> JsonResponse:
    """The error's response; `body` when a dialect shapes its own (Anthropic Messages), else OpenAI's. A
    request that began a trace says which (`x-sanctum-trace-id`), failed or not: a surrender's trace holds
    every rejected round."""
    headers = retry_headers(error)
    if trace_id:
        headers = {**headers, "x-sanctum-trace-id": trace_id}
    return JsonResponse(error.body() if body is None else body, status_code=error.status, headers=headers or None)


def unexpected(exc: BaseException) -> ProxyError:
    """An exception that is a bug: logged with its traceback, answered as the 500 `internal` makes of it."""
    log.error("unexpected error: %s", type(exc).__name__, exc_info=exc)
    return internal(exc)
