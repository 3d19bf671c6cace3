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
    """The result of `work`, or ClientGone (with `work` cancelled and finished) if the client leaves first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (watcher, task):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if task.cancelled() or not task.done():
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def gone_response() -> Response:
    return Response(status_code=CLIENT_GONE)
