"""Cancel work whose client disconnected (uvicorn does not)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.errors import CLIENT_GONE

T = TypeVar("T")
WATCH_AFTER = 0.05  # seconds; a faster answer is not worth a watch task


class ClientGone(Exception):
    """The client left before the answer; the work was cancelled."""


class DisconnectWatch:
    """Cancels its creating task on `http.disconnect` while armed."""

    def __init__(self, receive: Callable[[], Awaitable[Any]], after: float = WATCH_AFTER) -> None:
        self.task = asyncio.current_task()
        self.armed = True
        self.gone = False
        self.cancelled = False
        self._receive = receive
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(after, self._start)

    def _start(self) -> None:
        self._timer = None
        if self.armed:
            self._future = asyncio.ensure_future(self._wait())

    async def _wait(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a failed receive counts as a disconnect
            pass
        self.gone = True
        if self.armed and self.task is not None:
            self.cancelled = True
            self.task.cancel()

    def left(self) -> bool:
        """After a CancelledError: whether only this watch cancelled (then undone)."""
        self.stop()
        return self.cancelled and self.task is not None and self.task.uncancel() == 0

    def stop(self) -> None:
        self.armed = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._future is not None and not self._future.done():
            self._future.cancel()


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, or ClientGone with `work` cancelled if the client leaves first."""
    watch = DisconnectWatch(request.receive)
    try:
        return await work
    except asyncio.CancelledError:
        if watch.left():
            raise ClientGone from None
        raise
    finally:
        watch.stop()


def gone_response() -> Response:
    return Response(status_code=CLIENT_GONE)
