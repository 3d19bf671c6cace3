"""Every answer, chunk and error the proxy sends, over a set of scenarios (plain, calls, repaired, corrected,
n > 1, reasoning kept and split, refusal, every optional field, logprobs, usage, errors; the Responses and
Messages APIs), checked against the OpenAI OpenAPI spec's schemas and against the official SDKs' own models
in strict mode (openai-python's ChatCompletion / ChatCompletionChunk / Response / ResponseStreamEvent,
anthropic's Message / RawMessageStreamEvent)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from tests.fakes.upstream import (
    LLAMA_ONE_CHOICE,
    Step,
    completion,
    content_chunks,
    llama_tool_chunks,
    native_call,
    several,
    several_chunks,
)
from tests.openapi_shapes import check, check_event, strict
from tests.stream_rules import events, named_events
from tests.test_lossless import full
from tests.tools import WEATHER

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                       "tools": [WEATHER]}
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "get_forecast", "arguments": {"city": "Paris"}}</tool_call>'
THOUGHT = "<think>\nThe user wants the weather.\n</think>\n\n"
USAGE_CHUNK = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
               "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def delta_chunks(field_name: str, text: str, finish: str = "stop") -> list[dict[str, Any]]:
    """A stream whose deltas carry `field_name` (reasoning_content, refusal) before a short content."""
    chunks = content_chunks("Done.")
    head = {**chunks[0], "choices": [{"index": 0, "delta": {field_name: text}, "finish_reason": None}]}
    return [chunks[0], head, *chunks[1:-1], {**chunks[-1], "choices": [{**chunks[-1]["choices"][0],
                                                                        "finish_reason": finish}]}]


def with_logprobs(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for c in chunks:
        text = c["choices"][0]["delta"].get("content") if c["choices"] else None
        if text:
            c["choices"][0]["logprobs"] = {"content": [{"token": text, "logprob": -0.5,
                                                        "bytes": list(text.encode()), "top_logprobs": []}],
                                           "refusal": None}
    return chunks


@dataclass
class Scenario:
    plain: list[Step]
    streamed: list[Step]
    body: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)


def _scenarios() -> dict[str, Scenario]:
    refusal = {"content": None, "refusal": "I can't help with that."}
    return {
        "plain": Scenario([Step(body=completion("Hello."))], [Step(chunks=content_chunks("Hello."))],
                          {"tools": None}),
        "native_call": Scenario(
            [Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}')], "tool_calls"))],
            [Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}'))]),
        "repaired": Scenario([Step(body=completion("Let me check. " + HERMES))],
                             [Step(chunks=content_chunks("Let me check. " + HERMES))]),
        "corrected": Scenario([Step(body=completion(UNKNOWN)), Step(body=completion(HERMES))],
                              [Step(chunks=content_chunks(UNKNOWN)), Step(chunks=content_chunks(HERMES))]),
        "n_choices": Scenario([Step(body=several({"content": "A."}, {"content": HERMES}))],
                              [Step(chunks=several_chunks("A.", "B " + HERMES))], {"n": 2}),
        "reasoning_field": Scenario(
            [Step(body=full("The answer."))],
            [Step(chunks=delta_chunks("reasoning_content", "Thinking it over."))]),
        "reasoning_kept": Scenario([Step(body=completion(THOUGHT + "Sunny."))],
                                   [Step(chunks=content_chunks(THOUGHT + "Sunny."))]),
        "reasoning_split": Scenario([Step(body=completion(THOUGHT + HERMES))],
                                    [Step(chunks=content_chunks(THOUGHT + HERMES))],
                                    flags={"reasoning_format": "split"}),
        "refusal": Scenario([Step(body=several(refusal))], [Step(chunks=delta_chunks("refusal", refusal["refusal"]))]),
        "every_field": Scenario([Step(body=full("Hi there. " + HERMES))],
                                [Step(chunks=with_logprobs(content_chunks("Hi there.")) + [USAGE_CHUNK])],
                                {"stream_options": {"include_usage": True}}),
    }


SCENARIOS = _scenarios()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_chat_completion_is_valid_under_the_spec_and_the_sdk_strict_model(make_proxy, fake, name):
    scenario = SCENARIOS[name]
    proxy = make_proxy(**scenario.flags)
    fake[0].push(*scenario.plain)
    body = {k: v for k, v in {**ASK, **scenario.body}.items() if v is not None and k != "stream_options"}
    got = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=20)
    assert got.status_code == 200, got.text
    answer = got.json()
    check("CreateChatCompletionResponse", answer)
    strict(ChatCompletion, answer)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_chunk_is_valid_under_the_spec_and_the_sdk_strict_model(make_proxy, fake, name):
    scenario = SCENARIOS[name]
    proxy = make_proxy(**scenario.flags)
    fake[0].push(*scenario.streamed)
    body = {k: v for k, v in {**ASK, **scenario.body, "stream": True}.items() if v is not None}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        raw = r.read()
    chunks = [orjson.loads(d) for _, d, _ in events(raw) if d is not None and d != b"[DONE]"]
    assert len(chunks) >= 2 and all("error" not in c for c in chunks), raw[:500]
    for chunk in chunks:
        check("CreateChatCompletionStreamResponse", chunk)
        strict(ChatCompletionChunk, chunk)


ERRORS = {
    "upstream_error": ([Step(status=LLAMA_ONE_CHOICE[0], body=LLAMA_ONE_CHOICE[1])], {"n": 2}, {}),
    "surrender": ([Step(body=completion(UNKNOWN))], {"sanctum": {"max_repair_rounds": 0}}, {}),
    "bad_request": ([], {"messages": "not a list"}, {}),
    "unknown_model_route": ([Step(status=404, body={"error": {"message": "model 'm' not found", "type": "api_error",
                                                              "param": None, "code": None}})], {}, {}),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_valid_error_responses(make_proxy, fake, name):
    steps, body, flags = ERRORS[name]
    proxy = make_proxy(**flags)
    fake[0].push(*steps)
    got = httpx.post(proxy + "/v1/chat/completions", json={**ASK, **body}, timeout=20)
    assert got.status_code >= 400
    check("ErrorResponse", got.json())


def test_an_error_inside_a_stream_is_a_valid_error_response(proxy, fake):
    fake[0].push(Step(chunks=content_chunks("Hello there, friend", size=3), die_after=3))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        raw = r.read()
    data = [orjson.loads(d) for _, d, _ in events(raw) if d is not None]
    assert "error" in data[-1]
    check("ErrorResponse", data[-1])
    for chunk in data[:-1]:
        check("CreateChatCompletionStreamResponse", chunk)


# The Responses API.

TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
RESPONSES = {
    "text": ([Step(body=completion("Hello."))], [Step(chunks=content_chunks("Hello."))]),
    "call": ([Step(body=completion("Let me check. " + HERMES))],
             [Step(chunks=content_chunks("Let me check. " + HERMES))]),
    "reasoning": ([Step(body=full("The answer."))], [Step(chunks=delta_chunks("reasoning_content", "Thinking."))]),
    "refusal": ([Step(body=several({"content": None, "refusal": "No."}))],
                [Step(chunks=delta_chunks("refusal", "No."))]),
    "logprobs": ([Step(body=full("Hi there."))], [Step(chunks=with_logprobs(content_chunks("Hi there.")))]),
    # reasoning streamed live (its item / block first), then text and a call
    "reasoning_call": ([Step(body=full("Let me check. " + HERMES))],
                       [Step(chunks=delta_chunks("reasoning_content", "Thinking.")[:2]
                             + content_chunks("Let me check. " + HERMES)[1:])]),
}
# `<think>` in content with reasoning_format = "split": the reasoning streamed live as its own events
SPLIT = ([Step(body=completion(THOUGHT + "Let me check. " + HERMES))],
         [Step(chunks=content_chunks(THOUGHT + "Let me check. " + HERMES, size=3))])


@pytest.mark.parametrize("name", [*RESPONSES, "split"])
def test_responses_api_objects_and_events_are_valid(make_proxy, fake, name):
    proxy = make_proxy(**({"reasoning_format": "split"} if name == "split" else {}))
    plain, streamed = RESPONSES.get(name) or SPLIT
    ask = {"model": "m", "input": "Weather in Paris?", "tools": [TOOL], "include": ["message.output_text.logprobs"]}
    fake[0].push(*plain)
    got = httpx.post(proxy + "/v1/responses", json=ask, timeout=20)
    assert got.status_code == 200, got.text
    check("Response", got.json())
    strict(Response, got.json())
    fake[0].push(*streamed)
    with httpx.stream("POST", proxy + "/v1/responses", json={**ask, "stream": True}, timeout=20) as r:
        got_events, _ = named_events(r.read())
    assert got_events and got_events[-1]["type"] == "response.completed"
    if name.startswith("reasoning") or name == "split":  # the reasoning events are among those checked
        assert "response.reasoning_text.delta" in [e["type"] for e in got_events]
    for event in got_events:
        check_event("ResponseStreamEvent", event)
        strict(ResponseStreamEvent, event)


# The Messages API (the anthropic SDK's models; the OpenAI spec has no part in it).

MESSAGES = RESPONSES


@pytest.mark.parametrize("name", [*MESSAGES, "split"])
def test_messages_api_messages_and_events_are_valid_sdk_models(make_proxy, fake, name):
    proxy = make_proxy(**({"reasoning_format": "split"} if name == "split" else {}))
    plain, streamed = MESSAGES.get(name) or SPLIT
    tool = {"name": "get_weather", "input_schema": TOOL["parameters"]}
    ask = {"model": "m", "max_tokens": 100, "tools": [tool], "messages": [{"role": "user", "content": "Weather?"}]}
    fake[0].push(*plain)
    got = httpx.post(proxy + "/v1/messages", json=ask, timeout=20)
    assert got.status_code == 200, got.text
    strict(Message, {k: v for k, v in got.json().items() if k != "sanctum"})
    fake[0].push(*streamed)
    with httpx.stream("POST", proxy + "/v1/messages", json={**ask, "stream": True}, timeout=20) as r:
        got_events, _ = named_events(r.read())
    assert got_events and got_events[-1]["type"] == "message_stop"
    if name.startswith("reasoning") or name == "split":  # the thinking events are among those checked
        assert "thinking_delta" in [e.get("delta", {}).get("type") for e in got_events]
    for event in got_events:
        if event["type"] != "ping":  # Anthropic's keep-alive event: the SDK's stream reader skips it
            strict(RawMessageStreamEvent, event)
