"""Replicas share auto-mode decisions through a real redis-server on loopback (skipped where there is none).

The proxies are real processes started with the image's entrypoint (`sanctum-proxy`, configured by
SANCTUM_* env vars as in the Dockerfile), in front of one scripted fake upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from sanctum_proxy.state.replicated import SharedState
from sanctum_proxy.upstreams.auto_mode import PARSE_FAILURES, ModeBook
from sanctum_proxy.upstreams.capabilities import Capabilities, CapabilityBook
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, completion
from tests.polling import wait_until, wait_until_async

REDIS = shutil.which("redis-server")
NO_REDIS = "redis-server is not installed (apt-get install redis-server)"
needs_redis = pytest.mark.skipif(REDIS is None, reason=NO_REDIS)
SCRIPT = Path(sys.executable).with_name("sanctum-proxy")  # the Dockerfile's ENTRYPOINT
ENTRYPOINT = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "sanctum_proxy"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = {"model": "m", "messages": [{"role": "user", "content": "weather in Oslo?"}], "tools": [WEATHER]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A redis-server on a free loopback port, and its URL."""
    assert REDIS is not None
    port = free_port()
    command = [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(directory)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def pings() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    try:
        wait_until(pings, what="redis-server")
        yield server, f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if REDIS is None:
        pytest.skip(NO_REDIS)
    with redis_server(tmp_path) as (_, url):
        yield url


@pytest.fixture
def replicas(fake: Any) -> Iterator[Callable[..., str]]:
    """Start `sanctum-proxy` processes as the container does: env vars only."""
    started: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str] | None = None, **settings: Any) -> str:
        port = free_port()
        env = {**os.environ, "SANCTUM_HOST": "127.0.0.1", "SANCTUM_PORT": str(port),
               "SANCTUM_UPSTREAM": fake[1] + "/v1", "SANCTUM_PROBE_CAPABILITIES": "false",
               "SANCTUM_TRACES_PATH": ":memory:", "SANCTUM_LOG_LEVEL": "warning", **(env or {})}
        env.update({f"SANCTUM_{k.upper()}": str(v) for k, v in settings.items()})
        started.append(subprocess.Popen(ENTRYPOINT, env=env, stdout=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{url}/healthz") or started[-1].poll() is not None, 30, "sanctum-proxy")
        assert started[-1].poll() is None, "sanctum-proxy exited at start"
        return url

    yield start
    for process in started:
        process.terminate()
    for process in started:
        process.wait(10)


def modes(proxy: str) -> list[tuple[str, str, str]]:
    rows = httpx.get(f"{proxy}/sanctum/status", timeout=5).json()["modes"]
    return [(row["upstream"], row["model"], row["mode"]) for row in rows]


@needs_redis
def test_a_flip_in_one_replica_is_seen_by_the_other(fake, redis_url, replicas):
    upstream, url = fake
    first, second = replicas(redis_url=redis_url), replicas(redis_url=redis_url)
    assert httpx.get(f"{second}/sanctum/status").json()["shared_state"]["connected"] is True
    upstream.push(Step(*LLAMA_NO_JINJA), Step(body=completion("Checking.")))
    upstream.checks.append(Step(*LLAMA_NO_JINJA))
    r = httpx.post(f"{first}/v1/chat/completions", json=ASK, timeout=20)
    assert r.json()["sanctum"]["mode"] == "prompted"
    flipped = [(url + "/v1", "m", "prompted")]
    wait_until(lambda: modes(second) == flipped, 5, "the second replica to see the flip")

    upstream.push(Step(body=completion("Checking again.")))
    r = httpx.post(f"{second}/v1/chat/completions", json=ASK, timeout=20)
    assert r.json()["sanctum"]["mode"] == "prompted" and r.json()["sanctum"]["rounds"] == 1
    assert "tools" not in upstream.requests[-1]  # the second replica never offered tools natively

    late = replicas(redis_url=redis_url)  # a replica started after the flip loads it at start
    assert modes(late) == flipped


def test_without_redis_url_each_replica_decides_alone(fake, replicas):
    upstream, _ = fake
    first, second = replicas(), replicas()
    upstream.push(Step(*LLAMA_NO_JINJA), Step(body=completion("Checking.")))
    upstream.checks.append(Step(*LLAMA_NO_JINJA))
    httpx.post(f"{first}/v1/chat/completions", json=ASK, timeout=20)
    wait_until(lambda: modes(first), 5, "the first replica's flip")
    assert len(modes(first)) == 1 and modes(second) == []
    assert httpx.get(f"{second}/sanctum/status").json()["shared_state"] == {"backend": "memory"}


@needs_redis
async def test_tables_share_sets_deletes_and_parse_failure_counts(redis_url):
    one, two = SharedState(redis_url), SharedState(redis_url)
    books = [ModeBook(parse_failure_threshold=2, table=s.table("modes")) for s in (one, two)]
    await one.start()
    await two.start()
    try:
        books[0].settle("u", "m", "prompted", "tools_rejected")
        await wait_until_async(lambda: books[1].get("u", "m") is not None)
        assert books[1].get("u", "m").reason == "tools_rejected"  # type: ignore[union-attr]

        assert books[0].parse_failure("u", "n") is False
        await wait_until_async(lambda: books[1].get("u", "n") is not None)
        assert books[1].parse_failure("u", "n") is True  # the second failure, counted on another replica
        books[1].settle("u", "n", "prompted", PARSE_FAILURES)  # once the proxy's own request confirmed it
        await wait_until_async(lambda: getattr(books[0].get("u", "n"), "mode", None) == "prompted")

        one.table("modes").delete(next(k for k, _ in one.table("modes").items()))
        await wait_until_async(lambda: len(two.table("modes").items()) == 1)
    finally:
        await one.aclose()
        await two.aclose()


@needs_redis
async def test_capability_probe_results_are_shared(redis_url):
    one, two = SharedState(redis_url), SharedState(redis_url)
    books = [CapabilityBook(table=s.table("capabilities")) for s in (one, two)]
    await one.start()
    await two.start()
    try:
        said = Capabilities(tools=False, json_schema=True, server="llama.cpp", source="/props")
        assert await books[0].get("u", "m", lambda: asyncio.sleep(0, said)) == said

        async def never() -> Capabilities:
            raise AssertionError("the second replica probed again")

        await wait_until_async(lambda: books[1].cached("u", "m") is not None)
        assert await books[1].get("u", "m", never) == said
        assert books[1].snapshot() == [{"upstream": "u", "model": "m", **said.to_json()}]
    finally:
        await one.aclose()
        await two.aclose()


async def test_unreachable_redis_does_not_stop_the_proxy_deciding_locally():
    state = SharedState(f"redis://127.0.0.1:{free_port()}/0", timeout=0.3)
    book = ModeBook(table=state.table("modes"))
    started = time.monotonic()
    await state.start()
    try:
        assert time.monotonic() - started < 2
        book.settle("u", "m", "prompted", "tools_rejected")
        assert book.get("u", "m") is not None and state.snapshot()["connected"] is False
    finally:
        await state.aclose()


# --- several worker processes behind one port (--workers) ----------------------------------------------------


def requests_by_process(metrics_dir: Path) -> dict[str, float]:
    """sanctum_requests_total per worker process, read from prometheus_client's file of each."""
    from prometheus_client.mmap_dict import MmapedDict

    counts: dict[str, float] = {}
    for path in metrics_dir.glob("counter_*.db"):
        pid = path.stem.removeprefix("counter_")
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
            if key.startswith('["sanctum_requests"'):
                counts[pid] = counts.get(pid, 0) + value
    return counts


def metric_total(proxy: str, name: str) -> float:
    text = httpx.get(f"{proxy}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_workers_share_the_port_the_metrics_and_the_trace_file(fake, replicas, tmp_path):
    upstream, _ = fake
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    proxy = replicas(workers=2, traces_path=str(tmp_path / "traces.sqlite3"),
                     env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    served = 0

    def one() -> None:  # a connection of its own each time: the kernel hands it to either process
        assert httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20).status_code == 200

    deadline = time.monotonic() + 60  # under load the second worker may still be starting: time, not a count
    while len(requests_by_process(metrics_dir)) < 2 and time.monotonic() < deadline:
        upstream.push(*[Step(body=completion("hi"), delay=0.05) for _ in range(8)])
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: one(), range(8)))
        served += 8
        time.sleep(0.1)  # counters are fed by each process' trace writer
    assert len(requests_by_process(metrics_dir)) == 2, "one process answered everything"
    # Whichever process answers /metrics counts the requests of both.
    wait_until(lambda: metric_total(proxy, "sanctum_requests_total") == served, 30, "the summed counter")
    for _ in range(6):
        assert metric_total(proxy, "sanctum_requests_total") == served
    # Both write the one trace file.
    listed = lambda: httpx.get(f"{proxy}/sanctum/traces", params={"limit": 200}, timeout=5).json()["data"]  # noqa: E731
    wait_until(lambda: len(listed()) == served, 30, "every trace in the shared file")


@needs_redis
def test_two_processes_sharing_redis_hold_one_key_to_its_share(fake, redis_url, replicas):
    upstream, _ = fake
    limited = {"redis_url": redis_url, "api_keys": '["sk-tenant"]', "max_concurrent_per_key": 1}
    first, second = replicas(**limited), replicas(**limited)
    key = {"Authorization": "Bearer sk-tenant"}
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    upstream.push(Step(body=completion("slow"), delay=1.5))
    held: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: held.append(
        httpx.post(f"{first}/v1/chat/completions", json=plain, headers=key, timeout=20)))
    worker.start()
    wait_until(lambda: upstream.requests, 10, "the first replica's request upstream")
    refused = httpx.post(f"{second}/v1/chat/completions", json=plain, headers=key, timeout=20)
    worker.join(20)
    assert held[0].status_code == 200
    assert refused.status_code == 429 and "across replicas" in refused.json()["error"]["message"]
    # the slot was given back: the other replica takes the key again
    wait_until(lambda: httpx.post(f"{second}/v1/chat/completions", json=plain, headers=key,
                                  timeout=20).status_code == 200, 5, "the slot given back")


