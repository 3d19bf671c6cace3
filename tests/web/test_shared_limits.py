"""A client key's share and the probe rate where `redis_url` is set but Redis does not answer: each process
holds them alone (fail open to per-process limits) and says so once. With a real redis-server the same
limits hold across two proxy processes (tests/state/test_replicated.py)."""

from __future__ import annotations

import logging
import threading

import httpx
import pytest

from sanctum_proxy.state.replicated import SharedState
from sanctum_proxy.upstreams.capabilities import UNKNOWN, CapabilityBook
from tests.fakes.upstream import Step, completion
from tests.polling import wait_until

GONE = "redis://127.0.0.1:1/0"  # nothing listens on port 1
KEY = {"Authorization": "Bearer sk-tenant"}
ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_without_redis_a_keys_share_is_held_per_process_and_logged(make_proxy, fake, caplog):
    caplog.set_level(logging.WARNING, "sanctum_proxy.shared")
    proxy = make_proxy(api_keys=["sk-tenant"], max_concurrent_per_key=1, redis_url=GONE)
    fake[0].push(Step(body=completion("slow"), delay=1.0))
    first: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: first.append(
        httpx.post(proxy + "/v1/chat/completions", json=ASK, headers=KEY, timeout=20)))
    worker.start()
    wait_until(lambda: fake[0].requests, 10, "the first request upstream")
    second = httpx.post(proxy + "/v1/chat/completions", json=ASK, headers=KEY, timeout=20)
    worker.join(20)
    assert first[0].status_code == 200  # fail open: Redis gone, the request is still answered
    assert second.status_code == 429 and "per client key per proxy process" in second.json()["error"]["message"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shared limits:")]
    assert len(lines) == 1 and "each process holds its own limits" in lines[0]
    assert httpx.post(proxy + "/v1/chat/completions", json=ASK, headers=KEY, timeout=20).status_code == 200


async def test_without_redis_the_probe_rate_is_this_processes_own():
    shared = SharedState(GONE, timeout=0.2)
    await shared.start()
    book = CapabilityBook(probes_per_minute=1, shared=shared)
    asked: list[str] = []

    def ask(model: str):  # type: ignore[no-untyped-def]
        async def probe():  # type: ignore[no-untyped-def]
            asked.append(model)
            return UNKNOWN
        return probe

    try:
        await book.get("u", "a", ask("a"))
        await book.get("u", "b", ask("b"))
    finally:
        await shared.aclose()
    assert asked == ["a"] and shared.limits_local


@pytest.mark.parametrize("limit", [1, 3])
async def test_without_redis_slots_and_tokens_answer_none(limit):
    shared = SharedState(GONE, timeout=0.2)
    await shared.start()
    try:
        assert await shared.take_slot(b"sk-x", limit) is None
        assert await shared.take_token("probes", limit) is None
    finally:
        await shared.aclose()
