"""The only module that talks HTTP to the model servers, and the one place client errors are mapped.

`Upstream` is one named pool of identical backends (base URLs) behind one pooled `aiohttp.ClientSession`
(aiohttp, not httpx, on this hot path: its C parser costs less per request; bench/results/design_costs.md).
Requests go round-robin to the healthy backends, and a conversation's rounds to one (affinity.py); a backend
that refuses the connection (or cannot be reached within connect_timeout) is marked down and the next one is
tried. A request whose connection dies before any byte of an answer came back (a kept-alive connection the
server had already closed) is sent once more on a fresh connection: nothing was generated, so nothing is lost
or done twice that the client could see. An error after the answer's headers is the client's (the upstream
may have started answering).
Streamed chat rounds have a pool of their own, kept while the upstream keeps its connections after an event
stream (Ollama's Go net/http and vLLM's uvicorn do) and given up, for that upstream, once it is known not to:
llama-server closes the connection right after the stream's `0\r\n\r\n` though its headers say
`Keep-Alive: timeout=5` (its chunked content provider returns false after `sink.done()`, which cpp-httplib
takes as a cancelled write; docs/upstream-connections.md). It is learned from its /props answer, or from a
connection of the stream pool closed under the next request (sent again fresh, once, and remembered); from
then on every streamed round opens a connection of its own. Pooled connections are dropped after
KEEPALIVE_SECONDS idle, under the 5 s that llama-server, uvicorn and Node servers keep them. `watch()`
checks every backend's GET /models periodically and brings a recovered backend back.
Chat calls come back as parsed JSON or as an async iterator of parsed SSE chunks; everything else is
passed through as a `Passing` (status, headers, raw body chunks). The upstream key never leaves this
module: every body that echoes it (error or not, whole or streamed, JSON-escaped or cut between two reads or
two stream events) and every pass-through header is masked (redaction.py) before it is raised or relayed; a
keyed pass-through asks for `Accept-Encoding: identity` and inflates a gzip/deflate answer sent anyway (any
other encoding is a 502), so nothing compressed goes out unchecked. Redirects are never followed (a chat,
stream or probe request answered 3xx is an upstream error, its body not shown; pass-through relays the 3xx).
Upstream error text reaches a client masked and clipped, and the HTTP client's own messages (which name the
upstream's host and port) never do. Credentials in an upstream URL are never shown or logged; they are sent
as Basic auth unless a key is sent (the key wins).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import yarl

from sanctum_proxy.config import redacted_url
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable, inband_status
from sanctum_proxy.repair.upstream_errors import OLLAMA_LOST_ERROR, ollama_lost_error
from sanctum_proxy.state import telemetry
from sanctum_proxy.upstreams import affinity, ollama_answers, ollama_wire
from sanctum_proxy.upstreams.ollama_native import NativeRequest
from sanctum_proxy.upstreams.redaction import ByteStream, DeltaMask, KeyMask

# Headers that describe one hop's connection, never forwarded (RFC 9110 section 7.6.1); and `expect`: the proxy
# forwards a body it has read whole, and uvicorn answered the client's 100-continue.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "expect",
})
MAX_SSE_LINE = 16 * 1024 * 1024
MAX_ERROR_BODY = 1024 * 1024
MAX_ERROR_TEXT = 2000  # characters of an upstream's error message (and of each of its other fields) shown
INFLATE_STEP = 1024 * 1024  # at most this much inflated per step of a compressed pass-through body
DRAIN_SECONDS = 0.05
# Nothing was sent: safe to try another backend.
CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# Sent on a connection the server had closed, and no answer byte came back: safe to send again, fresh.
STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
KEEPALIVE_SECONDS = 4.0
log = logging.getLogger("sanctum_proxy.upstream")


@dataclass(frozen=True)
class Reply:
    status: int
    body: JSONObject  # the upstream's chat.completion, as sent (its readers check each value)
    latency_ms: float


@asynccontextmanager
async def mapped_errors() -> AsyncIterator[None]:
    """Turn the HTTP client's exceptions into the proxy's (502 unreachable, 504 timeout)."""
    try:
        yield
    except TimeoutError as exc:  # aiohttp's connect and read timeouts are TimeoutErrors too
        raise UpstreamTimeout(f"upstream did not answer in time ({type(exc).__name__})") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise UpstreamUnreachable(f"upstream unreachable: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """What went wrong, without the HTTP client's text (it names the upstream's host and port)."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError):
        os_error = exc
    number = getattr(os_error, "errno", None)  # its strerror may name the address ("Connect call failed (...)")
    return f"{type(exc).__name__} ({os.strerror(number)})" if isinstance(number, int) else type(exc).__name__


