"""What the upstream sent reaches the client unless a repair replaced it: the message's and the choice's
fields, the response's top-level fields, usage details, and the upstream's own error fields and status."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call, several_chunks
from tests.stream_rules import read_choices, read_stream
from tests.tools import WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
LOGPROBS = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}], "refusal": None}
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
         "completion_tokens_details": {"reasoning_tokens": 3, "accepted_prediction_tokens": 0},
         "prompt_tokens_details": {"cached_tokens": 8}}
TIMINGS = {"prompt_n": 10, "prompt_ms": 12.5, "predicted_n": 5, "predicted_ms": 40.1}


def full(content: str | None, tool_calls: list[dict[str, Any]] | None = None,
         finish: str = "stop") -> dict[str, Any]:
    """An answer carrying the spec's optional fields and vendor extras at every level."""
    body = completion(content, tool_calls, finish)
    body.update(service_tier="default", system_fingerprint="b6000-abc", timings=TIMINGS, usage=USAGE,
                x_vendor={"kept": True})
    choice = body["choices"][0]
    choice.update(logprobs=LOGPROBS, stop_reason=None)
    choice["message"].update(refusal=None, annotations=[{"type": "url_citation", "url_citation": {
        "url": "https://example.org", "title": "x", "start_index": 0, "end_index": 1}}],
        audio=None, reasoning_content="Thinking.", x_message_extra=7)
    return body


@pytest.mark.parametrize("tools", [True, False])
def test_every_field_of_a_clean_answer_reaches_the_client(client, fake, tools):
    sent = full("Hi there.")
    fake[0].push(Step(body=sent))
    got = client.post("/v1/chat/completions", json=ASK if tools else {**ASK, "tools": None}).json()
    for key in ("id", "created", "model", "service_tier", "system_fingerprint", "timings", "x_vendor", "usage"):
        assert got[key] == sent[key], key
    assert got["choices"][0]["logprobs"] == LOGPROBS and got["choices"][0]["stop_reason"] is None
    assert got["choices"][0]["message"] == sent["choices"][0]["message"]


def test_a_repaired_answer_changes_only_content_and_calls(client, fake):
    sent = full("Let me check. " + HERMES)
    fake[0].push(Step(body=sent))
    got = client.post("/v1/chat/completions", json=ASK).json()
    message = got["choices"][0]["message"]
    assert message["content"] == "Let me check." and message["tool_calls"][0]["function"]["name"] == "get_weather"
    kept = {k: v for k, v in sent["choices"][0]["message"].items() if k not in ("content", "tool_calls")}
    assert {k: message[k] for k in kept} == kept
    assert got["timings"] == TIMINGS and got["service_tier"] == "default" and got["x_vendor"] == {"kept": True}


def test_usage_details_of_one_round_are_kept_and_counts_summed_over_rounds(client, fake):
    fake[0].push(Step(body=full("Hi.")))
    assert client.post("/v1/chat/completions", json=ASK).json()["usage"] == USAGE
    bad = full('<tool_call>{"name": "get_forecast", "arguments": {}}</tool_call>')
    fake[0].push(Step(body=bad), Step(body=full(None, [native_call("get_weather", '{"city": "Paris"}')],
                                                "tool_calls")))
    usage = client.post("/v1/chat/completions", json=ASK).json()["usage"]
    assert usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30,
                     "completion_tokens_details": {"reasoning_tokens": 6, "accepted_prediction_tokens": 0},
                     "prompt_tokens_details": {"cached_tokens": 16}}


def test_no_usage_chunk_of_null_when_the_upstream_sent_none(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("Hello.")))  # no usage chunk upstream
    body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got = read_stream(r.read())
    assert got.content == "Hello." and all(c.get("usage", "absent") is not None for c in got.chunks)


LLAMA_OVERFLOW = {"error": {"code": 400, "message": "the request exceeds the available context size",
                            "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}
OPENAI_429 = {"error": {"message": "Rate limit reached", "type": "requests", "param": None,
                        "code": "rate_limit_exceeded"}}
VLLM_400 = {"error": {"object": "error", "message": "max_tokens is too large", "type": "BadRequestError",
                      "param": "max_tokens", "code": 400}}


def test_the_upstreams_context_overflow_keeps_its_sizes_as_context_length_exceeded(make_proxy, fake):
    """llama.cpp's own overflow of a first round is the proxy's context_length_exceeded, with its two sizes."""
    proxy = make_proxy(spell_calling="native")
    fake[0].push(Step(status=400, body=LLAMA_OVERFLOW))
    error = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": None}, timeout=20).json()["error"]
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert (error["prompt_tokens"], error["context"], error["counted"]) == (5000, 4096, True)


@pytest.mark.parametrize(("status", "sent", "code", "param", "kept"), [
    (429, OPENAI_429, "rate_limit_exceeded", None, {"upstream_type": "requests"}),
    (400, VLLM_400, "upstream_error", "max_tokens", {"upstream_type": "BadRequestError", "object": "error"}),
])
def test_upstream_error_fields_are_kept(make_proxy, fake, status, sent, code, param, kept):
    proxy = make_proxy(spell_calling="native")
    fake[0].push(Step(status=status, body=sent))
    r = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": None}, timeout=20)
    error = r.json()["error"]
    assert r.status_code == status and error["type"] == "upstream_error" and error["code"] == code
    assert error["param"] == param and error["upstream_status"] == status
    assert error["message"] == sent["error"]["message"]
    assert {k: error[k] for k in kept} == kept


def test_an_in_band_stream_error_says_the_real_upstream_status(make_proxy, fake):
    proxy = make_proxy(spell_calling="native")
    failure = b'data: {"error": {"code": 400, "message": "the request exceeds the available context size", ' \
              b'"type": "exceed_context_size_error"}}\n\n'
    fake[0].push(Step(chunks=[*content_chunks("Hello wor", size=3)[:-1], failure]))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "tools": None, "stream": True},
                      timeout=20) as r:
        got = read_stream(r.read())
    assert got.error is not None and got.error["upstream_status"] == 400
    assert got.error["upstream_type"] == "exceed_context_size_error"


