"""upstreams/redaction.py: the upstream key masked in every form a body may echo it (plain, JSON-escaped,
percent-encoded), in a body read in pieces cut anywhere, and in a chat stream's deltas cut anywhere."""

from __future__ import annotations

import json
from typing import Any

from sanctum_proxy.upstreams.redaction import MASK, ByteStream, DeltaMask, KeyMask

KEY = "sk-secret/42"


def test_plain_escaped_and_percent_encoded_copies_are_masked() -> None:
    mask = KeyMask(KEY)
    assert mask.masked(b'{"error": "bad key sk-secret/42"}') == b'{"error": "bad key ***"}'
    escaped = json.dumps({"k": KEY}).replace("/", "\\/").replace("s", "\\u0073").encode()
    assert KEY.encode() not in escaped
    assert mask.masked(escaped) == b'{"k": "***"}'
    assert mask.masked(b"url?key=sk-secret%2F42&x=1") == b"url?key=***&x=1"
    assert mask.masked(b"no key here, sk-secret/4 only") == b"no key here, sk-secret/4 only"
    assert mask.text(f"header {KEY}") == f"header {MASK}"


def test_a_body_cut_anywhere_comes_out_masked() -> None:
    body = f'{{"error": {{"message": "invalid api key {KEY}, retry with {KEY}"}}}}'.encode()
    for cut in range(1, len(body)):
        stream = ByteStream(KeyMask(KEY))
        out = stream.feed(body[:cut]) + stream.feed(body[cut:]) + stream.end()
        assert out == body.replace(KEY.encode(), MASK.encode()), cut


def test_a_delta_cut_anywhere_comes_out_masked_and_whole() -> None:
    text = f"the key is {KEY}."
    for cut in range(1, len(text)):
        deltas = DeltaMask(KeyMask(KEY))
        pieces = [text[:cut], text[cut:]]
        got = ""
        for i, piece in enumerate(pieces):
            chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": piece},
                                                  "finish_reason": "stop" if i == 1 else None}]}
            got += deltas.chunk(chunk)["choices"][0]["delta"].get("content", "")
        assert got == f"the key is {MASK}.", cut
