"""One named pool of identical model servers: its connections, which backend takes a request, and its health.

`Upstream` holds the backends (base URLs) of one pool behind pooled `aiohttp.ClientSession`s (aiohttp, not httpx,
on this hot path: its C parser costs less per request; bench/results/design_costs.md). Requests go round-robin to
the healthy backends, and a conversation's rounds to one (affinity.py). A backend that refuses the connection, or
cannot be reached within connect_timeout, is marked down and the next one is tried. A request whose connection dies
before any answer byte (a kept-alive connection the server had closed) is sent once more on a fresh connection:
nothing was generated, so nothing is lost or done twice. An error after the answer's headers is the caller's.

Streamed chat rounds have a pool of their own, kept while the upstream keeps its connections after an event
stream (Ollama's Go net/http and vLLM's uvicorn do). llama-server closes the connection after a stream though its
headers say `Keep-Alive: timeout=5` (docs/upstream-connections.md). That is learned from its /props answer, or
from a stream-pool connection closed under the next request (sent again fresh, once, and remembered); from then
on every streamed round opens a connection of its own. Pooled connections are dropped after KEEPALIVE_SECONDS
idle, under the 5 s that llama-server, uvicorn and Node servers keep them. `watch()` checks every backend's
GET /models periodically and brings a recovered backend back.

Redirects are never followed. Credentials in an upstream URL are never shown or logged; they are sent as Basic
auth unless a key is sent (the key wins). The chat rounds are chat_rounds.py, pass-through is relay.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import yarl

from sanctum_proxy.config import redacted_url
from sanctum_proxy.state import telemetry
from sanctum_proxy.upstreams import affinity, ollama_wire
from sanctum_proxy.upstreams.error_mapping import too_long
from sanctum_proxy.upstreams.redaction import ByteStream, KeyMask

# Nothing was sent: safe to try another backend.
CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Sent on a connection the server had closed, and no answer byte came back: safe to send again, fresh.
STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
KEEPALIVE_SECONDS = 4.0
log = logging.getLogger("sanctum_proxy.upstream")


@dataclass
class Backend:
    """One server of a pool; `healthy` is what the last request or health check saw."""

    base_url: str
    healthy: bool = True
    checked_at: float | None = None
    ollama: bool | None = None  # its root answered GET /api/version as Ollama does (ollama_wire.py); None: not asked
    asking: asyncio.Future[bool | None] | None = field(default=None, repr=False, compare=False)

    @property
    def root_url(self) -> str:
        """The server root (the base URL without its trailing /v1), for /props, /api/show."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    def to_json(self) -> dict[str, Any]:
        shown = {"url": redacted_url(self.base_url), "healthy": self.healthy, "checked_at": self.checked_at}
        return {**shown, "ollama": self.ollama} if self.ollama is not None else shown


@dataclass(frozen=True)
class Limits:
    """What an Upstream waits for and takes (the settings of the same names)."""

    connect_timeout: float
    read_timeout: float
    max_answer_bytes: int