def redirect_error(status: int) -> UpstreamError:
    """A chat, stream or probe request answered with a redirect: never followed, its body and target not shown
    (they may point inside the upstream's network)."""
    return UpstreamError(502, f"upstream answered with a redirect ({status}); redirects are not followed")


def error_message(body: bytes) -> str:
    """The upstream's own message, from llama.cpp / OpenAI `{"error": {"message"}}`, Ollama `{"error": "..."}`,
    or the text itself."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _clip(body.decode("utf-8", "replace").strip()) or "upstream error with an empty body"
    if isinstance(parsed, dict):
        err = parsed.get("error", parsed.get("detail", parsed.get("message")))
        if isinstance(err, dict):
            message = err.get("message")
            return _clip(message if isinstance(message, str) and message else _shown(err))
        if err is not None:
            return _clip(err if isinstance(err, str) else _shown(err))
    return _clip(_shown(parsed))


def upstream_error(status: int, body: bytes) -> UpstreamError:
    """The upstream's error (its body already masked): its message and its error object's scalar fields,
    each clipped; nested values are dropped."""
    try:
        raw: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raw = _clip(body.decode("utf-8", "replace"))
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        raw = {"error": {k: _clip(v) if isinstance(v, str) else v for k, v in raw["error"].items()
                         if isinstance(k, str) and (v is None or isinstance(v, str | int | float | bool))}}
    elif not isinstance(raw, str):
        raw = None
    return UpstreamError(status, error_message(body), raw)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[:MAX_ERROR_TEXT] + "..."


def _shown(value: Any) -> str:
    """A JSON value as text for a message: its JSON, clipped (str() of a deep value would recurse)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()[:MAX_ERROR_TEXT]
    except orjson.JSONEncodeError:
        return "(an error object too deep to show)"


