"""A first round that cannot fit the model's context (llama.cpp's /props n_ctx, learnt by the capability probe) is
answered with `context_length_exceeded`, naming both sizes, instead of the upstream's own 400; one that fits
on the upstream's own count is sent, however the estimate reads it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sanctum_proxy.upstreams.capabilities import from_props
from tests.fakes.upstream import Step, completion, content_chunks

N_CTX = 150
# A SmolLM2-like llama-server (its template knows no tools: auto mode goes prompted) with a small context
PROPS = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False},
         "default_generation_settings": {"n_ctx": N_CTX}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
# llama.cpp's answer to a prompt over n_ctx (tools/server: format_error_response, ERROR_TYPE_EXCEED_CONTEXT_SIZE)
REFUSAL = {"error": {"code": 400, "message": "request (312 tokens) exceeds the available context size (150 tokens), "
                     "try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 312,
                     "n_ctx": N_CTX}}


def ask(proxy: str, words: str, stream: bool = False) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": words}], "tools": [TOOL], "stream": stream}
    return httpx.post(proxy + "/v1/chat/completions", json=body, timeout=30)


@pytest.fixture
def small(fake: Any, make_proxy: Any) -> str:
    fake[0].props, fake[0].tokenizer = PROPS, True  # the fake's tokenizer counts the rendered prompt's words
    return str(make_proxy())


def test_the_probe_reads_a_slots_context():
    assert from_props(PROPS).context == N_CTX  # type: ignore[union-attr]
    assert from_props({"chat_template_caps": {}, "n_ctx": 4096}).context == 4096  # type: ignore[union-attr]
    assert from_props({"chat_template_caps": {}, "n_ctx": "big"}).context is None  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_prompt_over_the_context_is_refused_with_both_sizes(small, fake, stream):
    r = ask(small, "a " * 300, stream)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["context"] == N_CTX and error["counted"] is True
    assert error["prompt_tokens"] > N_CTX and f"{error['prompt_tokens']} tokens" in error["message"]
    assert f"context of {N_CTX} tokens" in error["message"]
    assert fake[0].requests == []  # never sent


def test_a_prompt_the_estimate_overcounts_is_sent(small, fake):
    fake[0].push(Step(body=completion("Sunny.")))
    r = ask(small, "abcdefghijklmnopqrstuvwxyz0123456789 " * 12)  # with the tools' text ~230 estimated, ~100 words
    assert r.status_code == 200, r.text
    assert len(fake[0].requests) == 1 and fake[0].templated  # counted by the upstream before it was sent


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_the_upstreams_own_context_refusal_names_both_sizes(fake, make_proxy, stream):
    fake[0].props = PROPS  # no tokenizer: the estimate lets it through, and the upstream refuses it
    proxy = make_proxy()
    fake[0].push(Step(status=400, body=REFUSAL))
    r = ask(proxy, "short question", stream)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["prompt_tokens"], error["context"], error["counted"]) == \
        ("context_length_exceeded", 312, N_CTX, True)


def test_without_a_known_context_the_request_goes_as_before(fake, make_proxy):
    fake[0].push(Step(chunks=content_chunks("Sunny.")))
    r = ask(make_proxy(), "a " * 300, stream=True)
    assert r.status_code == 200 and '"finish_reason":"stop"' in r.text and len(fake[0].requests) == 1
