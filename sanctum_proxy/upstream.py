"""The only module that talks HTTP to the model server, and the one place httpx errors are mapped.

`Upstream` holds one pooled `httpx.AsyncClient` per app. Chat calls come back as parsed JSON or as an
async iterator of parsed SSE chunks; everything else is passed through as a streaming httpx response.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from .config import Settings
from .errors import ProxyError, UpstreamError, UpstreamTimeout, UpstreamUnreachable

# Headers that describe one hop's connection, never forwarded (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})
MAX_SSE_LINE = 16 * 1024 * 1024


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    latency_ms: float


@asynccontextmanager
async def mapped_errors() -> AsyncIterator[None]:
    """Turn httpx's exceptions into the proxy's (502 unreachable, 504 timeout)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"upstream did not answer in time ({type(exc).__name__})") from exc
    except (httpx.TransportError, httpx.StreamError) as exc:
        raise UpstreamUnreachable(f"upstream unreachable: {exc or type(exc).__name__}") from exc


def error_message(body: bytes) -> str:
    """The upstream's own message, from llama.cpp / OpenAI `{"error": {"message"}}`, Ollama `{"error": "..."}`,
    or the text itself."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:2000] or "upstream error with an empty body"
    if isinstance(parsed, dict):
        err = parsed.get("error", parsed.get("detail", parsed.get("message")))
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err is not None:
            return str(err)
    return str(parsed)[:2000]


def upstream_error(status: int, body: bytes) -> UpstreamError:
    try:
        raw: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raw = body.decode("utf-8", "replace")[:2000]
    return UpstreamError(status, error_message(body), raw)


class Upstream:
    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = settings.upstream
        self.root_url = settings.upstream_root
        self._key = settings.upstream_api_key
        timeout = httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport)

    async def aclose(self) -> None:
        await self.client.aclose()

    def headers(self, client_auth: str | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        elif client_auth:
            headers["authorization"] = client_auth
        return headers

    async def chat(self, body: dict[str, Any], client_auth: str | None = None) -> Reply:
        """POST /chat/completions, non-streaming. Raises UpstreamError on a non-2xx answer."""
        start = time.perf_counter()
        async with mapped_errors():
            response = await self.client.post(
                f"{self.base_url}/chat/completions", content=orjson.dumps(body),
                headers=self.headers(client_auth))
        latency = (time.perf_counter() - start) * 1000
        if response.status_code >= 400:
            raise upstream_error(response.status_code, response.content)
        try:
            parsed = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(502, f"upstream sent a body that is not JSON: {response.text[:200]!r}") from exc
        if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list) or not parsed["choices"]:
            raise UpstreamError(502, f"upstream sent no choices: {response.text[:200]!r}")
        return Reply(response.status_code, parsed, latency)

    @asynccontextmanager
    async def chat_stream(
        self, body: dict[str, Any], client_auth: str | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """POST /chat/completions with stream true; yields an iterator of parsed chunks (no [DONE]).

        An error before the first byte raises like `chat`; an in-band `data: {"error": ...}` raises
        UpstreamError from the iterator. Leaving the context closes the upstream connection."""
        request = self.client.build_request(
            "POST", f"{self.base_url}/chat/completions", content=orjson.dumps(body),
            headers=self.headers(client_auth))
        async with mapped_errors():
            response = await self.client.send(request, stream=True)
        try:
            if response.status_code >= 400:
                async with mapped_errors():
                    content = await response.aread()
                raise upstream_error(response.status_code, content)
            yield self._chunks(response)
        finally:
            await response.aclose()

    async def _chunks(self, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        async with mapped_errors():
            async for data in sse_data(response.aiter_bytes()):
                if data.startswith(b"[DONE]"):
                    return
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError as exc:
                    raise UpstreamError(502, f"upstream sent a stream event that is not JSON: {data[:200]!r}") \
                        from exc
                if not isinstance(chunk, dict):
                    raise UpstreamError(502, f"upstream sent a stream event that is not an object: {data[:200]!r}")
                if chunk.get("error"):
                    raise upstream_error(500, data)
                yield chunk

    async def send(
        self, method: str, path: str, *, params: Any, headers: Mapping[str, str], content: AsyncIterator[bytes] | None
    ) -> httpx.Response:
        """Pass-through: the response is streaming; the caller closes it."""
        request = self.client.build_request(method, f"{self.base_url}{path}", params=params, headers=headers,
                                            content=content)
        async with mapped_errors():
            return await self.client.send(request, stream=True)

    async def probe_json(self, method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
        """A best-effort capability probe; None when it fails in any way."""
        try:
            response = await self.client.request(method, url, json=body, timeout=timeout,
                                                 headers=self.headers())
            if response.status_code >= 400:
                return None
            return orjson.loads(response.content)
        except (httpx.HTTPError, orjson.JSONDecodeError):
            return None

    async def ready(self) -> bool:
        try:
            response = await self.client.get(f"{self.base_url}/models", timeout=3.0, headers=self.headers())
        except httpx.HTTPError:
            return False
        return response.status_code < 500


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data:` payloads of an SSE byte stream, one per event (multi-line data joined by \\n).

    Comments (`:` lines, llama.cpp's keep-alive) and other fields are skipped. A line longer than
    MAX_SSE_LINE is an upstream error, not unbounded memory. Linear in the input: each byte is scanned once."""
    buffer = bytearray()
    scanned = 0
    data: list[bytes] = []
    async for piece in chunks:
        buffer += piece
        while (newline := buffer.find(b"\n", scanned)) >= 0:
            line = bytes(buffer[:newline]).rstrip(b"\r")
            del buffer[:newline + 1]
            scanned = 0
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        scanned = len(buffer)
        if scanned > MAX_SSE_LINE:
            raise UpstreamError(502, f"upstream sent an SSE line over {MAX_SSE_LINE} bytes")
    if buffer.startswith(b"data:"):
        data.append(bytes(buffer[5:]).lstrip(b" "))
    if data:
        yield b"\n".join(data)


__all__ = ["Upstream", "Reply", "sse_data", "HOP_BY_HOP"]
