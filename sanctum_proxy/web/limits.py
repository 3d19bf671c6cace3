"""Limits on what all requests together may take: requests in flight (`ConcurrencyLimit`).
(Messages and tools per request are checked with the request: protocols/chat_request.py `check_counts`.)

Where client keys are configured, each key gets a share of the slots (`per_key`, the setting
`max_concurrent_per_key`, by default half of them): one client cannot hold every slot and lock the others out.

413 is what it is in the contract, a body over `max_body_bytes` refused before it is parsed.
Too many requests in flight is a 429 `rate_limit_exceeded` with `Retry-After` (the OpenAI SDKs wait and
retry it); a streaming answer holds its slot until its last byte. The limit is per process, and so is a key's
share unless `redis_url` is set: then the share is held across every replica (`shared`, state/replicated.py),
and where Redis does not answer each process holds it alone again (fail open, logged).
A request takes its slot only once its whole body has arrived: the body is read first, within
`body_read_timeout` (else 408 `request_timeout`) and `max_body_bytes` (else 413), and handed to the app
as it came, so clients that trickle a body at a byte a second hold no slot from those that do not. A request
whose key is not a client's goes on unread and slot-free: its 401 comes before the body is asked for.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sanctum_proxy.errors import BodyTimeout, BodyTooLarge, ProxyError, TooManyRequests, retry_headers
from sanctum_proxy.web.auth import KeyRing, key_refused
from sanctum_proxy.web.client_protocols import ProtocolTable
from sanctum_proxy.web.json_response import JsonResponse


def scope_key(scope: Scope) -> bytes:
    """The client key a request presents (auth.presented_key, read from the ASGI scope)."""
    headers: dict[bytes, bytes] = dict(scope.get("headers") or ())
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    if scheme.lower() == b"bearer":
        return token.strip()
    return headers.get(b"x-api-key", b"").strip()


BODY = "sanctum.body"  # the scope key of a request body read whole by ConcurrencyLimit


class SharedSlots(Protocol):
    """Slots every replica counts (state/replicated.SharedState): an id, False when all are held, None
    when they cannot be counted now."""

    async def take_slot(self, owner: bytes, limit: int) -> str | bool | None: ...
    def give_slot(self, owner: bytes, slot: str) -> None: ...


class ConcurrencyLimit:
    """ASGI middleware: at most `limit` requests of the protocols' areas at once; the rest get 429 at once."""

    def __init__(self, app: ASGIApp, limit: int, table: ProtocolTable, retry_after: int = 1,
                 max_body_bytes: int | None = None, body_timeout: float | None = None,
                 keys: KeyRing | None = None, per_key: int | None = None,
                 shared: SharedSlots | None = None) -> None:
        self.app, self.limit, self.table, self.retry_after = app, limit, table, retry_after
        self.shared = shared  # with redis_url: a key's share is held across replicas
        self.max_body_bytes, self.body_timeout = max_body_bytes, body_timeout
        self.keys = keys
        self.per_key = per_key if per_key is not None else max(1, limit // 2)
        self.in_flight = 0
        self.by_key: dict[bytes, int] = {}  # requests in flight per presented key (only keys with some)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.table.limited(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.keys is not None and key_refused(self.keys, scope_key(scope)) is not None:
            await self.app(scope, receive, send)  # its 401 comes before the body is read, slot-free
            return
        if self.body_timeout is not None:
            try:
                replay = await self._body_first(scope, receive)
            except ProxyError as error:
                await self._answer(scope, receive, send, error)
                return
            if replay is None:  # the client left before its body was complete: nobody to answer
                return
            receive = replay
        if self.limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self._refuse(scope, receive, send)
            return
        key = scope_key(scope) if self.keys is not None and self.keys.client_required() else None
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
        """The whole body, read before the request takes a slot; a receive that hands it to the app (None:
        the client left first)."""
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
        scope[BODY] = body  # routes/chat.read_body takes it from here (no replay of the receive)
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
        if extra is None:  # a refused body: the connection may still hold the rest of it (retry as errors says:
            # a 413 would fail again, a 408 may not, so the SDK's own rule decides that one)
            extra = {**retry_headers(error), "connection": "close"}
        response = JsonResponse(self.table.error_body(scope["path"], error), status_code=error.status, headers=extra)
        await response(scope, receive, send)
