"""Ollama /v1 when its tool parser fails mid-stream (ollama fb30760, v0.33.0-rc2: server/routes.go
streamResponse, middleware/openai.go ChatWriter): the error's JSON is read back as an empty chat response and
sent as a chunk with model "" and delta {"content": ""}, then the body ends with no finish chunk and no [DONE].
The message is lost. The fake sends exactly that (tests/fakes/upstream.py ollama_v1_stream_lost_error)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from sanctum_proxy.errors import UpstreamError
from sanctum_proxy.repair.upstream_errors import OLLAMA_LOST_ERROR, classify, ollama_lost_error
from tests.fakes.upstream import Step, content_chunks, ollama_v1_stream_lost_error
from tests.repair.test_upstream_errors import ASK, PARIS, PROMPTED
from tests.stream_rules import read_stream


def ollama_chunks(text: str) -> list[dict[str, Any]]:
    """Ollama's own chunks name the model and carry its fingerprint (openai/openai.go toChunk)."""
    return [{**c, "system_fingerprint": "fp_ollama"} for c in content_chunks(text, size=3)]


def failing_stream() -> Step:
    """Some content, then the parser fails on the call it held back."""
    return Step(chunks=[*ollama_chunks("Let me")[:-1], ollama_v1_stream_lost_error()], done=False)


def test_the_fake_ends_the_stream_as_ollama_does(fake):
    fake[0].push(failing_stream())
    with httpx.stream("POST", fake[1] + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200 and events[-1] != "data: [DONE]"
    last = orjson.loads(events[-1][6:])
    assert last["model"] == "" and last["choices"] == [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]


def test_the_lost_error_chunk_is_told_from_ollamas_own_chunks():
    assert ollama_lost_error(ollama_v1_stream_lost_error())
    own = ollama_chunks("")
    assert not any(ollama_lost_error(c) for c in own)  # the model named, or a role, or a finish_reason
    assert not ollama_lost_error({**ollama_v1_stream_lost_error(), "system_fingerprint": "b1234-abc"})  # llama.cpp
    assert not ollama_lost_error({"error": {"code": 500}}) and not ollama_lost_error([])


def test_the_lost_error_reads_as_a_parse_failure():
    assert classify(UpstreamError(500, OLLAMA_LOST_ERROR), ASK) == "upstream_parse_failure"


def test_an_ollama_parse_failure_mid_stream_is_asked_again_prompted(proxy, fake):
    fake[0].push(failing_stream(), Step(chunks=content_chunks("Let me check. " + PROMPTED)))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        raw = r.read()
    got = read_stream(raw)
    assert got.parsed_calls() == PARIS, raw[-600:]  # was: the in-stream error upstream_unreachable (a 502)
    assert got.omens[0]["reason"] == "upstream_parse_failure"
