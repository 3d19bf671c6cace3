"""`tool_choice: "none"` answered with a call anyway (Ollama 0.32 ignores tool_choice: ollama/ollama#17921, "none
still calls tools"): no call reaches the client as a call. The request is asked once more without tools for a
text answer; a call still made then is taken out of the text. Through the proxy on every door that has
tool_choice (chat completions, Responses, Messages), streamed and not."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import read_stream
from tests.tools import CITY, WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
       "tools": [WEATHER], "tool_choice": "none"}
CALL = '{"city": "Paris"}'
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TEXT = "I cannot look it up now; Paris is usually mild in spring."


def native(stream: bool) -> Step:
    """Ollama /v1 with tool_choice "none": the model's call as a native call all the same."""
    if stream:
        return Step(chunks=llama_tool_chunks("get_weather", CALL))
    return Step(body=completion(None, [native_call("get_weather", CALL)], "tool_calls"))


def text(content: str, stream: bool) -> Step:
    return Step(chunks=content_chunks(content)) if stream else Step(body=completion(content))


def chat(proxy: str, stream: bool, body: dict[str, Any] = ASK) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the message, omens) a client gets, streamed or not."""
    if not stream:
        got = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=20).json()
        choice = got["choices"][0]
        return {**choice["message"], "finish_reason": choice["finish_reason"]}, got["sanctum"]["omens"]
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**body, "stream": True}, timeout=20) as r:
        streamed = read_stream(r.read())
    message = {"content": streamed.content, "finish_reason": streamed.finish_reason}
    if streamed.calls:
        message["tool_calls"] = streamed.calls
    return message, streamed.omens


@pytest.mark.parametrize("stream", [False, True])
def test_a_native_call_to_tool_choice_none_is_asked_again_for_text(proxy, fake, stream):
    fake[0].push(native(stream), text(TEXT, stream))
    message, omens = chat(proxy, stream)
    assert message["content"] == TEXT and "tool_calls" not in message and message["finish_reason"] == "stop"
    assert [(o["type"], o.get("reason"), o.get("spell")) for o in omens] == [
        ("SpellCallRejected", "calls_not_allowed", "get_weather")]
    first, again = fake[0].requests
    assert first["tools"] == [WEATHER] and first["tool_choice"] == "none"  # the client's request as it came
    assert "tools" not in again and "tool_choice" not in again  # the conversation alone
    assert again["messages"][-1] == ASK["messages"][-1]


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_made_again_is_taken_out_of_the_text(proxy, fake, stream):
    fake[0].push(text("Let me check. " + HERMES, stream), text("I would look it up: " + HERMES, stream))
    message, omens = chat(proxy, stream)
    # A stream keeps the text it showed before the call (live), then the text round's.
    assert message["content"] == ("Let me check. " if stream else "") + "I would look it up:"
    assert "tool_calls" not in message and message["finish_reason"] == "stop" and "<tool_call>" not in str(message)
    assert [(o["type"], o.get("reason"), o.get("spell")) for o in omens] == [
        ("SpellCallRejected", "calls_not_allowed", "get_weather"),
        ("SpellCallsDropped", "tool_choice_none", "get_weather")]
    assert len(fake[0].requests) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_text_answer_to_tool_choice_none_is_one_round(proxy, fake, stream):
    fake[0].push(text(TEXT, stream))
    message, omens = chat(proxy, stream)
    assert message["content"] == TEXT and omens == [] and len(fake[0].requests) == 1


def test_without_repair_rounds_the_call_is_taken_out_at_once(proxy, fake):
    fake[0].push(text("Let me check. " + HERMES, False))
    message, omens = chat(proxy, False, {**ASK, "sanctum": {"max_repair_rounds": 0}})
    assert message["content"] == "Let me check." and "tool_calls" not in message
    assert [o["type"] for o in omens] == ["SpellCallsDropped"] and len(fake[0].requests) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompted_round_had_no_tools_so_its_call_is_taken_out_at_once(make_proxy, fake, stream):
    fake[0].push(text("Let me check. " + HERMES, stream))
    message, omens = chat(make_proxy(spell_calling="prompted"), stream)
    assert message["content"] == "Let me check." and "tool_calls" not in message  # the markup never streamed
    assert [(o["type"], o.get("reason")) for o in omens] == [("SpellCallsDropped", "tool_choice_none")]
    assert len(fake[0].requests) == 1 and "tools" not in fake[0].requests[0]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_choice_none_gets_text_and_no_function_call(proxy, fake, stream):
    fake[0].push(native(stream), text(TEXT, stream))
    tool = {"type": "function", "name": "get_weather", "parameters": CITY}
    ask: dict[str, Any] = {"model": "m", "input": "What is the weather in Paris right now?", "tools": [tool],
                           "tool_choice": "none"}
    with openai.OpenAI(base_url=proxy + "/v1", api_key="none", max_retries=0) as client:
        if stream:
            with client.responses.stream(**ask) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(**ask)
    assert [item.type for item in response.output] == ["message"] and response.output_text == TEXT
    assert "tools" not in fake[0].requests[1]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_tool_choice_none_gets_text_and_no_tool_use(proxy, fake, stream):
    fake[0].push(native(stream), text(TEXT, stream))
    client = anthropic.Anthropic(base_url=proxy, api_key="none", max_retries=0)
    ask: dict[str, Any] = {"model": "m", "max_tokens": 100, "tool_choice": {"type": "none"},
                           "tools": [{"name": "get_weather", "input_schema": CITY}],
                           "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}]}
    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", TEXT)]
    assert message.stop_reason == "end_turn" and "tools" not in fake[0].requests[1]
