"""JSON responses by orjson, and the one place an error becomes a response."""

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
    """`body`: a protocol's own shape."""
    headers = retry_headers(error)
    if trace_id:
        headers = {**headers, "x-sanctum-trace-id": trace_id}
    return JsonResponse(error.body() if body is None else body, status_code=error.status, headers=headers or None)


def unexpected(exc: BaseException) -> ProxyError:
    """A bug: logged, answered as a 500."""
    log.error("unexpected error: %s", type(exc).__name__, exc_info=exc)
    return internal(exc)
