"""One named pool of identical model servers: its connections, failover and health checks.

Why aiohttp: bench/results/design_costs.md; connection reuse: docs/upstream-connections.md.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import yarl

from sanctum_proxy.config import redacted_url
from sanctum_proxy.state import telemetry
from sanctum_proxy.upstreams import affinity, ollama_wire
from sanctum_proxy.upstreams.redaction import KeyMask

CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Closed before any answer byte: safe to send again.
STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
KEEPALIVE_SECONDS = 4.0  # under the 5 s servers keep an idle one
log = logging.getLogger("sanctum_proxy.upstream")


@dataclass
class Backend:
    """One server of a pool."""

    base_url: str
    healthy: bool = True
    checked_at: float | None = None
    ollama: bool | None = None  # None: not asked yet (ollama_wire.is_ollama)
    asking: asyncio.Future[bool | None] | None = field(default=None, repr=False, compare=False)
    shown_url: str = field(init=False, repr=False, compare=False)  # without credentials: for logs and status

    def __post_init__(self) -> None:
        self.shown_url = redacted_url(self.base_url)

    @property
    def root_url(self) -> str:
        """The base URL without its trailing /v1."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    def to_json(self) -> dict[str, Any]:
        shown = {"url": self.shown_url, "healthy": self.healthy, "checked_at": self.checked_at}
        return {**shown, "ollama": self.ollama} if self.ollama is not None else shown


@dataclass(frozen=True)
class Limits:

    connect_timeout: float
    read_timeout: float
    max_answer_bytes: int


