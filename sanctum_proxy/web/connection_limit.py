"""`max_connections`: requests in flight per process, refused in the protocol's shape (not uvicorn's plain text).

Bodies still arriving count per client (`owner`), at most a BODY_SHARE-th of the limit each; as many more wait
while that client's bodies keep arriving.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter, deque
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sanctum_proxy.errors import Overloaded
from sanctum_proxy.web.auth import presented_key
from sanctum_proxy.web.client_protocols import ProtocolTable
from sanctum_proxy.web.json_response import JsonResponse

ALWAYS_ANSWERED = frozenset({"/healthz", "/metrics"})
BODY_SHARE = 4  # of max_connections, the most one client's bodies still arriving may hold
LATE_BODY = 1.0  # seconds between two arrivals: slower is slow bodies, not a burst


def owner(scope: Scope | None, address: Any, keyed: bool) -> bytes:
    """The key where keys are checked, else the address."""
    key = presented_key(scope) if keyed and scope is not None else b""
    if key:
        return b"key:" + key
    host = address[0] if isinstance(address, (tuple, list)) and address else ""
    return b"address:" + str(host).encode()


def body_share(limit: int) -> int:
    return max(2, limit // BODY_SHARE)


def default_max_connections() -> int:
    """Half the open-file limit: the rest is for the upstreams, traces and logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(64, min(65536, soft // 2))


class ConnectionLimit:
    """ASGI middleware: a 503 past `limit`, but for health and metrics."""

    def __init__(self, app: ASGIApp, limit: int, table: ProtocolTable, retry_after: int = 1,
                 keyed: bool = False) -> None:
        self.app, self.limit, self.table, self.retry_after = app, limit, table, retry_after
        self.keyed, self.share = keyed, body_share(limit)
        self.in_flight = 0
        self.arriving: Counter[bytes] = Counter()  # per owner, requests whose body has not all arrived
        self.turns: dict[bytes, deque[asyncio.Future[None]]] = {}  # per owner, requests waiting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] not in ALWAYS_ANSWERED:
            if self.in_flight >= self.limit:
                await self._refuse(scope, receive, send, f"Too many connections in use (limit {self.limit} per "
                                                         "proxy process, max_connections)")
                return
            who = owner(scope, scope.get("client"), self.keyed)
            if self.arriving[who] >= self.share and not await self._place(who):
                await self._refuse(scope, receive, send, "Too many request bodies still arriving from this client "
                                                         f"(at most {self.share}, a share of max_connections, and as "
                                                         f"many waiting {LATE_BODY:g} s for a place)")
                return
        else:
            who = b""
        self.in_flight += 1
        self.arriving[who] += 1
        arrived = False

        async def counted() -> Message:
            nonlocal arrived
            message = await receive()
            if not arrived and not message.get("more_body", False):
                arrived = True
                self._arrived(who)
            return message

        try:
            await self.app(scope, counted, send)
        finally:
            self.in_flight -= 1
            if not arrived:
                self._arrived(who)

    async def _place(self, who: bytes) -> bool:
        """Whether a place among `who`'s arriving bodies frees up within LATE_BODY."""
        while self.arriving[who] >= self.share:
            waiting = self.turns.setdefault(who, deque())
            if len(waiting) >= self.share:
                return False
            turn = asyncio.get_running_loop().create_future()
            waiting.append(turn)
            try:
                await asyncio.wait_for(turn, LATE_BODY)
            except TimeoutError:
                return False
            finally:
                self._leave(who, turn)
        return True

    def _leave(self, who: bytes, turn: asyncio.Future[None]) -> None:
        waiting = self.turns.get(who)
        if waiting is not None and turn in waiting:
            waiting.remove(turn)
        if not waiting:
            self.turns.pop(who, None)

    def _arrived(self, who: bytes) -> None:
        self.arriving[who] -= 1
        if self.arriving[who] <= 0:
            del self.arriving[who]
        if self.turns:
            waiting = self.turns.get(who)
            while waiting:
                turn = waiting.popleft()
                if not turn.done():
                    turn.set_result(None)
                    break

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        error = Overloaded(f"{why}; retry after {self.retry_after} s")
        headers = {"retry-after": str(self.retry_after), "x-should-retry": "true", "connection": "close"}
        await JsonResponse(self.table.error_body(scope["path"], error), status_code=error.status,
                           headers=headers)(scope, receive, send)
