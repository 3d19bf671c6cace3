"""The `data:` payloads of a server-sent event stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from sanctum_proxy.errors import UpstreamError, UpstreamTimeout
from sanctum_proxy.upstreams.error_mapping import too_long

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