@dataclass(frozen=True)
class Passing:
    """A pass-through answer: status, headers (lower-case names), the raw body as it arrives. The body's
    iterator closes the upstream response when it ends or is closed; `close` (async: it runs on the event
    loop, never in starlette's thread pool) does the same for a body that was never iterated."""

    status: int
    headers: list[tuple[str, str]]
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]


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
        self._mask = KeyMask(key) if key else None
        self._turn = itertools.count()
        self._check_timeout = min(limits.connect_timeout, 5.0)
        self._read_timeout = limits.read_timeout
        self._max_answer = limits.max_answer_bytes
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout,
                                              sock_read=limits.read_timeout)
        # a non-streamed chat round: no per-read timer, the round's own deadline (`chat`)
        self._round_timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout)
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

    async def _open(self, method: str, path: str, *, stream: bool = False, root: bool = False,
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

    def _redact(self, data: bytes) -> bytes:
        return self._mask.masked(data) if self._mask else data

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

    async def chat(self, body: JSONObject, client_auth: str | None = None) -> Reply:
        """POST /chat/completions (Ollama's /api/chat: ollama_wire.py), non-streaming. Raises UpstreamError on a
        non-2xx answer."""
        start = time.perf_counter()
        headers = self.headers(client_auth)
        route = ollama_wire.Route(self, body, self.ollama_native, headers)
        # One deadline for the round, headers and body (not aiohttp's sock_read timer, re-armed at every read)
        async with mapped_errors(), asyncio.timeout(self._read_timeout):
            response = await self._open("POST", "/chat/completions", route=route, headers=headers,
                                        timeout=self._round_timeout)
            try:
                raw = await self._read_decoded(response, deadline=False)  # masked: a 2xx answer may echo the key
            finally:
                done(response)
        latency = (time.perf_counter() - start) * 1000
        if response.status >= 400:
            raise (ollama_answers.error_of(response.status, raw) if route.native
                   else upstream_error(response.status, raw))
        if response.status >= 300:
            raise redirect_error(response.status)
        if route.native is not None:
            return Reply(response.status, ollama_wire.reply(raw, route.native), latency)
        try:
            parsed = loads_lenient(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(502, f"upstream sent a body that is not JSON: {raw[:200]!r}") from exc
        if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list) or not parsed["choices"]:
            raise UpstreamError(502, f"upstream sent no choices: {raw[:200]!r}")
        return Reply(response.status, parsed, latency)

    async def _read_decoded(self, response: aiohttp.ClientResponse, *, deadline: bool = True) -> bytes:
        """The whole body inflated (gzip, zlib or raw deflate) where it came compressed though asked for
        identity, then masked: the key is looked for in the bytes a client would read, and only those are quoted."""
        encoding = content_encoding(response)
        if not encoding:
            return await self._read_body(response, deadline=deadline)
        raw = await self._read_body(response, masked=False, deadline=deadline)
        if encoding not in INFLATED:
            raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded answer though asked for identity")
        try:
            return self._redact(_inflated_whole(raw, self._max_answer, strict=True))
        except zlib.error:
            raise UpstreamError(502, "upstream sent a compressed body that does not inflate") from None

    async def _read_body(self, response: aiohttp.ClientResponse, cut_at: int | None = None, *,
                         masked: bool = True, deadline: bool = True) -> bytes:
        """The whole body, at most max_answer_bytes of it (or, with `cut_at`, read until past that and
        returned whole for the caller to cut), within read_timeout of the headers (a body that trickles
        forever would dodge the per-read timeout). `masked`: the key masked piece by piece as it arrives (a
        long body never holds the event loop in one masking pass). `deadline` False: the caller's own covers it."""
        limit = self._max_answer if cut_at is None else cut_at
        body = bytearray()
        stream = ByteStream(self._mask) if self._mask and masked else None
        read = 0
        async with asyncio.timeout(self._read_timeout) if deadline else nullcontext():
            async for piece in response.content.iter_any():
                read += len(piece)
                body += stream.feed(piece) if stream else piece
                if read > limit:
                    if cut_at is not None:
                        break
                    raise too_long(limit)
        return bytes(body + stream.end()) if stream else bytes(body)

    @asynccontextmanager
    async def chat_stream(
        self, body: JSONObject, client_auth: str | None = None
    ) -> AsyncIterator[AsyncIterator[JSONObject]]:
        """POST /chat/completions with stream true; yields an iterator of parsed chunks (no [DONE]).

        An error before the first byte raises like `chat`; an in-band `data: {"error": ...}` raises
        UpstreamError from the iterator. Leaving the context closes the upstream connection. Toward Ollama
        (ollama_wire.py) its /api/chat NDJSON lines come as the same chunks."""
        headers = self.headers(client_auth)
        route = ollama_wire.Route(self, body, self.ollama_native, headers)
        async with mapped_errors():
            response = await self._open("POST", "/chat/completions", stream=True, route=route, headers=headers)
        try:
            if response.status >= 400:
                async with mapped_errors():
                    content = await self._read_decoded(response)
                raise (ollama_answers.error_of(response.status, content) if route.native
                       else upstream_error(response.status, content))
            if response.status >= 300:
                raise redirect_error(response.status)
            yield self._native_chunks(response, route.native) if route.native else self._chunks(response)
        finally:
            done(response)

    async def _native_chunks(self, response: aiohttp.ClientResponse,
                             native: NativeRequest) -> AsyncIterator[JSONObject]:
        async with mapped_errors():
            async for chunk in ollama_wire.chunks(response.content.iter_any(), native, limit=self._max_answer,
                                                  mask=self._mask):
                yield chunk

    async def _chunks(self, response: aiohttp.ClientResponse) -> AsyncIterator[JSONObject]:
        async with mapped_errors():
            source = response.content.iter_any()
            encoding = content_encoding(response)
            if encoding and encoding not in INFLATED:
                raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded stream though asked for identity")
            events = sse_data(_inflated(source) if encoding else source, limit=self._max_answer,
                              idle=self._read_timeout)
            seen, finished, last = 0, False, None
            pieces = DeltaMask(self._mask) if self._mask else None  # a key cut between two events
            async for data in events:
                if data.startswith(b"[DONE]"):
                    await _drain(events)
                    break
                data = self._redact(data)
                try:
                    chunk = loads_lenient(data)
                except orjson.JSONDecodeError as exc:
                    raise UpstreamError(502, f"upstream sent a stream event that is not JSON: {data[:200]!r}") \
                        from exc
                if not isinstance(chunk, dict):
                    raise UpstreamError(502, f"upstream sent a stream event that is not an object: {data[:200]!r}")
                if chunk.get("error"):
                    raise upstream_error(inband_status(chunk), data)
                if pieces is not None:
                    chunk = pieces.chunk(chunk)
                seen, last = seen + 1, chunk
                finished = finished or any(isinstance(c, dict) and c.get("finish_reason")
                                           for c in chunk.get("choices") or ())
                yield chunk
            else:  # the body ended without [DONE]: complete only if a finish_reason came
                if seen and not finished and ollama_lost_error(last):
                    raise UpstreamError(500, OLLAMA_LOST_ERROR)
                if seen and not finished:
                    raise UpstreamUnreachable("upstream closed the stream before the answer was complete")
            if not seen:
                raise UpstreamError(502, "upstream sent no stream event (its body is not SSE chunks)")

    async def send(
        self, method: str, path: str, *, params: Any, headers: Mapping[str, str],
        content: bytes | AsyncIterator[bytes] | None, root: bool = False,
    ) -> Passing:
        """Pass-through: the body streams as it arrives; the caller runs `close`. An error answer is read
        whole and redacted (servers echo a wrong key in their 401 message)."""
        if self._mask:  # an answer must come uncompressed to be checked for the key
            headers = {**headers, "accept-encoding": "identity"}
        async with mapped_errors():
            # A redirect is relayed, never followed: it could point outside the upstream's base path.
            response = await self._open(method, path, params=params, headers=headers, data=content,
                                        allow_redirects=False, root=root)
            kept = [(k.lower(), v) for k, v in response.headers.items()]

            async def close() -> None:
                done(response)

            if self._mask is None:
                return Passing(response.status, kept, _relayed(response), close)
            mask = self._mask
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
                done(response)
                raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded answer though asked for "
                                         "identity; it cannot be checked for the upstream key")
            inflate = encoding not in ("", "identity")
            kept = [(k, mask.text(v)) for k, v in kept if not (inflate and k == "content-encoding")]
            if response.status < 400:
                chunks = _relayed(response)
                return Passing(response.status, kept, _redacted(_inflated(chunks) if inflate else chunks, mask),
                               close)
            try:
                body = await self._read_body(response, cut_at=MAX_ERROR_BODY, masked=False)  # masked once inflated
            finally:
                done(response)
        if inflate:
            body = _inflated_whole(body, MAX_ERROR_BODY)
        kept = [(k, v) for k, v in kept
                if k not in ("content-length", "content-encoding", "transfer-encoding")]
        return Passing(response.status, kept, _once(self._redact(body)[:MAX_ERROR_BODY]), _nothing)

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


