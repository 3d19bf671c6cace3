"""uvicorn's HTTP protocols (httptools and h11) with a deadline on the request head and room kept for new
connections.

Deadline: a client gets `header_read_timeout` seconds from connecting (or from the first byte of its next request
on a kept-alive connection) to the end of its headers, then the connection is closed. uvicorn has an idle timeout
between requests (`timeout_keep_alive`) but none while headers arrive, so a client sending one header byte a
second (slowloris) held its connection for ever. The body has its own deadline, `body_read_timeout` (limits.py).

Room: uvicorn's `limit_concurrency` (the setting `max_connections`) bounds requests, but every slow connection
still holds a file descriptor, and at the process's open-file limit nothing is accepted at all (1,007 slowloris
connections at a limit of 1,024 took /healthz down). So when a new connection would reach the limit, the oldest
connection still waiting for its request head is closed to make room: connections that send nothing useful
cannot crowd out those that do. uvicorn's own check (a plain-text 503 past the limit) is taken off: the app
refuses requests past it in the protocol's error shape (web/connection_limit.py).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

# Per server: its connections still waiting for a request head, oldest first (dict order).
_WAITING: weakref.WeakKeyDictionary[ServerState, dict[HeadDeadline, None]] = weakref.WeakKeyDictionary()


class HeadDeadline:
    """What both protocols share: the head deadline and making room. Mixed into a uvicorn protocol class."""

    seconds: float = 10.0  # set from the settings before serving (cli.py), in each worker process too
    server_state: ServerState
    connections: set[Any]
    limit_concurrency: int | None
    room_limit: int | None = None  # uvicorn's limit_concurrency, kept here for making room
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _head_deadline: asyncio.TimerHandle | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn would answer past its limit itself, in plain text: the app does it (web/connection_limit.py)
        self.room_limit, self.limit_concurrency = self.limit_concurrency, None

    def _waiting(self) -> dict[HeadDeadline, None]:
        return _WAITING.setdefault(self.server_state, {})

    def _make_room(self) -> None:
        """At the connection limit: close the oldest connections still waiting for a head (not this one)."""
        limit = self.room_limit
        if limit is None:
            return
        waiting = self._waiting()
        excess = len(self.connections) - limit + 1
        for other in list(waiting)[:max(0, excess)]:
            if other is not self:
                other._too_slow()

    def _arm(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.seconds, self._too_slow)
            self._waiting()[self] = None

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        self._waiting().pop(self, None)

    def _too_slow(self) -> None:
        self._disarm()
        self.connections.discard(self)  # counted out now: its connection_lost may come after a new request's head
        if not self.transport.is_closing():
            self.transport.close()


class H11HeaderTimeoutProtocol(HeadDeadline, H11Protocol):
    """H11Protocol (uvicorn without httptools) with the head deadline and room kept."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._make_room()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:  # between requests: a head begins
            self._arm()
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:  # the head is in
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


HTTPTOOLS: type[asyncio.Protocol] | None = None  # HeaderTimeoutProtocol where httptools is installed
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # the h11 protocol only
    pass
else:
    class HeaderTimeoutProtocol(HeadDeadline, HttpToolsProtocol):
        """HttpToolsProtocol with the head deadline and room kept (module level: workers pickle it)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._make_room()
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    HTTPTOOLS = HeaderTimeoutProtocol


def protocol(parser: str = "auto") -> type[asyncio.Protocol]:
    """The protocol class for `parser` (auto: httptools where installed, else h11)."""
    fast = HTTPTOOLS if parser != "h11" else None
    if parser == "httptools" and fast is None:
        raise ImportError("httptools is not installed")
    return fast or H11HeaderTimeoutProtocol
