"""A pass-through request relayed, its answer streamed back with the key masked.

A keyed request asks for identity; gzip or deflate sent anyway is inflated, any other encoding is a 502.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.upstreams.answer_bytes import done, inflated, inflated_whole, read_body
from sanctum_proxy.upstreams.error_mapping import MAX_ERROR_BODY, mapped_errors
from sanctum_proxy.upstreams.redaction import ByteStream, KeyMask, masked
from sanctum_proxy.upstreams.upstream import Upstream

# RFC 9110 section 7.6.1; and `expect`: the proxy forwards a body it has read whole (uvicorn answered the 100-continue)
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "expect",
})


@dataclass(frozen=True)
class Passing:
    """A pass-through answer; `close` (async, so never in starlette's thread pool) ends an unread body."""

    status: int
    headers: list[tuple[str, str]]
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]]


async def send(
    upstream: Upstream, method: str, path: str, *, params: Any, headers: Mapping[str, str],
    content: bytes | AsyncIterator[bytes] | None, root: bool = False,
) -> Passing:
    """The answer as it streams; an error is read whole and masked (a 401 may echo a wrong key)."""
    if upstream.mask:
        headers = {**headers, "accept-encoding": "identity"}
    async with mapped_errors():
        response = await upstream.open(method, path, params=params, headers=headers, data=content,
                                       allow_redirects=False, root=root)
        kept = [(k.lower(), v) for k, v in response.headers.items()]

        async def close() -> None:
            done(response)

        if upstream.mask is None:
            return Passing(response.status, kept, _relayed(response), close)
        mask = upstream.mask
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            done(response)
            raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded answer though asked for "
                                     "identity; it cannot be checked for the upstream key")
        inflate = encoding not in ("", "identity")
        kept = [(k, mask.text(v)) for k, v in kept if not (inflate and k == "content-encoding")]
        if response.status < 400:
            chunks = _relayed(response)
            return Passing(response.status, kept, redacted(inflated(chunks) if inflate else chunks, mask), close)
        try:
            body = await read_body(upstream, response, cut_at=MAX_ERROR_BODY, masked=False)  # masked once inflated
        finally:
            done(response)
    if inflate:
        body = inflated_whole(body, MAX_ERROR_BODY)
    kept = [(k, v) for k, v in kept if k not in ("content-length", "content-encoding", "transfer-encoding")]
    return Passing(response.status, kept, _once(masked(upstream.mask, body)[:MAX_ERROR_BODY]), _nothing)


async def _relayed(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async with mapped_errors():
            async for chunk in response.content.iter_any():
                yield chunk
    finally:
        done(response)


async def redacted(chunks: AsyncIterator[bytes], key: bytes | KeyMask) -> AsyncIterator[bytes]:
    """`chunks` with the key masked, also one split between chunks."""
    stream = ByteStream(key if isinstance(key, KeyMask) else KeyMask(key.decode()))
    async for chunk in chunks:
        if data := stream.feed(chunk):
            yield data
    if held := stream.end():
        yield held


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def _nothing() -> None:
    return None
