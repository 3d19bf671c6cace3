"""A chat round sent to an upstream: its answer as parsed JSON, or its stream as parsed chunks, the key masked.

With `ollama_native` a round to an Ollama backend goes to its /api/chat (ollama_wire.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import orjson

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import UpstreamError, UpstreamUnreachable, inband_status
from sanctum_proxy.repair.upstream_errors import OLLAMA_LOST_ERROR, ollama_lost_error
from sanctum_proxy.upstreams import ollama_answers, ollama_wire
from sanctum_proxy.upstreams.answer_bytes import (
    INFLATED,
    content_encoding,
    done,
    inflated,
    loads_lenient,
    read_decoded,
    sse_data,
)
from sanctum_proxy.upstreams.error_mapping import mapped_errors, redirect_error, upstream_error
from sanctum_proxy.upstreams.ollama_native import NativeRequest
from sanctum_proxy.upstreams.redaction import DeltaMask, masked
from sanctum_proxy.upstreams.upstream import Upstream

DRAIN_SECONDS = 0.05


@dataclass(frozen=True)
class UpstreamReply:
    status: int
    body: JSONObject  # as sent: its readers check each value
    latency_ms: float


async def chat(upstream: Upstream, body: JSONObject, client_auth: str | None = None) -> UpstreamReply:
    """POST /chat/completions, non-streaming; UpstreamError on a non-2xx answer."""
    start = time.perf_counter()
    headers = upstream.headers(client_auth)
    route = ollama_wire.Route(upstream, body, upstream.ollama_native, headers)
    # One deadline for headers and body: aiohttp's sock_read timer restarts at every read
    async with mapped_errors(), asyncio.timeout(upstream.read_timeout):
        response = await upstream.open("POST", "/chat/completions", route=route, headers=headers,
                                       timeout=upstream.round_timeout)
        try:
            raw = await read_decoded(upstream, response, deadline=False)  # masked: a 2xx answer may echo the key
        finally:
            done(response)
    latency = (time.perf_counter() - start) * 1000
    if response.status >= 400:
        raise (ollama_answers.error_of(response.status, raw) if route.native
               else upstream_error(response.status, raw))
    if response.status >= 300:
        raise redirect_error(response.status)
    if route.native is not None:
        return UpstreamReply(response.status, ollama_wire.reply(raw, route.native), latency)
    try:
        parsed = loads_lenient(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(502, f"upstream sent a body that is not JSON: {raw[:200]!r}") from exc
    if not isinstance(parsed, dict) or not isinstance(parsed.get("choices"), list) or not parsed["choices"]:
        raise UpstreamError(502, f"upstream sent no choices: {raw[:200]!r}")
    return UpstreamReply(response.status, parsed, latency)


@asynccontextmanager
async def chat_stream(upstream: Upstream, body: JSONObject,
                      client_auth: str | None = None) -> AsyncIterator[AsyncIterator[JSONObject]]:
    """POST /chat/completions with stream true; yields an iterator of parsed chunks, without [DONE].

    An in-band error raises UpstreamError from the iterator; leaving the context closes the connection."""
    headers = upstream.headers(client_auth)
    route = ollama_wire.Route(upstream, body, upstream.ollama_native, headers)
    async with mapped_errors():
        response = await upstream.open("POST", "/chat/completions", stream=True, route=route, headers=headers)
    try:
        if response.status >= 400:
            async with mapped_errors():
                content = await read_decoded(upstream, response)
            raise (ollama_answers.error_of(response.status, content) if route.native
                   else upstream_error(response.status, content))
        if response.status >= 300:
            raise redirect_error(response.status)
        yield (_native_chunks(upstream, response, route.native) if route.native
               else _chunks(upstream, response))
    finally:
        done(response)


async def _native_chunks(upstream: Upstream, response: aiohttp.ClientResponse,
                         native: NativeRequest) -> AsyncIterator[JSONObject]:
    async with mapped_errors():
        async for chunk in ollama_wire.chunks(response.content.iter_any(), native, limit=upstream.max_answer,
                                              mask=upstream.mask):
            yield chunk


async def _chunks(upstream: Upstream, response: aiohttp.ClientResponse) -> AsyncIterator[JSONObject]:
    async with mapped_errors():
        source = response.content.iter_any()
        encoding = content_encoding(response)
        if encoding and encoding not in INFLATED:
            raise UpstreamError(502, f"upstream sent a {encoding[:40]!r}-encoded stream though asked for identity")
        events = sse_data(inflated(source) if encoding else source, limit=upstream.max_answer,
                          idle=upstream.read_timeout)
        seen, finished, last = 0, False, None
        pieces = DeltaMask(upstream.mask) if upstream.mask else None  # a key cut between two events
        async for data in events:
            if data.startswith(b"[DONE]"):
                await _drain(events)
                break
            data = masked(upstream.mask, data)
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
        else:  # no [DONE]: complete only if a finish_reason came
            if seen and not finished and ollama_lost_error(last):
                raise UpstreamError(500, OLLAMA_LOST_ERROR)
            if seen and not finished:
                raise UpstreamUnreachable("upstream closed the stream before the answer was complete")
        if not seen:
            raise UpstreamError(502, "upstream sent no stream event (its body is not SSE chunks)")


async def _drain(events: AsyncIterator[bytes]) -> None:
    """Read the body's end after [DONE] so the connection can be reused; a lingering server loses it."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (TimeoutError, aiohttp.ClientError, UpstreamError):
        pass
