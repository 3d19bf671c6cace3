"""Work that stops when its client goes away.

A non-streaming answer (and a stream before its headers) may wait minutes for the upstream; uvicorn does not
cancel a handler whose client disconnected, so without this the upstream call would run to its end for
nobody. Once the body has been read, the next ASGI message is `http.disconnect`: waiting for it beside the
work tells when to cancel.

The wait starts WATCH_AFTER seconds into the work, not at once: a task of its own, started, cancelled and
reaped, costs three turns of the event loop, about a tenth of what a fast answer costs the proxy in all
(bench/results/profile.md, Round 5), while an answer that comes within WATCH_AFTER has nothing worth
cancelling; a client that leaves is noticed at most WATCH_AFTER later than it would be otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.errors import CLIENT_GONE

T = TypeVar("T")
WATCH_AFTER = 0.05  # seconds of work before the client's disconnect is watched for


class ClientGone(Exception):
    """The client disconnected before the answer was ready; the work was cancelled."""


class DisconnectWatch:
    """Waits for `http.disconnect` (from WATCH_AFTER seconds on) and, while armed, cancels the task that
    created it. `left()` after a CancelledError says whether the cancel was this watch's alone."""

    def __init__(self, receive: Callable[[], Awaitable[Any]], after: float = WATCH_AFTER) -> None:
        self.task = asyncio.current_task()
        self.armed = True
        self.gone = False  # the client disconnected
        self.cancelled = False  # ... and the task was cancelled for it
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
        except Exception:  # a receive that fails ends the work as a disconnect does
            pass
        self.gone = True
        if self.armed and self.task is not None:
            self.cancelled = True
            self.task.cancel()

    def left(self) -> bool:
        """After a CancelledError: whether it was this watch's alone (the client left); then it is undone."""
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
    """The result of `work`, or ClientGone (with `work` cancelled and finished) if the client leaves first.
    `work` runs in the caller's task."""
    watch = DisconnectWatch(request.receive)
    try:
        return await work
    except asyncio.CancelledError:
        if watch.left():  # the watch's cancel only: the client left
            raise ClientGone from None
        raise
    finally:
        watch.stop()


def gone_response() -> Response:
    return Response(status_code=CLIENT_GONE)
