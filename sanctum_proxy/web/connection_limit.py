"""`max_connections`: requests in flight per process, refused in the protocol's shape (not uvicorn's plain text)."""

from __future__ import annotations

import resource

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from sanctum_proxy.errors import Overloaded
from sanctum_proxy.web.client_protocols import ProtocolTable

ALWAYS_ANSWERED = frozenset({"/healthz", "/metrics"})


def default_max_connections() -> int:
    """Half the open-file limit: the rest is for the upstreams, traces and logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(64, min(65536, soft // 2))


class ConnectionLimit:
    """ASGI middleware: a 503 past `limit`, but for health and metrics."""

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