def test_a_stream_carries_the_upstreams_id_created_model_and_fingerprint(proxy, fake):
    chunks = content_chunks("Hello there.")
    for c in chunks:
        c.update(id="chatcmpl-upstream-7", created=1712345678, model="qwen3-8b-q4", system_fingerprint="b6000-abc")
    fake[0].push(Step(chunks=chunks))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        got = read_stream(r.read())
    assert got.content == "Hello there." and got.chunks
    assert {(c["id"], c["created"], c["model"], c.get("system_fingerprint")) for c in got.chunks} == {
        ("chatcmpl-upstream-7", 1712345678, "qwen3-8b-q4", "b6000-abc")}


FINGERPRINT = "b6000-abc"  # llama-server names its build on every chunk (tools/server/server-task.cpp)
BROKEN = '<tool_call>{"name": "get_forecast", "arguments": {}}</tool_call>'


def fingerprinted(chunks: list[dict[str, Any]], first: int = 0) -> list[dict[str, Any]]:
    for c in chunks[first:]:
        c["system_fingerprint"] = FINGERPRINT
    return chunks


ANSWERS = {
    "text": lambda: [fingerprinted(content_chunks("Hello there."))],
    "a call in text": lambda: [fingerprinted(content_chunks("Sure. " + HERMES))],
    "a native call": lambda: [fingerprinted(llama_tool_chunks("get_weather", '{"city": "Paris"}'))],
    "a corrected call": lambda: [fingerprinted(content_chunks(BROKEN)), fingerprinted(content_chunks(HERMES))],
    "named after the role chunk": lambda: [fingerprinted(content_chunks("Hello there."), first=1)],
}


@pytest.mark.parametrize("answer", ANSWERS)
def test_every_chunk_carries_the_upstreams_fingerprint(proxy, fake, answer):
    fake[0].push(*(Step(chunks=[*c, {**c[-1], "choices": [], "usage": USAGE}]) for c in ANSWERS[answer]()))
    body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got = read_stream(r.read())
    assert got.finish_reason and got.usage and len(got.chunks) > 3
    assert [c.get("system_fingerprint") for c in got.chunks] == [FINGERPRINT] * len(got.chunks)


def test_every_chunk_of_several_choices_carries_the_upstreams_fingerprint(proxy, fake):
    fake[0].push(Step(chunks=fingerprinted(several_chunks("Hi there.", "Hello you."))))
    body = {**ASK, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got, chunks = read_choices(r.read())
    assert got[1].content == "Hello you." and len(chunks) > 6
    assert [c.get("system_fingerprint") for c in chunks] == [FINGERPRINT] * len(chunks)


def test_streamed_and_unstreamed_report_the_same_model(client, proxy, fake):
    fake[0].push(Step(body=completion("Hi.", model="upstream-name")),
                 Step(chunks=[{**c, "model": "upstream-name"} for c in content_chunks("Hi.")]))
    plain = client.post("/v1/chat/completions", json=ASK).json()["model"]
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        streamed = read_stream(r.read()).chunks[0]["model"]
    assert plain == streamed == "upstream-name"


def test_streamed_logprobs_go_with_the_content_they_came_with(proxy, fake):
    chunks = content_chunks("Hello world. <to", size=6) [:-1] + content_chunks("day", size=6)[1:]
    for n, c in enumerate(chunks):
        delta = c["choices"][0]["delta"]
        if delta.get("content"):
            c["choices"][0]["logprobs"] = {"content": [{"token": delta["content"], "logprob": -float(n),
                                                        "bytes": list(delta["content"].encode()),
                                                        "top_logprobs": []}]}
    fake[0].push(Step(chunks=chunks))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        got = read_stream(r.read())
    assert got.content == "Hello world. <today"
    shown = [(c["choices"][0]["delta"]["content"], [t["token"] for t in c["choices"][0]["logprobs"]["content"]])
             for c in got.chunks if c["choices"] and c["choices"][0].get("logprobs")]
    # Trailing whitespace waits for the text after it (a call may follow): its logprobs go with that text.
    assert shown == [("Hello", ["Hello "]), (" world.", ["world."]), (" <today", [" <to", "day"])]


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_streams_own_top_level_fields_reach_the_client(proxy, fake, include_usage):
    chunks = content_chunks("Hello.")
    for c in chunks:
        c["service_tier"] = "default"
    chunks[-1]["timings"] = TIMINGS
    chunks.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
                   "choices": [], "usage": USAGE, "timings": TIMINGS, "delta": "hostile", "meta": 1})
    fake[0].push(Step(chunks=chunks))
    body = {**ASK, "stream": True, "stream_options": {"include_usage": include_usage}}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got = read_stream(r.read())
    last = got.chunks[-1]
    assert last["timings"] == TIMINGS and last["service_tier"] == "default" and last["meta"] == 1
    assert (got.usage == USAGE) is include_usage