@needs_redis
async def test_the_probe_rate_is_one_bucket_for_every_replica(redis_url):
    one, two = SharedState(redis_url), SharedState(redis_url)
    await one.start()
    await two.start()
    try:
        taken = [await state.take_token("probes", 3) for state in (one, two, one, two)]
        slots = [await state.take_slot(b"sk-a", 2) for state in (one, two, one)]
    finally:
        await one.aclose()
        await two.aclose()
    assert taken == [True, True, True, False]
    assert isinstance(slots[0], str) and isinstance(slots[1], str) and slots[2] is False


@needs_redis
async def test_when_redis_goes_limits_fall_back_to_each_process_and_say_so(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "sanctum_proxy.shared")
    with redis_server(tmp_path) as (server, url):
        shared = SharedState(url, timeout=0.5)
        await shared.start()
        try:
            assert isinstance(await shared.take_slot(b"sk-a", 1), str)
            assert await shared.take_slot(b"sk-a", 1) is False  # held cluster-wide
            server.terminate()
            server.wait(10)
            assert await shared.take_slot(b"sk-a", 1) is None  # the caller's own count decides
            assert await shared.take_token("probes", 5) is None
        finally:
            await shared.aclose()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shared limits:")]
    assert len(said) == 1 and "each process holds its own limits" in said[0]
