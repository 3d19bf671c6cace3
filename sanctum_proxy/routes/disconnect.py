"""Work that stops when its client goes away.

A non-streaming answer (and a stream before its headers) may wait minutes for the upstream; uvicorn does not
cancel a handler whose client disconnected, so without this the upstream call would run to its end for
nobody. Once the body has been read, the next ASGI message is `http.disconnect`: waiting for it beside the
work tells when to cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.errors import CLIENT_GONE

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was ready; the work was cancelled."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, or ClientGone (with `work` cancelled and finished) if the client leaves first.

    `work` runs in the caller's task; one watcher task waits for `http.disconnect` and cancels the caller (a
    task of its own for the work, and asyncio.wait over both, cost about as much as the rest of the route)."""
    caller = asyncio.current_task()
    assert caller is not None
    left = False

    async def watch() -> None:
        nonlocal left
        try:
            await _disconnect(request)
        except Exception:  # a receive that fails ends the work as a disconnect does
            pass
        left = True
        caller.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if left and caller.uncancel() == 0:  # the watcher's cancel only: the client left
            raise ClientGone from None
        raise
    finally:
        if not watcher.done():
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def gone_response() -> Response:
    return Response(status_code=CLIENT_GONE)
