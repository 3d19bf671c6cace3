"""routes/disconnect.py: the watch for a client that leaves, started WATCH_AFTER into the work."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sanctum_proxy.routes.disconnect import ClientGone, DisconnectWatch, unless_disconnected


class Receive:
    """An ASGI receive after the body: waits until `leave()`, then says the client disconnected."""

    def __init__(self) -> None:
        self.calls = 0
        self.gone = asyncio.Event()

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}


class Request:  # what unless_disconnected reads of a Starlette request
    def __init__(self, receive: Receive) -> None:
        self.receive = receive


def test_fast_work_never_starts_the_watch() -> None:
    async def main() -> tuple[str, int, int]:
        receive = Receive()
        before = len(asyncio.all_tasks())
        result = await unless_disconnected(Request(receive), asyncio.sleep(0.001, "done"))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)  # past WATCH_AFTER: a timer left armed would start the watch now
        return result, receive.calls, len(asyncio.all_tasks()) - before

    assert asyncio.run(main()) == ("done", 0, 0)


def test_a_client_that_leaves_during_slow_work_cancels_it() -> None:
    cancelled = asyncio.Event()

    async def slow() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    async def main() -> None:
        receive = Receive()
        asyncio.get_running_loop().call_later(0.1, receive.gone.set)
        with pytest.raises(ClientGone):
            await asyncio.wait_for(unless_disconnected(Request(receive), slow()), 5)  # type: ignore[arg-type]
        assert cancelled.is_set() and receive.calls == 1

    asyncio.run(main())


def test_a_cancel_from_elsewhere_stands() -> None:
    async def main() -> None:
        receive = Receive()
        work = asyncio.ensure_future(unless_disconnected(Request(receive), asyncio.sleep(30)))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)  # the watch is waiting by now
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work

    asyncio.run(main())


def test_a_stopped_watch_never_cancels() -> None:
    async def main() -> bool:
        receive = Receive()
        receive.gone.set()  # the client is already gone
        watch = DisconnectWatch(receive, after=0.01)
        watch.stop()
        await asyncio.sleep(0.05)
        return watch.cancelled or receive.calls > 0

    assert asyncio.run(main()) is False


def test_the_watch_starts_after_its_delay() -> None:
    async def main() -> tuple[int, int, bool]:
        receive = Receive()
        watch = DisconnectWatch(receive, after=0.05)
        await asyncio.sleep(0.01)
        early = receive.calls
        await asyncio.sleep(0.1)
        late = receive.calls
        receive.gone.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(1)  # the watch cancels this task
        return early, late, watch.left()

    assert asyncio.run(main()) == (0, 1, True)
