"""Requests in flight per process, and each client key's share of them (429), held across replicas with Redis.

A request takes its slot once its whole body has arrived, so clients that trickle a body hold no slot. One whose
key is not a client's goes on unread and slot-free: its 401 comes before the body is asked for.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sanctum_proxy.errors import BodyTimeout, BodyTooLarge, ProxyError, TooManyRequests, retry_headers
from sanctum_proxy.web.auth import KeyRing, key_refused, presented_key
from sanctum_proxy.web.client_protocols import ProtocolTable
from sanctum_proxy.web.json_response import JsonResponse

BODY = "sanctum.body"


def request_body(request: Request) -> bytes:
    """The body ConcurrencyLimit read."""
    body: bytes = request.scope[BODY]
    request.state.body_bytes = len(body)
    return body


class SharedSlots(Protocol):
    """An id, False when all are held, None when they cannot be counted now."""

    async def take_slot(self, owner: bytes, limit: int) -> str | bool | None: ...
    def give_slot(self, owner: bytes, slot: str) -> None: ...


class ConcurrencyLimit:
    """ASGI middleware: past `limit` requests in the protocols' areas, a 429 at once."""

    def __init__(self, app: ASGIApp, limit: int, table: ProtocolTable, retry_after: int = 1,
                 max_body_bytes: int | None = None, body_timeout: float | None = None,
                 keys: KeyRing | None = None, per_key: int | None = None,
                 shared: SharedSlots | None = None) -> None:
        self.app, self.limit, self.table, self.retry_after = app, limit, table, retry_after
        self.shared = shared
        self.max_body_bytes, self.body_timeout = max_body_bytes, body_timeout
        self.keys = keys
        self.per_key = per_key if per_key is not None else max(1, limit // 2)
        self.in_flight = 0
        self.by_key: dict[bytes, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.table.limited(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.keys is not None and key_refused(self.keys, presented_key(scope)) is not None:
            await self.app(scope, receive, send)  # its 401 comes before the body is read, slot-free
            return
        try:
            replay = await self._body_first(scope, receive)
        except ProxyError as error:
            await self._answer(scope, receive, send, error)
            return
        if replay is None:  # the client left
            return
        receive = replay
        if self.limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self._refuse(scope, receive, send)
            return
        key = presented_key(scope) if self.keys is not None and self.keys.client_required() else None
        if key is not None and self.by_key.get(key, 0) >= self.per_key:
            await self._refuse(scope, receive, send, f"{self.per_key} per client key per proxy process")
            return
        slot = await self.shared.take_slot(key, self.per_key) if key is not None and self.shared else None
        if slot is False:
            await self._refuse(scope, receive, send, f"{self.per_key} per client key across replicas")
            return
        self.in_flight += 1
        if key is not None:
            self.by_key[key] = self.by_key.get(key, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            if isinstance(slot, str) and key is not None and self.shared is not None:
                self.shared.give_slot(key, slot)
            if key is not None:
                self.by_key[key] -= 1
                if not self.by_key[key]:
                    del self.by_key[key]

    async def _body_first(self, scope: Scope, receive: Receive) -> Receive | None:
        """The whole body, and a receive that hands it on (None: the client left)."""
        limit = self.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if limit is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
        pieces: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return None
                    pieces.append(message.get("body", b""))
                    size += len(pieces[-1])
                    if limit is not None and size > limit:
                        raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
                    if not message.get("more_body"):
                        break
        except TimeoutError:
            raise BodyTimeout(f"the request body did not arrive within {self.body_timeout} s "
                              "(body_read_timeout)") from None
        body = b"".join(pieces)
        scope[BODY] = body  # the routes take it here
        first: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return first.pop(0) if first else await receive()

        return replay

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, share: str | None = None) -> None:
        share = share or f"{self.limit} per proxy process"
        error = TooManyRequests(f"Too many requests in flight (limit {share}); "
                                f"retry after {self.retry_after} s")
        await self._answer(scope, receive, send, error,
                           {"retry-after": str(self.retry_after), "x-should-retry": "true"})

    async def _answer(self, scope: Scope, receive: Receive, send: Send, error: ProxyError,
                      extra: dict[str, str] | None = None) -> None:
        if extra is None:  # a refused body: the rest of it may still be on the connection
            extra = {**retry_headers(error), "connection": "close"}
        response = JsonResponse(self.table.error_body(scope["path"], error), status_code=error.status, headers=extra)
        await response(scope, receive, send)