class Upstream:
    """One `[[upstreams]]` entry, or the single `upstream` setting."""

    def __init__(self, urls: list[str], key: str | None, limits: Limits, *, name: str = "default",
                 ollama_native: bool = False) -> None:
        self.name = name
        self.ollama_native = ollama_native
        self.backends = [Backend(url) for url in urls]
        self._key = key
        self.mask = KeyMask(key) if key else None
        self._turn = itertools.count()
        self._check_timeout = min(limits.connect_timeout, 5.0)
        self.read_timeout = limits.read_timeout
        self.max_answer = limits.max_answer_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout,
                                              sock_read=limits.read_timeout)
        # one deadline per round instead (chat_rounds.chat)
        self.round_timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        self._stream_session: aiohttp.ClientSession | None = None
        self.resent = 0  # requests sent again on a fresh connection
        self.streams_spend: str | None = None  # why streamed rounds get connections of their own; None: pooled

    def _new_session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            cookie_jar=aiohttp.DummyCookieJar(),  # one client's cookies never reach another's request
            auto_decompress=False,  # pass-through relays the bytes as they came
            skip_auto_headers=("Accept-Encoding",),
        )

    @property
    def client(self) -> aiohttp.ClientSession:
        """Made on first use: aiohttp wants a running event loop."""
        if self._session is None:
            self._session = self._new_session(aiohttp.TCPConnector(
                limit=1000, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS))
        return self._session

    @property
    def stream_client(self) -> aiohttp.ClientSession:
        """Only streams use it: a connection closed under a request shows the upstream drops them."""
        if self._stream_session is None:
            self._stream_session = self._new_session(aiohttp.TCPConnector(
                limit=1000, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS))
        return self._stream_session

    def learn_streams_spend(self, why: str) -> None:
        if self.streams_spend is None:
            self.streams_spend = why
            log.info("upstream %s: streamed rounds get connections of their own (%s)", self.name, why)

    @property
    def fresh_client(self) -> aiohttp.ClientSession:
        """A new connection per request, closed after the answer."""
        if self._fresh_session is None:
            self._fresh_session = self._new_session(aiohttp.TCPConnector(limit=0, force_close=True))
        return self._fresh_session

    async def aclose(self) -> None:
        for session in (self._session, self._fresh_session, self._stream_session):
            if session is not None:
                await session.close()

    @property
    def base_url(self) -> str:
        return next((b for b in self.backends if b.healthy), self.backends[0]).base_url

    @property
    def root_url(self) -> str:
        return next((b for b in self.backends if b.healthy), self.backends[0]).root_url

    def candidates(self) -> list[Backend]:
        """Healthy backends first; in the session's order, else round robin."""
        if len(self.backends) == 1:
            return self.backends
        session = affinity.SESSION.get()
        if session is not None:
            ordered = affinity.ranked(session, self.backends)
        else:
            turn = next(self._turn) % len(self.backends)
            ordered = self.backends[turn:] + self.backends[:turn]
        return [b for b in ordered if b.healthy] + [b for b in ordered if not b.healthy]

    async def open(self, method: str, path: str, *, stream: bool = False, root: bool = False,
                   route: ollama_wire.Route | None = None, **kwargs: Any) -> aiohttp.ClientResponse:
        """Send to the first backend that takes the connection (the caller runs `done`)."""
        failure: Exception | None = None
        for backend in self.candidates():
            url = f"{backend.root_url if root else backend.base_url}{path}"
            if route is not None:
                url, kwargs["data"] = await route(backend)
            try:
                response = await self._request(method, url, stream, **kwargs)
            except CONNECT_ERRORS as exc:
                if backend.healthy:
                    log.warning("upstream %s: backend %s unreachable (%s), trying the next one",
                                self.name, backend.shown_url, type(exc).__name__)
                backend.healthy, failure = False, exc
                continue
            backend.healthy = True
            return response
        assert failure is not None
        raise failure

    async def _request(self, method: str, url: str, stream: bool, **kwargs: Any) -> aiohttp.ClientResponse:
        """One request, sent once more on a fresh connection if its own closed before any answer byte."""
        kwargs.setdefault("allow_redirects", False)  # a redirect is the upstream's answer, never followed
        url = _with_credentials(url, kwargs)
        session = self.client
        if stream:
            session = self.fresh_client if self.streams_spend else self.stream_client
        try:
            response = await session.request(method, url, **kwargs)
        except CONNECT_ERRORS:
            raise
        except STALE_ERRORS as exc:
            if isinstance(kwargs.get("data"), AsyncIterator):
                raise  # a streamed request body is spent
            if session is self._stream_session:
                self.learn_streams_spend("a connection that carried an event stream was closed under the next "
                                         f"request ({type(exc).__name__})")
            self.resent += 1
            log.info("upstream %s: connection closed before an answer (%s); sending again on a fresh one",
                     self.name, type(exc).__name__)
            response = await self.fresh_client.request(method, url, **kwargs)
        protocol = response.connection.protocol if response.connection is not None else None
        if session is self.client and response.content_type == "text/event-stream" and protocol is not None:
            protocol.force_close()  # a pass-through stream: its connection must not go back to the pool
        return response

    async def request_once(self, method: str, url: str, headers: dict[str, str]) -> aiohttp.ClientResponse:
        return await self._request(method, url, False, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=self._check_timeout))

    def headers(self, client_auth: str | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}  # so it can be masked
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        elif client_auth:
            headers["authorization"] = client_auth
        if (context := telemetry.OUTGOING.get()) is not None:  # W3C trace context
            headers.update(context)
        return headers

    async def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0,
                         client_auth: str | None = None) -> Any:
        """None when it fails in any way; `client_auth` as in `headers`."""
        try:
            async with await self._request(method, url, False, json=body, headers=self.headers(client_auth),
                                           timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                if response.status >= 300:
                    return None
                answer = orjson.loads(await response.read())
        except (TimeoutError, aiohttp.ClientError, OSError, orjson.JSONDecodeError):
            return None
        if url.endswith("/props") and isinstance(answer, dict) and (
                isinstance(answer.get("chat_template_caps"), dict) or "default_generation_settings" in answer):
            self.learn_streams_spend("llama.cpp's /props answered: llama-server closes a connection after a stream")
        return answer

    async def ready(self) -> bool:
        """Some backend answers GET /models below 500 now."""
        return any(await asyncio.gather(*(self.check(b, timeout=3.0) for b in self.backends)))

    async def check(self, backend: Backend, timeout: float | None = None) -> bool:
        kwargs: dict[str, Any] = {"headers": self.headers(), "allow_redirects": False,
                                  "timeout": aiohttp.ClientTimeout(total=timeout or self._check_timeout)}
        url = _with_credentials(f"{backend.base_url}/models", kwargs)
        try:
            async with self.client.get(url, **kwargs) as response:
                healthy = response.status < 500
        except (TimeoutError, aiohttp.ClientError, OSError):
            healthy = False
        if healthy != backend.healthy:
            log.warning("upstream %s: backend %s is %s", self.name, backend.shown_url,
                        "up" if healthy else "down")
        backend.healthy, backend.checked_at = healthy, time.time()
        return healthy

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.gather(*(self.check(b) for b in self.backends))
            await asyncio.sleep(interval)

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "backends": [b.to_json() for b in self.backends],
                "streamed_connections": "own: " + self.streams_spend if self.streams_spend else "pooled"}


def _with_credentials(url: str, kwargs: dict[str, Any]) -> str:
    """`url` without `user:password@`, sent as Basic auth unless a key is (aiohttp refuses both)."""
    if "@" not in url:
        return url
    parsed = yarl.URL(url)
    if parsed.user is None and parsed.password is None:
        return url
    headers = dict(kwargs.get("headers") or {})
    if not any(k.lower() == "authorization" for k in headers):
        headers["authorization"] = aiohttp.encode_basic_auth(parsed.user or "", parsed.password or "")
        kwargs["headers"] = headers
    return str(parsed.with_user(None))
