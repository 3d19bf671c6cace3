"""Answers compressed though asked for identity, inflated in bounded steps to be checked for the key."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from sanctum_proxy.errors import UpstreamError

INFLATED = frozenset({"gzip", "x-gzip", "deflate"})
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
