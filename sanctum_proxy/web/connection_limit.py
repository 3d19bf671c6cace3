"""The connection limit `max_connections`: requests in flight per process, answered in the protocol's error shape.

uvicorn's own `limit_concurrency` answered past its limit with a plain-text `503 Service Unavailable`, not an
error an OpenAI or Anthropic client can read. The limit is enforced here instead (web/header_timeout.py takes
uvicorn's check off and keeps the number to make room among connections still sending their heads): at most
`limit` requests in flight (a stream until its last byte, a body until it has arrived), the rest get a 503 in
the endpoint's shape (Anthropic's on /v1/messages) with `Retry-After` and `Connection: close`, so a client
that keeps a pool of connections lets one go. `/healthz` and `/metrics` count but are never refused: a
saturated proxy still says it lives and shows why.

Every open connection is then bounded: one still sending its head is closed to make room (header_timeout.py),
one with a request in flight counts here, one idle between requests closes after uvicorn's keep-alive timeout.
"""

from __future__ import annotations

import resource

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from sanctum_proxy.errors import Overloaded
from sanctum_proxy.web.client_protocols import ProtocolTable

ALWAYS_ANSWERED = frozenset({"/healthz", "/metrics"})


def default_max_connections() -> int:
    """Half the process's open-file limit (the rest: upstream connections, the trace store, logs), 64 to 65536."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(64, min(65536, soft // 2))


class ConnectionLimit:
    """ASGI middleware: at most `limit` HTTP requests in flight; past it a 503 at once (ALWAYS_ANSWERED excepted)."""

    def __init__(self, app: ASGIApp, limit: int, table: ProtocolTable, retry_after: int = 1) -> None:
        self.app, self.limit, self.table, self.retry_after = app, limit, table, retry_after
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit and scope["path"] not in ALWAYS_ANSWERED:
            await self._refuse(send, scope["path"])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, send: Send, path: str) -> None:
        error = Overloaded(f"Too many connections in use (limit {self.limit} per proxy process, max_connections); "
                           f"retry after {self.retry_after} s")
        body = orjson.dumps(self.table.error_body(path, error))
        await send({"type": "http.response.start", "status": error.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self.retry_after).encode()), (b"x-should-retry", b"true"),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
