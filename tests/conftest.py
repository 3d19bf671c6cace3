"""Real servers on loopback: the scripted fake upstream and the proxy in front of it (uvicorn in threads)."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, settings

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from tests.fakes.ollama import FakeOllama
from tests.fakes.upstream import FakeUpstream
from tests.polling import wait_until

# Proxies started without make_proxy (and the CLI in subprocesses) would store traces in the user's own
# $XDG_STATE_HOME: the suite gets a state directory of its own, gone with the run.
_STATE = tempfile.TemporaryDirectory(prefix="sanctum-tests-state-")
os.environ["XDG_STATE_HOME"] = _STATE.name

# Hypothesis budgets: `ci` (default) keeps the suite fast on 2 cores and the same on every run (a finding fails
# the run that made it, not a later CI); `long` is the random fuzzing run
# (HYPOTHESIS_PROFILE=long python -m pytest tests/test_fuzz_*.py). Tests with their own @settings keep their budget.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=_QUIET, derandomize=True)
settings.register_profile("long", max_examples=3_000, deadline=None, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class ServerThread:
    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        wait_until(lambda: self.server.started, 10, "the server to start", every=0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def fake() -> Iterator[tuple[FakeUpstream, str]]:
    upstream = FakeUpstream()
    with ServerThread(upstream.app()) as server:
        yield upstream, server.url


@pytest.fixture
def fake_ollama() -> Iterator[tuple[FakeOllama, str]]:
    """The scripted fake Ollama (tests/fakes/ollama.py) on loopback: (the fake, its root URL)."""
    upstream = FakeOllama()
    with ServerThread(upstream.app()) as server:
        yield upstream, server.url


@pytest.fixture
def make_proxy(fake: tuple[FakeUpstream, str]) -> Iterator[Any]:
    servers: list[ServerThread] = []

    def start(**flags: Any) -> str:
        flags.setdefault("upstream", fake[1] + "/v1")
        flags.setdefault("traces_path", ":memory:")  # never the user's own trace file
        server = ServerThread(create_app(load_settings(flags))).__enter__()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def proxy(make_proxy: Any) -> str:
    return str(make_proxy())


@pytest.fixture
def client(proxy: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy, timeout=20) as c:
        yield c