async def _relayed(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async with mapped_errors():
            async for chunk in response.content.iter_any():
                yield chunk
    finally:
        done(response)


async def _redacted(chunks: AsyncIterator[bytes], key: bytes | KeyMask) -> AsyncIterator[bytes]:
    """`chunks` with every copy of the key masked, in any of its forms, also one split between chunks: only a
    tail that could be the start of one waits for the next chunk (redaction.ByteStream)."""
    stream = ByteStream(key if isinstance(key, KeyMask) else KeyMask(key.decode()))
    async for chunk in chunks:
        if data := stream.feed(chunk):
            yield data
    if held := stream.end():
        yield held


INFLATED = frozenset({"gzip", "x-gzip", "deflate"})


def content_encoding(response: aiohttp.ClientResponse) -> str:
    """The answer's content-encoding, "" for none."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    return "" if encoding == "identity" else encoding


def _inflater(first: bytes) -> Any:
    """A decompressor for a body that begins with `first`: gzip or zlib by their headers, else raw deflate
    (what some servers send as `deflate`)."""
    zlib_header = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    return zlib.decompressobj(wbits=47 if first[:2] == b"\x1f\x8b" or zlib_header else -15)


async def _inflated(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A gzip, zlib or raw deflate body inflated as it arrives, at most INFLATE_STEP bytes held at a time."""
    inflater = None
    try:
        async for chunk in chunks:
            data = chunk
            if inflater is None and data:
                inflater = _inflater(data)  # (a first chunk of one byte is as rare as a 2-byte header split)
            while data and inflater is not None:
                out = inflater.decompress(data, INFLATE_STEP)
                data = inflater.unconsumed_tail
                if out:
                    yield out
        if inflater is not None and (tail := inflater.flush()):
            yield tail
        if inflater is not None and not inflater.eof:
            raise zlib.error("the compressed body ended before its end")
    except zlib.error as exc:
        raise UpstreamError(502, "upstream sent a compressed body that does not inflate") from exc


def _inflated_whole(body: bytes, limit: int, *, strict: bool = False) -> bytes:
    """A compressed body inflated, at most `limit` bytes of it (a bomb stops there). `strict`: zlib.error when
    it does not inflate, else a placeholder (an error body)."""
    try:
        inflated: bytes = _inflater(body).decompress(body, limit)
        return inflated
    except zlib.error:
        if strict:
            raise
        return b"upstream error body that does not inflate"


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


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def _nothing() -> None:
    return None


async def _drain(events: AsyncIterator[bytes]) -> None:
    """Read the end of the body after [DONE] (it follows at once) so the connection goes back to the pool;
    a server that lingers after [DONE] only loses its connection."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (TimeoutError, aiohttp.ClientError, UpstreamError):
        pass


def too_long(limit: int) -> UpstreamError:
    return UpstreamError(502, f"upstream answer is over the limit of {limit} bytes (max_answer_bytes)")


def loads_lenient(data: bytes) -> Any:
    """orjson.loads, except that bytes that are not UTF-8 (a server that split a character between tokens)
    become U+FFFD instead of failing the whole answer."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "replace")
        if len(text) == len(data.decode("utf-8", "ignore")):
            raise  # valid UTF-8: the JSON itself is broken
        return orjson.loads(text)


async def sse_data(chunks: AsyncIterator[bytes], *, limit: int | None = None,
                   idle: float | None = None) -> AsyncIterator[bytes]:
    """The `data:` payloads of an SSE byte stream, one per event (multi-line data joined by \\n).

    Comments (`:` lines, llama.cpp's keep-alive) and other fields are skipped. A line longer than
    MAX_SSE_LINE, or a stream longer than `limit` bytes, is an upstream error, not unbounded memory; a
    stream that sends only comments for `idle` seconds is a timeout. Linear: each byte is scanned once."""
    buffer = bytearray()
    scanned = total = 0
    data: list[bytes] = []
    last_event = time.monotonic()
    async for piece in chunks:
        buffer += piece
        total += len(piece)
        if limit is not None and total > limit:
            raise too_long(limit)
        if idle is not None and time.monotonic() - last_event > idle:
            raise UpstreamTimeout(f"upstream sent no event for {idle} seconds (only keep-alives)")
        while (newline := buffer.find(b"\n", scanned)) >= 0:
            line = bytes(buffer[:newline]).rstrip(b"\r")
            del buffer[:newline + 1]
            scanned = 0
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
                    last_event = time.monotonic()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        scanned = len(buffer)
        if scanned > MAX_SSE_LINE:
            raise UpstreamError(502, f"upstream sent an SSE line over {MAX_SSE_LINE} bytes")
    if buffer.startswith(b"data:"):
        data.append(bytes(buffer[5:]).lstrip(b" "))
    if data:
        yield b"\n".join(data)


__all__ = ["Upstream", "Backend", "Passing", "Reply", "sse_data", "HOP_BY_HOP"]
