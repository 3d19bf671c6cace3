"""Every round toward Ollama goes to its own /api/chat: the proxy as a real server on loopback in front of the scripted
fake Ollama (tests/fakes/ollama.py), through the /v1/chat/completions, /v1/messages and /api/chat doors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.core.shapes import OLLAMA_FIELDS
from sanctum_proxy.repair import constrain as cn
from sanctum_proxy.repair.toolbox import Toolbox
from tests.fakes.ollama import HARMONY_PARSE_ERROR, QWEN3_PARSE_ERROR, call, fail, fail_midstream, say
from tests.fakes.upstream import Step, asked, checked, completion
from tests.polling import wait_until

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ASK = {"model": "qwen3:0.6b", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
NATIVE_OPTIONS = {"num_ctx": 8192, "top_k": 20, "temperature": 0.2, "repeat_penalty": 1.1}


@pytest.fixture
def ollama(fake_ollama, make_proxy) -> Any:
    """(the fake Ollama, a function starting a proxy in front of it with the given settings)."""
    fake, url = fake_ollama
    return fake, lambda **flags: make_proxy(upstream=url + "/v1", **flags)


def post(proxy: str, path: str, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(proxy + path, json=body, headers=headers, timeout=20)


def streamed(proxy: str, body: dict, **headers: str) -> list[dict]:
    """The data events of a streamed chat completion (the error event too), [DONE] left out."""
    text = post(proxy, "/v1/chat/completions", {**body, "stream": True}, **headers).text
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def streamed_calls(events: list[dict]) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for event in events:
        for choice in event.get("choices") or ():
            for delta in choice["delta"].get("tool_calls") or ():
                got = calls.setdefault(delta["index"], ["", ""])
                got[0] += delta.get("function", {}).get("name") or ""
                got[1] += delta.get("function", {}).get("arguments") or ""
    return [(name, args) for name, args in calls.values()]


def answer_calls(body: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in body["choices"][0]["message"].get("tool_calls") or ()]


def test_a_chat_request_goes_to_api_chat_with_only_the_sampling_it_sent(ollama):
    fake, start = ollama
    proxy = start()
    fake.push(call("get_weather", {"city": "Paris"}), say("Sunny."))
    got = post(proxy, "/v1/chat/completions", {**ASK, "temperature": 0.2, "max_tokens": 99})
    assert got.status_code == 200, got.text
    assert answer_calls(got.json()) == [("get_weather", {"city": "Paris"})]
    assert got.json()["choices"][0]["finish_reason"] == "tool_calls" and got.json()["usage"]["total_tokens"] == 35
    assert fake.v1_requests == [] and len(fake.requests) == 1
    sent = fake.requests[0]
    assert sent["options"] == {"temperature": 0.2, "num_predict": 99} and sent["stream"] is False
    assert sent["tools"] == [WEATHER] and OLLAMA_FIELDS not in sent
    plain = post(proxy, "/v1/chat/completions", {"model": "qwen3:0.6b", "messages": ASK["messages"]})
    assert plain.json()["choices"][0]["message"]["content"] == "Sunny."
    assert "options" not in fake.requests[1]  # nothing the client did not send (Ollama's /v1 adds temperature 1)
    assert [p for _, p, _ in fake.seen].count("/api/version") == 1  # asked once per backend


def test_a_streamed_round_reads_ollamas_ndjson_as_chunks(ollama):
    fake, start = ollama
    fake.push(say("It is sunny in Paris.", thinking="Paris? Easy."))
    events = streamed(start(), {"model": "qwen3:0.6b", "messages": ASK["messages"], "top_p": 0.5})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c.get("choices"))
    thought = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in events if c.get("choices"))
    assert text == "It is sunny in Paris." and thought == "Paris? Easy."
    assert fake.requests[0]["stream"] is True and fake.requests[0]["options"] == {"top_p": 0.5}


@pytest.mark.parametrize("stream", [False, True])
def test_a_correction_round_keeps_the_options_and_constrains_with_format(ollama, stream):
    fake, start = ollama
    proxy = start()
    fake.push(call("get_weather", {"town": "Paris"}), say('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    body = {**ASK, "temperature": 0.3, "seed": 4}
    if stream:
        events = streamed(proxy, body)
        assert [(n, json.loads(a)) for n, a in streamed_calls(events)] == [("get_weather", {"city": "Paris"})]
    else:
        got = post(proxy, "/v1/chat/completions", body).json()
        assert answer_calls(got) == [("get_weather", {"city": "Paris"})]
        assert {o["type"] for o in got["sanctum"]["omens"]} == {"SpellCallRejected"} and got["sanctum"]["rounds"] == 2
    first, second = fake.requests
    assert first["options"] == second["options"] == {"temperature": 0.3, "seed": 4}
    assert "format" not in first
    assert second["format"] == cn.answer_schema(Toolbox.of([WEATHER]), text=False, parallel=True)
    assert "tool_choice" not in second and second["tools"] == [WEATHER]


def test_a_prompted_round_keeps_the_options_and_its_correction_gets_the_answer_schema(ollama):
    fake, start = ollama
    proxy = start()
    fake.push(say("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\": 1}}</tool_call>"),
              say('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    got = post(proxy, "/v1/chat/completions", {**ASK, "temperature": 0.1}, **{"x-sanctum-spell-calling": "prompted"})
    assert answer_calls(got.json()) == [("get_weather", {"city": "Paris"})], got.text
    first, second = fake.requests
    assert "tools" not in first and "<tool_call>" in first["messages"][0]["content"]
    assert first["options"] == second["options"] == {"temperature": 0.1}
    assert second["format"]["properties"]["name"] == {"const": "get_weather"}  # the pinned call's answer schema


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", [fail(500, QWEN3_PARSE_ERROR), fail_midstream(QWEN3_PARSE_ERROR), say("")],
                         ids=["parser-500", "midstream-error-line", "empty-answer"])
def test_an_ollama_failure_is_answered_again_prompted(ollama, stream, failure):
    fake, start = ollama
    proxy = start()
    fake.push(failure, say(HERMES))
    body = {**ASK, "temperature": 0.2}
    if stream:
        events = streamed(proxy, body)
        assert [(n, json.loads(a)) for n, a in streamed_calls(events)] == [("get_weather", {"city": "Paris"})], events
    else:
        got = post(proxy, "/v1/chat/completions", body)
        assert answer_calls(got.json()) == [("get_weather", {"city": "Paris"})], got.text
        fallback = got.json()["sanctum"]["omens"][0]
        assert fallback["type"] == "SpellCallingFallback" and fallback["reason"] == "upstream_parse_failure"
    first, second = fake.requests
    assert first["tools"] and "tools" not in second and second["options"] == {"temperature": 0.2}


def test_no_tool_support_400_sends_the_request_again_prompted(ollama):
    fake, start = ollama
    proxy = start(probe_capabilities=False)
    fake.push(say(HERMES))  # gemma:2b refuses tools before it answers: this is the prompted round's
    got = post(proxy, "/v1/chat/completions", {**ASK, "model": "gemma:2b"})
    assert answer_calls(got.json()) == [("get_weather", {"city": "Paris"})], got.text
    assert got.json()["sanctum"]["omens"][0]["reason"] == "tools_rejected"
    native, prompted = asked(fake.requests)
    assert native["tools"] and "tools" not in prompted  # the client's round, then prompted
    wait_until(lambda: checked(fake.requests), 5, "the proxy's own check")


def test_the_harmony_parsers_quoted_arguments_are_the_answer_in_one_round(ollama):
    fake, start = ollama
    fake.push(fail(500, HARMONY_PARSE_ERROR.replace("'{\"city\": \"Paris\"'", "'{\"city\": \"Paris\"}'")))
    got = post(start(), "/v1/chat/completions", ASK)
    assert answer_calls(got.json()) == [("get_weather", {"city": "Paris"})], got.text
    assert len(fake.requests) == 1


def test_an_unrelated_native_error_reaches_the_client_with_its_status(ollama):
    fake, start = ollama
    got = post(start(), "/v1/chat/completions", {**ASK, "model": "nope:1b"})
    assert got.status_code == 404 and got.json()["error"]["message"] == "model 'nope:1b' not found"


def test_the_messages_door_goes_native_too(ollama):
    fake, start = ollama
    fake.push(call("get_weather", {"city": "Paris"}))
    body = {"model": "qwen3:0.6b", "max_tokens": 300, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}
    got = post(start(), "/v1/messages", body)
    assert got.status_code == 200, got.text
    assert [b["input"] for b in got.json()["content"] if b["type"] == "tool_use"] == [{"city": "Paris"}]
    assert fake.requests[0]["options"] == {"num_predict": 300} and fake.v1_requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_the_native_doors_options_reach_ollama_byte_for_byte_on_every_round(ollama, stream):
    fake, start = ollama
    fake.push(call("get_weather", {"town": "Paris"}), say('{"name": "get_weather", "arguments": {"city": "Paris"}}'))
    body = {**ASK, "stream": stream, "options": NATIVE_OPTIONS, "keep_alive": "5m", "think": False}
    got = post(start(), "/api/chat", body)
    assert got.status_code == 200, got.text
    objects = [json.loads(line) for line in got.text.splitlines() if line]
    calls = [c["function"] for o in objects for c in o["message"].get("tool_calls") or ()]
    assert calls == [{"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert len(fake.requests) == 2
    for sent in fake.requests:
        assert orjson.dumps(sent["options"]) == orjson.dumps(NATIVE_OPTIONS)  # the same bytes, in its order
        assert sent["keep_alive"] == "5m" and sent["think"] is False and OLLAMA_FIELDS not in sent


def test_a_v1_upstream_never_receives_the_stash(client, fake):
    fake[0].push(Step(body=completion("Sunny.")))
    got = client.post("/api/chat", json={"model": "m", "messages": ASK["messages"], "stream": False,
                                         "options": NATIVE_OPTIONS, "keep_alive": "5m"})
    assert got.status_code == 200, got.text
    assert OLLAMA_FIELDS not in fake[0].requests[0] and fake[0].requests[0]["temperature"] == 0.2


def test_with_ollama_native_off_rounds_go_to_v1_without_the_stash(ollama):
    fake, start = ollama
    fake.push(say("Sunny."))
    got = post(start(ollama_native=False), "/api/chat",
               {"model": "qwen3:0.6b", "messages": ASK["messages"], "stream": False, "keep_alive": "5m"})
    assert got.status_code == 200, got.text
    assert fake.requests == [] and OLLAMA_FIELDS not in fake.v1_requests[0]
    assert "/api/version" not in [p for _, p, _ in fake.seen]


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstream_key_is_masked_in_native_answers_also_split_across_lines(ollama, stream):
    fake, start = ollama
    proxy = start(upstream_api_key="sk-upstream-secret-42")
    fake.push(say("I read the key sk-upstream-secret-42 in my prompt.", size=5))
    body = {"model": "qwen3:0.6b", "messages": ASK["messages"]}
    text = str(streamed(proxy, body)) if stream else post(proxy, "/v1/chat/completions", body).text
    assert "secret-42" not in text and "***" in text
    assert fake.headers[-1]["authorization"] == "Bearer sk-upstream-secret-42"


def test_a_native_stream_over_max_answer_bytes_ends_with_an_error_event(ollama):
    fake, start = ollama
    fake.push(say("x" * 5000, size=100))
    events = streamed(start(max_answer_bytes=4096), {"model": "qwen3:0.6b", "messages": ASK["messages"]})
    assert "max_answer_bytes" in events[-1]["error"]["message"]
