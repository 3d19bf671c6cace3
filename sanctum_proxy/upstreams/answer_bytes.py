"""An upstream's answer read as bytes: within max_answer_bytes and read_timeout, inflated, the key masked, a stream
split into its SSE payloads."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from sanctum_proxy.errors import UpstreamError, UpstreamTimeout
from sanctum_proxy.upstreams.error_mapping import too_long
from sanctum_proxy.upstreams.redaction import ByteStream, masked

if TYPE_CHECKING:  # the pool holds the limits and the mask
    from sanctum_proxy.upstreams.upstream import Upstream

INFLATED = frozenset({"gzip", "x-gzip", "deflate"})  # sent though asked for identity: inflated to mask the key
INFLATE_STEP = 1024 * 1024


def content_encoding(response: aiohttp.ClientResponse) -> str:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    return "" if encoding == "identity" else encoding


def _inflater(first: bytes) -> Any:
    """gzip or zlib by header, else raw deflate (sent by some as `deflate`)."""
    zlib_header = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    return zlib.decompressobj(wbits=47 if first[:2] == b"\x1f\x8b" or zlib_header else -15)


async def inflated(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Inflated as it arrives, INFLATE_STEP bytes at a time."""
    inflater = None
    try:
        async for chunk in chunks:
            data = chunk
            if inflater is None and data:
                inflater = _inflater(data)
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


def inflated_whole(body: bytes, limit: int, *, strict: bool = False) -> bytes:
    """At most `limit` bytes; `strict` raises zlib.error, else a placeholder."""
    try:
        whole: bytes = _inflater(body).decompress(body, limit)
        return whole
    except zlib.error:
        if strict:
            raise
        return b"upstream error body that does not inflate"


async def read_body(upstream: Upstream, response: aiohttp.ClientResponse, cut_at: int | None = None, *,
                    masked: bool = True, deadline: bool = True) -> bytes:
    """The whole body within max_answer_bytes and read_timeout (`cut_at`: for the caller to cut)."""
    limit = upstream.max_answer if cut_at is None else cut_at
    body = bytearray()
    stream = ByteStream(upstream.mask) if upstream.mask and masked else None
    read = 0
    async with asyncio.timeout(upstream.read_timeout) if deadline else nullcontext():
        async for piece in response.content.iter_any():
            read += len(piece)
            body += stream.feed(piece) if stream else piece
            if read > limit:
                if cut_at is not None:
                    break
                raise too_long(limit)
    return bytes(body + stream.end()) if stream else bytes(body)


async def read_decoded(upstream: Upstream, response: aiohttp.ClientResponse, *, deadline: bool = True) -> bytes:
    """The whole body, inflated where it came compressed anyway, then masked as a client would read it."""
    encoding = content_encoding(response)
    if not encoding:
        return await read_body(upstream, response, deadline=deadline)
    raw = await read_body(upstream, response, masked=False, deadline=deadline)
    if encoding not in INFLATED:
        raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded answer though asked for identity")
    try:
        return masked(upstream.mask, inflated_whole(raw, upstream.max_answer, strict=True))
    except zlib.error:
        raise UpstreamError(502, "upstream sent a compressed body that does not inflate") from None


def done(response: aiohttp.ClientResponse) -> None:
    """Reuse a read response's connection; close an unread one so the upstream stops."""
    if response.content.is_eof():
        response.release()
    else:
        response.close()


MAX_SSE_LINE = 16 * 1024 * 1024


def loads_lenient(data: bytes) -> Any:
    """orjson.loads, with bytes that are not UTF-8 (a character split between tokens) as U+FFFD."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "replace")
        if len(text) == len(data.decode("utf-8", "ignore")):
            raise  # valid UTF-8: the JSON is broken
        return orjson.loads(text)


async def sse_data(chunks: AsyncIterator[bytes], *, limit: int | None = None,
                   idle: float | None = None) -> AsyncIterator[bytes]:
    """One payload per event. A line over MAX_SSE_LINE or a stream over `limit` bytes is an upstream error; only
    comments (keep-alives) for `idle` seconds is a timeout."""
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
