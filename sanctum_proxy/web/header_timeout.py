"""uvicorn's HTTP protocol with a deadline on the request head: a client gets `header_read_timeout` seconds
from connecting (or from the first byte of its next request on a kept-alive connection) to the end of its
headers, then the connection is closed. uvicorn has an idle timeout between requests (`timeout_keep_alive`)
but none while headers arrive, so a client sending one header byte a second (slowloris) held its connection
for ever. The body has its own deadline, `body_read_timeout` (limits.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes a connection whose request head is not complete in `seconds`."""

    seconds: float = 10.0  # set from the settings before serving (cli.py), in each worker process too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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

    def _arm(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _too_slow(self) -> None:
        self._head_deadline = None
        if not self.transport.is_closing():
            self.transport.close()
