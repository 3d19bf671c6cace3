"""The proxy's own checks run beside the client's rounds (upstreams/lesson_checks.py): one per pair at a time, a
failure logged with its pair, every check still running cancelled when the server stops."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sanctum_proxy.upstreams.auto_mode import ModeBook
from sanctum_proxy.upstreams.capabilities import CapabilityBook
from sanctum_proxy.upstreams.lesson_checks import Lessons, _spawn
from tests.polling import wait_until_async


async def test_a_failing_check_is_logged_with_its_pair_and_its_place_freed(caplog: pytest.LogCaptureFixture):
    checking: dict[object, asyncio.Task[None]] = {}

    async def broken() -> None:
        raise RuntimeError("a bug in a check")

    with caplog.at_level(logging.ERROR, logger="sanctum_proxy"):
        _spawn(checking, ("u", "m"), broken())
        await wait_until_async(lambda: not checking, 5, "the check to end")
    (record,) = [r for r in caplog.records if "check" in r.getMessage()]
    assert "('u', 'm')" in record.getMessage() and record.exc_info is not None


async def test_a_second_check_for_a_pair_waits_for_none_and_leaves_no_coroutine_behind():
    checking: dict[object, asyncio.Task[None]] = {}
    release = asyncio.Event()
    ran: list[str] = []

    async def check(name: str) -> None:
        ran.append(name)
        await release.wait()

    _spawn(checking, ("u", "m"), check("first"))
    second = check("second")
    _spawn(checking, ("u", "m"), second)  # closed, not left unawaited
    assert second.cr_frame is None
    await asyncio.sleep(0)
    release.set()
    await wait_until_async(lambda: not checking, 5, "the first check to end")
    assert ran == ["first"]


async def test_the_checks_still_running_are_cancelled_when_the_server_stops():
    lessons = Lessons(ModeBook(), CapabilityBook(), timeout=1.0)
    never = asyncio.Event()
    _spawn(lessons.modes.checking, ("u", "m"), never.wait())
    task = lessons.modes.checking[("u", "m")]
    await lessons.aclose()
    assert task.cancelled() and not lessons.modes.checking
