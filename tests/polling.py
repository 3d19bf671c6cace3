"""Waiting in a test for something the test caused: ask again until it holds, or fail naming what was awaited.

The one poll-until-deadline loop of the suite (a sleep of a guessed length would be flaky or slow)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], seconds: float = 10.0, what: str = "the condition", *, every: float = 0.05,
               ignoring: tuple[type[BaseException], ...] = (), detail: Callable[[], str] | None = None) -> T:
    """The first truthy value of `check()`, asked every `every` seconds; an AssertionError naming `what` (and
    `detail()`, such as a server's log) once `seconds` have passed. An exception in `ignoring` means "not yet"
    (a server still starting refuses connections)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
        except ignoring:
            pass
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            more = f":\n{detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {seconds:g} s waiting for {what}{more}")
        time.sleep(every)


async def wait_until_async(check: Callable[[], T], seconds: float = 5.0, what: str = "the condition", *,
                           every: float = 0.02) -> T:
    """`wait_until` inside an event loop: it sleeps with asyncio, so the loop's own tasks go on meanwhile."""
    deadline = time.monotonic() + seconds
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")
        await asyncio.sleep(every)
    return value