class Upstream:
    """One pool of identical model servers (an `[[upstreams]]` entry, or the single `upstream` setting)."""

    def __init__(self, urls: list[str], key: str | None, limits: Limits, *, name: str = "default",
                 ollama_native: bool = False) -> None:
        self.name = name
        self.ollama_native = ollama_native  # chat rounds to an Ollama backend go to its /api/chat (ollama_wire.py)
        self.backends = [Backend(url) for url in urls]
        self._key = key
        self.mask = KeyMask(key) if key else None  # the upstream key, masked in all that comes back
        self._turn = itertools.count()
        self._check_timeout = min(limits.connect_timeout, 5.0)
        self.read_timeout = limits.read_timeout
        self.max_answer = limits.max_answer_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout,
                                              sock_read=limits.read_timeout)
        # a non-streamed chat round: no per-read timer, the round's own deadline (chat_rounds.chat)
        self.round_timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        self._stream_session: aiohttp.ClientSession | None = None
        self.resent = 0  # requests sent again on a fresh connection (the connection tests read it)
        # Why streamed rounds get connections of their own (the upstream closes one after a stream); None: pooled.
        self.streams_spend: str | None = None

    def _new_session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            cookie_jar=aiohttp.DummyCookieJar(),  # one client's cookies never reach another's request
            auto_decompress=False,  # pass-through relays the bytes with their content-encoding
            skip_auto_headers=("Accept-Encoding",),  # so nothing asks for an encoding the client did not
        )

    @property
    def client(self) -> aiohttp.ClientSession:
        """The pooled session, made on first use (aiohttp wants a running event loop)."""
        if self._session is None:
            self._session = self._new_session(aiohttp.TCPConnector(
                limit=1000, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS))
        return self._session

    @property
    def stream_client(self) -> aiohttp.ClientSession:
        """The pool of streamed chat rounds: only event streams ever run on its connections, so one closed
        under the next request tells that this upstream drops a connection after a stream."""
        if self._stream_session is None:
            self._stream_session = self._new_session(aiohttp.TCPConnector(
                limit=1000, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS))
        return self._stream_session

    def learn_streams_spend(self, why: str) -> None:
        """From now on every streamed round of this upstream opens a connection of its own."""
        if self.streams_spend is None:
            self.streams_spend = why
            log.info("upstream %s: streamed rounds get connections of their own (%s)", self.name, why)

    @property
    def fresh_client(self) -> aiohttp.ClientSession:
        """A session that opens a new connection for every request and closes it after the answer (it sends
        `Connection: close`): streamed chat rounds, and the one resend after a stale pooled connection."""
        if self._fresh_session is None:
            self._fresh_session = self._new_session(aiohttp.TCPConnector(limit=0, force_close=True))
        return self._fresh_session

    async def aclose(self) -> None:
        for session in (self._session, self._fresh_session, self._stream_session):
            if session is not None:
                await session.close()

    @property
    def base_url(self) -> str:
        """The first healthy backend's base URL (the first one when none is)."""
        return next((b for b in self.backends if b.healthy), self.backends[0]).base_url

    @property
    def root_url(self) -> str:
        return next((b for b in self.backends if b.healthy), self.backends[0]).root_url

    def candidates(self) -> list[Backend]:
        """Healthy backends, then the ones marked down as a last resort (a health mark can be stale): in the
        request's session order where it has a session key (every round on one backend; affinity.py), else
        rotated one step per call (round robin)."""
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
        """Send to the first backend that takes the connection; the body streams (caller runs `done`).
        `stream`: a streamed chat round (its own pool, or its own connection; see the docstring). `root`: the
        path is under the server's root (Ollama's /api/*), not its base URL. `route`: a chat round, whose URL
        and body depend on the backend (ollama_wire.Route)."""
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
                                self.name, redacted_url(backend.base_url), type(exc).__name__)
                backend.healthy, failure = False, exc
                continue
            backend.healthy = True
            return response
        assert failure is not None
        raise failure

    async def _request(self, method: str, url: str, stream: bool, **kwargs: Any) -> aiohttp.ClientResponse:
        """One request (on a pooled connection; with `stream` on the stream pool's, or on one of its own where
        the upstream drops them), sent once more on a fresh connection if its connection closes before any
        answer byte (a connect error is the caller's: that backend is down). Nothing of the answer has been
        read when that happens: `request` returns at the answer's headers, and later errors are the caller's."""
        kwargs.setdefault("allow_redirects", False)  # never followed: a redirect is the upstream's answer
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
                raise  # a streamed request body is spent: it cannot be sent again
            if session is self._stream_session:  # that connection carried only event streams before
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

    def redact(self, data: bytes) -> bytes:
        return self.mask.masked(data) if self.mask else data

    async def request_once(self, method: str, url: str, headers: dict[str, str]) -> aiohttp.ClientResponse:
        """A small probe request (the caller reads and closes it), within the health check's timeout."""
        return await self._request(method, url, False, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=self._check_timeout))

    def headers(self, client_auth: str | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}  # read and masked as sent
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        elif client_auth:
            headers["authorization"] = client_auth
        if (context := telemetry.OUTGOING.get()) is not None:  # the round's W3C trace context (telemetry.py)
            headers.update(context)
        return headers

    async def read_body(self, response: aiohttp.ClientResponse, cut_at: int | None = None, *,
                        masked: bool = True, deadline: bool = True) -> bytes:
        """The whole body, at most max_answer_bytes of it (or, with `cut_at`, read until past that and
        returned whole for the caller to cut), within read_timeout of the headers (a body that trickles
        forever would dodge the per-read timeout). `masked`: the key masked piece by piece as it arrives (a
        long body never holds the event loop in one masking pass). `deadline` False: the caller's own covers it."""
        limit = self.max_answer if cut_at is None else cut_at
        body = bytearray()
        stream = ByteStream(self.mask) if self.mask and masked else None
        read = 0
        async with asyncio.timeout(self.read_timeout) if deadline else nullcontext():
            async for piece in response.content.iter_any():
                read += len(piece)
                body += stream.feed(piece) if stream else piece
                if read > limit:
                    if cut_at is not None:
                        break
                    raise too_long(limit)
        return bytes(body + stream.end()) if stream else bytes(body)

    async def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
        """A best-effort capability probe; None when it fails in any way."""
        try:
            async with await self._request(method, url, False, json=body, headers=self.headers(),
                                           timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                if response.status >= 300:  # an error, or a redirect (never followed)
                    return None
                answer = orjson.loads(await response.read())
        except (TimeoutError, aiohttp.ClientError, OSError, orjson.JSONDecodeError):
            return None
        if url.endswith("/props") and isinstance(answer, dict) and (
                isinstance(answer.get("chat_template_caps"), dict) or "default_generation_settings" in answer):
            self.learn_streams_spend("llama.cpp's /props answered: llama-server closes a connection after a stream")
        return answer

    async def ready(self) -> bool:
        """Some backend answers GET /models (below 500) now."""
        return any(await asyncio.gather(*(self.check(b, timeout=3.0) for b in self.backends)))

    async def check(self, backend: Backend, timeout: float | None = None) -> bool:
        """One health check of one backend; marks it up or down."""
        kwargs: dict[str, Any] = {"headers": self.headers(), "allow_redirects": False,
                                  "timeout": aiohttp.ClientTimeout(total=timeout or self._check_timeout)}
        url = _with_credentials(f"{backend.base_url}/models", kwargs)
        try:
            async with self.client.get(url, **kwargs) as response:
                healthy = response.status < 500
        except (TimeoutError, aiohttp.ClientError, OSError):
            healthy = False
        if healthy != backend.healthy:
            log.warning("upstream %s: backend %s is %s", self.name, redacted_url(backend.base_url),
                        "up" if healthy else "down")
        backend.healthy, backend.checked_at = healthy, time.time()
        return healthy

    async def watch(self, interval: float) -> None:
        """Check every backend each `interval` seconds, for as long as the task runs."""
        while True:
            await asyncio.gather(*(self.check(b) for b in self.backends))
            await asyncio.sleep(interval)

    def snapshot(self) -> dict[str, Any]:
        return {"name": self.name, "backends": [b.to_json() for b in self.backends],
                "streamed_connections": "own: " + self.streams_spend if self.streams_spend else "pooled"}


def done(response: aiohttp.ClientResponse) -> None:
    """A response read to its end gives its connection back to the pool; one left unread (an error, a
    client that went away) closes it, so the upstream stops generating."""
    if response.content.is_eof():
        response.release()
    else:
        response.close()


def _with_credentials(url: str, kwargs: dict[str, Any]) -> str:
    """`url` without `user:password@`, which go in `kwargs`' headers as Basic auth unless the request already
    sends an Authorization header (a key wins; aiohttp refuses both at once, with a 500 once)."""
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
