"""Bodies an upstream compressed though asked for identity: gzip, zlib and raw deflate (nginx and Go's
compress/flate send `deflate` both ways), inflated whole or as they arrive, a bomb stopped at its limit."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator

import pytest

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.upstreams.answer_bytes import INFLATE_STEP, inflated, inflated_whole

TEXT = b'{"choices": [{"message": {"content": "Sunny in Paris."}}]}' * 50


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-15)
    return packer.compress(data) + packer.flush()


COMPRESSED = {"gzip": gzip.compress(TEXT), "zlib": zlib.compress(TEXT), "raw deflate": raw_deflate(TEXT)}


def streamed(body: bytes, cut: int) -> list[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), cut):
            yield body[i:i + cut]

    async def read() -> list[bytes]:
        return [piece async for piece in inflated(chunks())]

    return asyncio.run(read())


@pytest.mark.parametrize("kind", sorted(COMPRESSED))
def test_each_compression_inflates_whole_and_in_any_chunking(kind):
    body = COMPRESSED[kind]
    assert inflated_whole(body, 1 << 20) == TEXT
    for cut in (2, 7, 64, len(body)):
        assert b"".join(streamed(body, cut)) == TEXT


def test_a_bomb_inflates_in_bounded_steps_and_whole_only_to_its_limit():
    bomb = gzip.compress(b"\0" * (3 * INFLATE_STEP + 5))
    assert max(len(piece) for piece in streamed(bomb, 4096)) <= INFLATE_STEP
    assert len(inflated_whole(bomb, 1000)) == 1000


def test_a_body_that_does_not_inflate_is_a_502_streamed_and_a_placeholder_or_error_whole():
    cut_short = COMPRESSED["gzip"][:-20]
    with pytest.raises(UpstreamError) as raised:
        streamed(cut_short, 16)
    assert raised.value.status == 502 and "does not inflate" in raised.value.message
    assert inflated_whole(b"\x1f\x8bnot gzip at all", 100) == b"upstream error body that does not inflate"
    with pytest.raises(zlib.error):
        inflated_whole(b"\x1f\x8bnot gzip at all", 100, strict=True)
