"""The translated endpoints pass what the chat answer carries that has a place in their shapes: a refusal
(Responses `refusal` part and `response.refusal.delta/done`; Messages stop_reason `refusal`), logprobs
(Responses output_text `logprobs` when asked via `include`), reasoning (Responses reasoning item, Messages
thinking block), usage details (cached and reasoning tokens) and the upstream's model; read by the official
SDKs."""

from __future__ import annotations

from typing import Any

import anthropic
import openai

from tests.fakes.upstream import Step, content_chunks, several
from tests.test_lossless import LOGPROBS, full

TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
REFUSAL = "I can't help with that."


def sdk(proxy: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy + "/v1", api_key="none", max_retries=0)


def refusal_chunks() -> list[dict[str, Any]]:
    chunks = content_chunks("")
    refusal = {**chunks[0], "choices": [{"index": 0, "delta": {"refusal": REFUSAL}, "finish_reason": None}]}
    return [chunks[0], refusal, chunks[-1]]


def logprob_chunks(text: str) -> list[dict[str, Any]]:
    chunks = content_chunks(text, size=3)
    for c in chunks:
        piece = c["choices"][0]["delta"].get("content")
        if piece:
            c["choices"][0]["logprobs"] = {"content": [{"token": piece, "logprob": -0.25, "bytes": list(piece.encode()),
                                                        "top_logprobs": [{"token": piece, "logprob": -0.25,
                                                                          "bytes": list(piece.encode())}]}],
                                           "refusal": None}
    return chunks


def test_responses_carry_reasoning_logprobs_usage_details_and_the_upstreams_model(proxy, fake):
    fake[0].push(Step(body=full("Hi there.")))
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input="Hi", tools=[TOOL],  # type: ignore[list-item]
                                           include=["message.output_text.logprobs"])
    assert fake[0].requests[0]["logprobs"] is True
    assert response.model == "fake-model"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning" and reasoning.content and reasoning.content[0].text == "Thinking."
    message = response.output[1]
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text" and part.text == "Hi there."
    assert [(p.token, p.logprob, p.bytes) for p in part.logprobs or []] == [
        (t["token"], t["logprob"], t["bytes"]) for t in LOGPROBS["content"]]
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 8
    assert response.usage.output_tokens_details.reasoning_tokens == 3


def test_responses_logprobs_only_when_asked(proxy, fake):
    fake[0].push(Step(body=full("Hi there.")))
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input="Hi")
    assert "logprobs" not in fake[0].requests[0]
    message = next(item for item in response.output if item.type == "message")
    assert message.content[0].type == "output_text" and message.content[0].logprobs == []


def test_responses_streamed_logprobs_go_with_their_deltas(proxy, fake):
    fake[0].push(Step(chunks=logprob_chunks("Hello there.")))
    with sdk(proxy) as client, client.responses.stream(model="m", input="Hi",
                                                        include=["message.output_text.logprobs"]) as stream:
        deltas = [e for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(d.delta for d in deltas) == "Hello there."
    assert "".join(lp.token for d in deltas for lp in d.logprobs) == "Hello there."
    part = next(item for item in final.output if item.type == "message").content[0]
    assert part.type == "output_text" and "".join(lp.token for lp in part.logprobs or []) == "Hello there."


def test_a_refusal_is_a_refusal_part(proxy, fake):
    fake[0].push(Step(body=several({"content": None, "refusal": REFUSAL})))
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input="Do something bad.", tools=[TOOL])  # type: ignore[list-item]
    message = response.output[0]
    assert message.type == "message" and [(p.type, getattr(p, "refusal", None)) for p in message.content] == [
        ("refusal", REFUSAL)]


def test_a_streamed_refusal_is_refusal_events_and_part(proxy, fake):
    fake[0].push(Step(chunks=refusal_chunks()))
    with sdk(proxy) as client, client.responses.stream(model="m", input="Do something bad.",
                                                        tools=[TOOL]) as stream:  # type: ignore[list-item]
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    done = next(e for e in events if e.type == "response.refusal.done")
    assert done.refusal == REFUSAL
    message = final.output[0]
    assert message.type == "message" and message.content[0].type == "refusal"
    assert message.content[0].refusal == REFUSAL


def test_messages_carry_thinking_cached_tokens_the_asked_model_and_a_refusal(proxy, fake):
    fake[0].push(Step(body=full("Hi there.")), Step(body=several({"content": None, "refusal": REFUSAL})))
    client = anthropic.Anthropic(base_url=proxy, api_key="none", max_retries=0)
    ask: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
    message = client.messages.create(**ask)
    assert message.model == "m"  # the client's, as a stream's message_start names it (issue 29)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].type == "thinking" and message.content[0].thinking == "Thinking."
    assert message.usage.cache_read_input_tokens == 8 and message.usage.input_tokens == 2
    refused = client.messages.create(**ask)
    assert refused.stop_reason == "refusal"
    assert [(b.type, getattr(b, "text", None)) for b in refused.content] == [("text", REFUSAL)]


HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_responses_streamed_text_equals_the_unstreamed_text(proxy, fake):
    text = "Let me check. " + HERMES
    fake[0].push(Step(body=full(text)), Step(chunks=content_chunks(text, size=2)))
    with sdk(proxy) as client:
        plain = client.responses.create(model="m", input="Weather?", tools=[TOOL])  # type: ignore[list-item]
        with client.responses.stream(model="m", input="Weather?", tools=[TOOL]) as stream:  # type: ignore[list-item]
            final = stream.get_final_response()
    assert final.output_text == plain.output_text == "Let me check."


def test_messages_streamed_text_equals_the_unstreamed_text(proxy, fake):
    text = "Let me check. " + HERMES
    fake[0].push(Step(body=full(text)), Step(chunks=content_chunks(text, size=2)))
    client = anthropic.Anthropic(base_url=proxy, api_key="none", max_retries=0)
    tool = {"name": "get_weather", "input_schema": TOOL["parameters"]}
    ask: dict[str, Any] = {"model": "m", "max_tokens": 100, "tools": [tool],
                           "messages": [{"role": "user", "content": "Weather?"}]}
    plain = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    texts = [[b.text for b in m.content if b.type == "text"] for m in (plain, final)]
    assert texts[0] == texts[1] == ["Let me check."]
