"""Hostile input, round 3, from the upstream's side: an answer compressed though the proxy asked for identity.
A gzip 2xx chat answer the proxy could not read became a 502 quoting its compressed bytes (which inflate to the
upstream key); raw deflate without a zlib header gave a 200 with a cut body. Each test fails without its fix."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.raw_upstream import RawUpstream, chunked, sse_head
from tests.test_hostile_tenants import raw_answer

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-up/5ecret-key-42"
ANSWER = orjson.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": f"the key is {KEY}"}, "finish_reason": "stop"}]})


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-15)
    return packer.compress(data) + packer.flush()


def compressed(encoding: str, data: bytes) -> bytes:
    return {"gzip": gzip.compress, "deflate": zlib.compress, "raw deflate": raw_deflate}[encoding](data)


def header(encoding: str) -> str:
    return "gzip" if encoding == "gzip" else "deflate"


def proxy_for(make_proxy: Any, up: RawUpstream) -> str:
    return str(make_proxy(upstream=up.url, upstream_api_key=KEY, probe_capabilities=False))


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw deflate"])
def test_an_unreadable_compressed_chat_answer_is_a_502_that_quotes_no_compressed_bytes(make_proxy, encoding):
    body = compressed(encoding, b"not json: the key is " + KEY.encode() + b" " * 100)
    with RawUpstream() as up:
        proxy = proxy_for(make_proxy, up)
        up.push(raw_answer("200 OK", [("content-type", "application/json"),
                                      ("content-encoding", header(encoding))], body))
        r = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20)
    assert r.status_code == 502, r.text
    assert KEY not in r.text and "\\x" not in r.text, r.text  # the inflated, masked text or nothing
    assert b"accept-encoding: identity" in up.heads[0].lower()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw deflate"])
def test_a_compressed_chat_answer_is_read_and_masked(make_proxy, encoding):
    with RawUpstream() as up:
        proxy = proxy_for(make_proxy, up)
        up.push(raw_answer("200 OK", [("content-type", "application/json"),
                                      ("content-encoding", header(encoding))], compressed(encoding, ANSWER)))
        r = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "the key is ***"


def test_a_compressed_chat_error_is_masked_after_inflating(make_proxy):
    error = orjson.dumps({"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}})
    with RawUpstream() as up:
        proxy = proxy_for(make_proxy, up)
        up.push(raw_answer("401 Unauthorized", [("content-type", "application/json"),
                                                ("content-encoding", "gzip")], gzip.compress(error)))
        r = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20)
    assert r.status_code == 401 and KEY not in r.text and "***" in r.text, r.text


def test_a_raw_deflate_pass_through_answer_comes_whole(make_proxy):
    payload = b'{"data": "' + b"x" * 200_000 + b'"}'
    with RawUpstream() as up:
        proxy = proxy_for(make_proxy, up)
        up.push(raw_answer("200 OK", [("content-type", "application/json"), ("content-encoding", "deflate")],
                           raw_deflate(payload)))
        r = httpx.get(proxy + "/v1/files/a", timeout=20)
    assert r.status_code == 200 and r.content == payload, len(r.content)


def test_a_gzip_stream_is_read(make_proxy):
    events = b"".join(b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                                                 "model": "m", "choices": [{"index": 0, "delta": delta,
                                                                            "finish_reason": finish}]}) + b"\n\n"
                      for delta, finish in (({"role": "assistant", "content": "hel"}, None),
                                            ({"content": "lo"}, "stop"))) + b"data: [DONE]\n\n"
    with RawUpstream() as up:
        proxy = proxy_for(make_proxy, up)
        head = sse_head().replace(b"\r\n\r\n", b"\r\ncontent-encoding: gzip\r\n\r\n", 1)
        up.push([("send", head + chunked(gzip.compress(events)) + b"0\r\n\r\n"), ("close",)])
        with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
            text = r.read().decode()
    assert r.status_code == 200 and '"hel"' in text and '"lo"' in text, text
