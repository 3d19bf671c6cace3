"""Where a chat round goes on each backend, and Ollama's native answers read off the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import orjson

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import UpstreamError, UpstreamUnreachable
from sanctum_proxy.state import telemetry
from sanctum_proxy.upstreams import ollama_answers as answers
from sanctum_proxy.upstreams.ollama_native import NativeRequest, native_request, without_stash
from sanctum_proxy.upstreams.redaction import DeltaMask, KeyMask

if TYPE_CHECKING:
    from sanctum_proxy.upstreams.upstream import Backend, Upstream

MAX_LINE = 16 * 1024 * 1024  # answer_bytes.MAX_SSE_LINE
MAX_VERSION_BODY = 4096


@dataclass
class Route:
    """`native`: the /api/chat request, when the chosen backend is Ollama."""

    upstream: Upstream
    body: JSONObject
    native_on: bool
    headers: dict[str, str]  # a forwarded client key goes with the question too
    native: NativeRequest | None = None

    async def __call__(self, backend: Backend) -> tuple[str, bytes]:
        telemetry.sent_to(backend.base_url)
        if self.native_on and await is_ollama(self.upstream, backend, self.headers):
            self.native = native_request(self.body)
            return f"{backend.root_url}/api/chat", orjson.dumps(self.native.body)
        self.native = None
        return f"{backend.base_url}/chat/completions", orjson.dumps(without_stash(self.body))


async def is_ollama(upstream: Upstream, backend: Backend, headers: dict[str, str]) -> bool:
    """Whether the backend is Ollama, asked once; concurrent callers share the answer."""
    if backend.ollama is not None:
        return backend.ollama
    if backend.asking is None or backend.asking.done():
        backend.asking = asyncio.ensure_future(_version(upstream, backend, headers))
    found = await asyncio.shield(backend.asking)
    if found is not None:
        backend.ollama = found
    return bool(found)


async def _version(upstream: Upstream, backend: Backend, headers: dict[str, str]) -> bool | None:
    """None when unreachable: asked again next time."""
    try:
        async with await upstream.request_once("GET", f"{backend.root_url}/api/version", headers) as response:
            if response.status != 200:
                return False
            body = await response.content.read(MAX_VERSION_BODY)
    except (TimeoutError, aiohttp.ClientConnectorError):
        return None
    except (aiohttp.ClientError, OSError):
        return False
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("version"), str)


def reply(raw: bytes, native: NativeRequest) -> JSONObject:
    """A 2xx `/api/chat` answer as a chat.completion; an `error` in it raises."""
    return answers.completion(_object(raw, "a body", "an answer"), native.calls_in_content)


def _object(data: bytes, body: str, value: str) -> JSONObject:
    """One `/api/chat` object (an answer or a stream line); an `error` in it raises."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(502, f"upstream sent {body} that is not JSON: {data[:200]!r}") from exc
    if not isinstance(parsed, dict):
        raise UpstreamError(502, f"upstream sent {value} that is not an object: {data[:200]!r}")
    if (error := answers.line_error(parsed)) is not None:
        raise error
    return parsed


async def lines(pieces: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The non-blank lines of an NDJSON body, within `limit` bytes and MAX_LINE per line."""
    buffer = bytearray()
    scanned = total = 0
    async for piece in pieces:
        total += len(piece)
        if total > limit:
            raise UpstreamError(502, f"upstream answer is over the limit of {limit} bytes (max_answer_bytes)")
        buffer += piece
        while (newline := buffer.find(b"\n", scanned)) >= 0:
            line = bytes(buffer[:newline]).strip()
            del buffer[:newline + 1]
            scanned = 0
            if line:
                yield line
        scanned = len(buffer)
        if scanned > MAX_LINE:
            raise UpstreamError(502, f"upstream sent an NDJSON line over {MAX_LINE} bytes")
    if tail := bytes(buffer).strip():
        yield tail


async def chunks(pieces: AsyncIterator[bytes], native: NativeRequest, *, limit: int,
                 mask: KeyMask | None) -> AsyncIterator[JSONObject]:
    """An `/api/chat` stream as chunks; a stream ending before `done` is UpstreamUnreachable."""
    translated = answers.Chunks(native.calls_in_content)
    spread = DeltaMask(mask) if mask else None  # a key cut between two lines
    seen = 0
    async for data in lines(pieces, limit):
        if mask is not None:
            data = mask.masked(data)
        line = _object(data, "a stream line", "a stream line")
        if translated.done:
            continue  # nothing follows Ollama's last line
        seen += 1
        for chunk in translated.of(line):
            yield spread.chunk(chunk) if spread is not None else chunk
    if not seen:
        raise UpstreamError(502, "upstream sent no stream line (its body is not NDJSON)")
    if not translated.done:
        raise UpstreamUnreachable("upstream closed the stream before the answer was complete")
