"""Correction rounds carry the transcript at the cost of only the new tokens (docs/contract.md section 5).

Through the real proxy and the recording fake upstream: a correction round's messages are the first round's
messages byte for byte plus the rejected answer and the correction, its tools (native) or its format section
(prompted) unchanged, and its decoding constrained by what keeps that prefix: tool_choice "required" (native),
a GBNF grammar in the round's own format (llama.cpp, known by its /props), or the answer schema elsewhere.
`correction_context = "fresh"` brings back the JSON-prompt round without the transcript."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.repair.loop import CONSTRAINED_INSTEAD
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import read_stream

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
HISTORY = [{"role": "system", "content": "You are a helpful assistant."},
           {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
           {"role": "user", "content": "Weather in Paris for 2 days?"}]
ASK = {"model": "m", "messages": HISTORY, "tools": TOOLS}
LLAMA_PROPS = {"chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}
BAD_ARGS, GOOD_ARGS = '{"days": 2}', '{"city": "Paris", "days": 2}'


def bad_then_good(mode: str, stream: bool) -> list[Step]:
    if mode == "native":
        if stream:
            return [Step(chunks=llama_tool_chunks("get_weather", BAD_ARGS)),
                    Step(chunks=llama_tool_chunks("get_weather", GOOD_ARGS))]
        return [Step(body=completion(None, [native_call("get_weather", BAD_ARGS)], "tool_calls")),
                Step(body=completion(None, [native_call("get_weather", GOOD_ARGS)], "tool_calls"))]
    bad = f'<tool_call>{{"name": "get_weather", "arguments": {BAD_ARGS}}}</tool_call>'
    good = f'<tool_call>{{"name": "get_weather", "arguments": {GOOD_ARGS}}}</tool_call>'
    if stream:
        return [Step(chunks=content_chunks(bad)), Step(chunks=content_chunks(good))]
    return [Step(body=completion(bad)), Step(body=completion(good))]


def ask(client: httpx.Client, mode: str, stream: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The answer's tool call and omens, streamed or not."""
    body = {**ASK, "stream": stream, "sanctum": {"spell_calling": mode}}
    if not stream:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["tool_calls"][0], r.json()["sanctum"]["omens"]
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        got = read_stream(r.read())
    return {"function": {"name": got.calls[0]["name"], "arguments": got.calls[0]["arguments"]}}, got.omens


def assert_prefix_kept(first: dict[str, Any], second: dict[str, Any]) -> None:
    """The second round's messages are the first round's, byte for byte, plus two new turns."""
    before = first["messages"]
    assert orjson.dumps(second["messages"][:len(before)]) == orjson.dumps(before)
    new = second["messages"][len(before):]
    assert [m["role"] for m in new] == ["assistant", "user"]
    assert "get_weather" in new[0]["content"] and '"days"' in new[0]["content"]  # the rejected answer
    assert "city" in new[1]["content"]  # the correction names what to fix


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_native_correction_keeps_the_tools_and_asks_for_the_call_with_tool_choice(client, fake, stream):
    fake[0].props = LLAMA_PROPS  # the probe (auto mode) says the template takes tools: native, held by tool_choice
    fake[0].push(*bad_then_good("native", stream))
    call, omens = ask(client, "auto", stream)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert second["tools"] == first["tools"] == TOOLS and second["tool_choice"] == "required"
    assert "tool_choice" not in first and "response_format" not in second and "grammar" not in second
    assert omens[0]["type"] == "SpellCallRejected" and omens[0]["correction"] == second["messages"][-1]["content"]


def test_native_correction_where_the_template_may_drop_the_tools_is_a_json_prompt_round(client, fake):
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    fake[0].push(bad_then_good("native", False)[0], Step(body=completion(answer)))
    call, omens = ask(client, "native", False)  # no probe: whether tool_choice holds a call is not known
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    second = fake[0].requests[1]
    assert "tools" not in second and second["response_format"]["type"] == "json_schema"
    assert omens[0]["correction"] == CONSTRAINED_INSTEAD


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_prompted_correction_on_llama_cpp_keeps_the_format_section_and_adds_a_grammar(client, fake, stream):
    fake[0].props = LLAMA_PROPS  # the probe says llama.cpp: it takes a GBNF grammar
    fake[0].push(*bad_then_good("prompted", stream))
    call, omens = ask(client, "prompted", stream)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert "tools" not in second and "response_format" not in second and "grammar" not in first
    grammar = second["grammar"]  # pinned to the tool the correction is about, in the Hermes format
    assert "get_weather" in grammar and "get_time" not in grammar and "<tool_call>" in grammar
    assert omens[0]["correction"] == second["messages"][-1]["content"]


def test_prompted_correction_elsewhere_keeps_the_prompt_and_adds_the_answer_schema(client, fake):
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    fake[0].push(bad_then_good("prompted", False)[0], Step(body=completion(answer)))
    call, omens = ask(client, "prompted", False)  # no /props: not known to be llama.cpp
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert_prefix_kept(first, second)
    assert "grammar" not in second and second["response_format"]["type"] == "json_schema"
    assert omens[0]["correction"] == second["messages"][-1]["content"]


@pytest.mark.parametrize("mode", ["native", "prompted"])
def test_fresh_context_restores_the_json_prompt_round_without_the_transcript(make_proxy, fake, mode):
    fake[0].props = LLAMA_PROPS
    answer = orjson.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}).decode()
    fake[0].push(bad_then_good(mode, False)[0], Step(body=completion(answer)))
    with httpx.Client(base_url=make_proxy(correction_context="fresh"), timeout=20) as client:
        call, omens = ask(client, mode, False)
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris", "days": 2}
    first, second = fake[0].requests
    assert "tools" not in second and "grammar" not in second and second["response_format"]["type"] == "json_schema"
    assert second["messages"][0]["content"] != first["messages"][0]["content"]  # the rewritten format section
    assert [m["content"] for m in second["messages"][1:]] == [m["content"] for m in HISTORY[1:]]
    assert omens[0]["correction"] == CONSTRAINED_INSTEAD  # never a text the model did not read
