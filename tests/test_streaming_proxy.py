"""Streaming through the real proxy: live content, hidden correction rounds, keep-alives, omens on the wire,
usage over rounds, errors inside the stream, auto-mode fallback, legacy functions; read strictly
(tests/stream_rules.py) and through the official openai-python SDK."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import ServerThread
from tests.fakes.upstream import (
    LLAMA_NO_JINJA,
    FakeUpstream,
    Step,
    asked,
    completion,
    content_chunks,
    llama_tool_chunks,
)
from tests.stream_rules import Streamed, read_stream
from tests.tools import WEATHER_DESCRIBED as WEATHER

MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
ASK = {"model": "m", "messages": MESSAGES, "tools": [WEATHER], "stream": True}
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
GOOD = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "get_forecast", "arguments": {"city": "Paris"}}</tool_call>'


def with_usage(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*chunks, {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                      "model": "fake-model", "choices": [], "usage": USAGE}]


def stream(proxy: str, body: dict[str, Any] = ASK, **headers: str) -> tuple[httpx.Response, Streamed]:
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, headers=headers, timeout=20) as r:
        raw = r.read()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), raw[:300]
    return r, read_stream(raw)


# Each door's streamed body and how its first piece of text ("Hell") reads on the wire.
DOORS: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": ("/v1/chat/completions", ASK, '"content":"Hell"'),
    "responses": ("/v1/responses", {"model": "m", "input": "Weather in Paris?", "stream": True, "tools": [
        {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]},
        '"delta":"Hell"'),
    "messages": ("/v1/messages", {"model": "m", "max_tokens": 200, "messages": MESSAGES, "stream": True, "tools": [
        {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}, '"text":"Hell"'),
    "ollama": ("/api/chat", {"model": "m", "messages": MESSAGES, "tools": [WEATHER]}, '"content":"Hell"'),
}


@pytest.mark.parametrize("door", DOORS)
def test_first_text_arrives_while_the_upstream_is_still_talking(proxy, fake, door):
    path, body, first_text = DOORS[door]
    upstream = fake[0]
    chunks = content_chunks("Hello there, this is a slow answer.", size=4)
    upstream.push(Step(chunks=chunks, chunk_delay=0.15))
    sent_when_seen = None
    with httpx.stream("POST", proxy + path, json=body, timeout=20) as r:
        for line in r.iter_lines():
            if first_text in line:
                sent_when_seen = upstream.chunks_sent
                break
    assert sent_when_seen is not None, f"no {first_text} on the {door} door"
    assert sent_when_seen < len(chunks) - 2, "the proxy waited for the upstream's answer to end"


def test_correction_round_shows_live_prose_once_and_never_the_rejected_call(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("Let me check. " + UNKNOWN, size=5)),
                 Step(chunks=content_chunks("Let me check. " + GOOD, size=5)))
    r, got = stream(proxy)
    assert got.content == "Let me check." and "get_forecast" not in got.content
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert got.finish_reason == "tool_calls" and got.sanctum["rounds"] == 2
    assert [o["type"] for o in got.omens][0] == "SpellCallRejected"


def test_accepted_prose_of_a_hidden_round_follows_the_live_prose(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("Checking. " + UNKNOWN)),
                 Step(chunks=content_chunks("There is no forecast spell; it is sunny in Paris.")))
    _, got = stream(proxy, {**ASK, "tool_choice": "auto"})
    assert got.content == "Checking. There is no forecast spell; it is sunny in Paris."
    assert got.calls == [] and got.finish_reason == "stop"


def test_keep_alive_comments_flow_during_a_long_hidden_round(make_proxy, fake):
    proxy = make_proxy(keepalive_seconds=0.1)
    fake[0].push(Step(chunks=llama_tool_chunks("nope", '{"city": "Paris"}')),
                 Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}'), delay=0.6))
    _, got = stream(proxy)
    assert got.comments.count("keep-alive") >= 3
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_omens_are_comments_by_default_and_events_on_request(proxy, fake):
    for _ in range(2):
        fake[0].push(Step(chunks=llama_tool_chunks("get_weather", "{'city': 'Paris',}")))
    _, plain = stream(proxy)
    _, named = stream(proxy, **{"X-Sanctum-Omens": "events"})
    assert [c.split(" ", 1)[0] for c in plain.comments] == ["omen"]
    assert plain.omens[0]["type"] == "SpellCallRepaired" and "object" not in plain.omens[0]
    assert named.comments == [] and named.omens[0]["object"] == "sanctum.omen"
    assert named.omens[0]["type"] == "SpellCallRepaired" and named.omens[0]["choices"] == []
    paris = [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert plain.parsed_calls() == named.parsed_calls() == paris


@pytest.mark.parametrize("omens", ["comments", "events"])
def test_openai_python_tolerates_both_omen_styles(proxy, fake, omens):
    for _ in range(2):
        fake[0].push(Step(chunks=llama_tool_chunks("get_weather", "{'city': 'Paris',}")))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0,
                        default_headers={"X-Sanctum-Omens": omens})
    tools: Any = [WEATHER]
    with sdk.chat.completions.stream(model="m", messages=MESSAGES, tools=tools) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and orjson.loads(call.function.arguments) == {"city": "Paris"}
    names = []
    for chunk in sdk.chat.completions.create(model="m", messages=MESSAGES, tools=[WEATHER], stream=True):
        for choice in chunk.choices:  # an omen event must keep `choices` iterable
            calls = choice.delta.tool_calls or []
            names += [t.function.name for t in calls if t.function and t.function.name]
    assert names == ["get_weather"]


def test_include_usage_sends_one_usage_chunk_summed_over_rounds(proxy, fake):
    fake[0].push(Step(chunks=with_usage(llama_tool_chunks("nope", '{"city": "Paris"}'))),
                 Step(chunks=with_usage(llama_tool_chunks("get_weather", '{"city": "Paris"}'))))
    _, got = stream(proxy, {**ASK, "stream_options": {"include_usage": True}})
    assert got.usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert got.sanctum["rounds"] == 2


def test_usage_chunk_reaches_the_sdk_stream_helper(proxy, fake):
    fake[0].push(Step(chunks=with_usage(llama_tool_chunks("get_weather", '{"city": "Paris"}'))))
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0)
    with sdk.chat.completions.stream(model="m", messages=MESSAGES, tools=[WEATHER],  # type: ignore[list-item]
                                     stream_options={"include_usage": True}) as s:
        final = s.get_final_completion()
    assert final.usage is not None and final.usage.total_tokens == 15


def test_surrender_mid_stream_is_the_422_body_in_an_error_event_then_the_end(proxy, fake):
    for n in range(3):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city": "{n}"}}')))
    _, got = stream(proxy)
    assert got.error is not None and got.error["type"] == "spell_call_parse_error"
    assert got.error["rounds"] == 3 and len(got.error["rejected"]) == 3
    sdk = openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0)
    for n in range(3):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city": "{n}"}}')))
    with pytest.raises(openai.APIError, match="spell call could not be repaired"):
        list(sdk.chat.completions.create(model="m", messages=MESSAGES, tools=[WEATHER], stream=True))


def test_surrender_mid_stream_shows_every_rejected_round_as_an_omen_before_the_error(proxy, fake):
    for n in range(3):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city": "{n}"}}')))
    _, got = stream(proxy)
    # Rounds 1 and 2 were bounced (each omen names its correction); round 3 was the last allowed: the error.
    assert [o["type"] for o in got.omens] == ["SpellCallRejected"] * 2
    assert [o["round"] for o in got.omens] == [1, 2] and all(o["correction"] for o in got.omens)
    assert got.error is not None and got.error["rounds"] == 3


def test_a_rejected_round_is_an_omen_on_the_wire_while_the_hidden_round_still_runs(proxy, fake):
    upstream = fake[0]
    rejected, accepted = llama_tool_chunks("nope", '{"city": "Paris"}'), content_chunks("One moment. " + GOOD, size=3)
    upstream.push(Step(chunks=rejected), Step(chunks=accepted, chunk_delay=0.1))
    seen: list[str] = []
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=ASK, timeout=20) as r:
        for line in r.iter_lines():
            seen.append(line)
            if line.startswith(": omen"):
                sent_when_seen = upstream.chunks_sent
                break
    assert '"SpellCallRejected"' in seen[-1]
    assert sent_when_seen < len(rejected) + len(accepted) - 2, "the omen waited for the hidden round's end"
    assert not any(line.startswith("data: ") and "tool_calls" in line for line in seen)


def test_upstream_dying_mid_stream_ends_the_client_stream_with_an_error(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("Hello there, friend", size=3), die_after=3))
    start = time.monotonic()
    _, got = stream(proxy)
    assert got.content == "Hello" and got.error is not None and got.error["type"] == "upstream_unreachable"
    assert time.monotonic() - start < 5


def test_auto_fallback_on_the_streamed_tools_request_yields_one_clean_stream(proxy, fake):
    fake[0].push(Step(*LLAMA_NO_JINJA), Step(chunks=content_chunks("Sure. " + GOOD, size=6)))
    fake[0].checks.append(Step(*LLAMA_NO_JINJA))  # the proxy's own check
    r, got = stream(proxy)
    assert r.headers["x-sanctum-spell-calling"] == "prompted"
    assert got.content == "Sure." and got.finish_reason == "tool_calls"
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert got.omens[0]["type"] == "SpellCallingFallback" and got.sanctum["mode"] == "prompted"
    assert "tools" not in asked(fake[0].requests)[1]


def test_fallback_after_live_content_does_not_show_it_twice(proxy, fake):
    failure = b'data: {"error": {"code": 500, "message": "Failed to parse input at pos 12"}}\n\n'
    fake[0].push(Step(chunks=[*content_chunks("Hello wor", size=3)[:-1], failure]),
                 Step(chunks=content_chunks("Hello world. " + GOOD)))
    _, got = stream(proxy)
    assert got.content == "Hello world."
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert got.omens[0]["reason"] == "upstream_parse_failure"


def test_prompted_mode_streams_content_live_and_calls_as_deltas(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("One moment. " + GOOD, size=2)))
    r, got = stream(proxy, **{"X-Sanctum-Spell-Calling": "prompted"})
    assert r.headers["x-sanctum-spell-calling"] == "prompted" and got.content == "One moment."
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_legacy_functions_stream_as_function_call_deltas(proxy, fake):
    fake[0].push(Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))
    body = {"model": "m", "messages": MESSAGES, "functions": [WEATHER["function"]], "stream": True}
    _, got = stream(proxy, body)
    assert got.function_call == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert got.calls == [] and got.finish_reason == "function_call"


def _rounds_seen(make_proxy: Any, props: Any) -> tuple[list[tuple[int, bytes | None]], list[tuple[int, bytes | None]]]:
    """Three streamed, then three plain requests through the proxy: (client port, Connection header) of each
    streamed and each plain round as the upstream saw them."""
    upstream, peers = FakeUpstream(props=props), []
    app = upstream.app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            headers = dict(scope["headers"])
            peers.append((scope["client"][1], headers.get(b"connection")))
        await app(scope, receive, send)

    with ServerThread(recording) as server:
        proxy = make_proxy(upstream=server.url + "/v1")
        for _ in range(3):
            upstream.push(Step(chunks=content_chunks("Hello")))
            _, got = stream(proxy, {"model": "m", "messages": MESSAGES, "stream": True, "tools": [WEATHER]})
            assert got.content == "Hello"
        for _ in range(3):
            upstream.push(Step(body=completion("Hello")))
            answer = httpx.post(proxy + "/v1/chat/completions", json={"model": "m", "messages": MESSAGES})
            assert answer.json()["choices"][0]["message"]["content"] == "Hello"
    return peers[:3], peers[3:]


def test_streamed_rounds_share_a_pooled_connection_where_the_upstream_keeps_it(make_proxy):
    """uvicorn (vLLM's server; the fake) keeps a connection working after a stream, as Go's net/http (Ollama)
    does: streamed rounds share one pooled connection, plain ones another."""
    streamed, plain = _rounds_seen(make_proxy, props=None)
    assert all(connection is None for _, connection in streamed)
    assert len({port for port, _ in streamed}) == 1, "a streamed round opened a connection of its own"
    assert len({port for port, _ in plain}) == 1 and all(c is None for _, c in plain)


def test_streamed_rounds_get_a_connection_of_their_own_on_llama_server(make_proxy):
    """llama-server cannot take a request on a connection that carried a stream (tests/fakes/llama_connections.py);
    its /props answer says it is llama.cpp: a streamed round asks for `Connection: close`, plain requests keep
    sharing one pooled connection."""
    props = {"default_generation_settings": {"n_ctx": 2048},
             "chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}
    streamed, plain = _rounds_seen(make_proxy, props=props)
    assert all(connection == b"close" for _, connection in streamed)
    assert len({port for port, _ in streamed}) == 3, "a streamed round reused a connection"
    assert len({port for port, _ in plain}) == 1 and all(c is None for _, c in plain)
