"""Limits on what one request and all of them together may take: messages and tools per request
(`check_counts`) and requests in flight on /v1/* (`ConcurrencyLimit`).

Too many messages or tools is a 400 `invalid_request_error` naming the field, code `array_above_max_length`:
what OpenAI answers for the same request, and what the contract gives every other invalid field; 413 stays
what it is in the contract, a body over `max_body_bytes` refused before it is parsed.
Too many requests in flight is a 429 `rate_limit_exceeded` with `Retry-After` (the OpenAI SDKs wait and
retry it); a streaming answer holds its slot until its last byte. The limit is per process.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ArrayTooLong, TooManyRequests
from .protocols import messages_api  # the Anthropic endpoint gets its 429 in Anthropic's shape


def check_counts(body: dict[str, Any], max_messages: int, max_tools: int) -> None:
    for field, limit in (("messages", max_messages), ("tools", max_tools), ("functions", max_tools)):
        items = body.get(field)
        if isinstance(items, list) and len(items) > limit:
            raise ArrayTooLong(f"'{field}': array too long. Expected an array with maximum length {limit}, "
                               f"but got an array with length {len(items)} instead.", param=field)


class ConcurrencyLimit:
    """ASGI middleware: at most `limit` requests under `prefix` at once; the rest get 429 at once."""

    def __init__(self, app: ASGIApp, limit: int, prefix: str = "/v1/", retry_after: int = 1) -> None:
        self.app, self.limit, self.prefix, self.retry_after = app, limit, prefix, retry_after
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix) or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self._refuse(send, scope["path"])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, send: Send, path: str) -> None:
        error = TooManyRequests(f"Too many requests in flight (limit {self.limit} per proxy process); "
                                f"retry after {self.retry_after} s")
        body = orjson.dumps(messages_api.error_body(error) if path == "/v1/messages" else error.body())
        await send({"type": "http.response.start", "status": error.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self.retry_after).encode()), (b"x-should-retry", b"true")]})
        await send({"type": "http.response.body", "body": body})
