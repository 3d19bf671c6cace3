"""Reasoning on the translated endpoints streams as it arrives: POST /v1/responses opens a `reasoning` output
item first and sends `response.reasoning_text.delta` events, POST /v1/messages opens a `thinking` block first
and sends `thinking_delta` events, before the answer's text and calls; the final object (openai-python's
`responses.stream(...).get_final_response()`, anthropic's `messages.stream(...).get_final_message()`) equals the
unstreamed one, reasoning first. The scripted upstream sends llama.cpp's `reasoning_content` deltas (Ollama's
`reasoning`), or `<think>` in content with reasoning_format = "split". Liveness is shown by order, never by time:
reasoning events come before the answer's first text, and before the error of an upstream that died while the
model was still thinking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import named_events

BASE = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}
CLAUDE_TOOL = {"name": "get_weather", "input_schema": PARAMETERS}
PIECES = ("The user ", "wants the weather ", "in Paris.")
THOUGHT = "".join(PIECES)
CORPUS = json.loads((Path(__file__).parent / "corpus" / "harmony.json").read_text())
HARMONY_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
                 for t in CORPUS["tools"]]
THINK = "<think>\nThe user wants the weather in Paris.\n</think>\n\n"


def thinking_chunks(pieces: tuple[str, ...] = PIECES, field: str = "reasoning_content") -> list[dict[str, Any]]:
    """llama.cpp's (`reasoning_content`) or Ollama's (`reasoning`) reasoning deltas, one chunk per piece."""
    return [{**BASE, "choices": [{"index": 0, "delta": {field: p}, "finish_reason": None}]} for p in pieces]


def thinking_then_text(text: str, field: str = "reasoning_content") -> list[dict[str, Any]]:
    chunks = content_chunks(text)
    return [chunks[0], *thinking_chunks(field=field), *chunks[1:]]


def thinking_then_call(arguments: str = '{"city": "Paris"}') -> list[dict[str, Any]]:
    chunks = llama_tool_chunks("get_weather", arguments)
    return [chunks[0], *thinking_chunks(), *chunks[1:]]


def with_reasoning(body: dict[str, Any], thought: str = THOUGHT, field: str = "reasoning_content") -> dict[str, Any]:
    body["choices"][0]["message"][field] = thought
    return body


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)


def unnamed(value: Any, ids: set[str]) -> Any:
    """`value` with each request's own ids (the trace id in `rs_`, `msg_` ids) made equal, and the `parsed`
    and `parsed_arguments` fields openai-python's stream adds to its final response (None without a text format
    or a strict tool) left out."""
    if isinstance(value, dict):
        return {k: unnamed(v, ids) for k, v in value.items() if not (k in ("parsed", "parsed_arguments") and v is None)}
    if isinstance(value, list):
        return [unnamed(v, ids) for v in value]
    if isinstance(value, str):
        for i in ids:
            value = value.replace(i, "ID")
    return value


def responses_both(proxy: str, **ask: Any) -> tuple[Any, Any, list[Any]]:
    """(unstreamed response, streamed final response, the stream's events) through openai-python."""
    with sdk(proxy) as client:
        plain = client.responses.create(model="m", input="Weather in Paris?", **ask)
        with client.responses.stream(model="m", input="Weather in Paris?", **ask) as stream:
            seen = list(stream)
            final = stream.get_final_response()
    return plain, final, seen


def same_output(plain: Any, final: Any) -> list[dict[str, Any]]:
    ids = {plain.id.removeprefix("resp_"), final.id.removeprefix("resp_")}
    ids |= {o.call_id for o in [*plain.output, *final.output] if o.type == "function_call"}  # the proxy's, if made
    got = [unnamed(o.model_dump(), ids) for o in final.output]
    assert got == [unnamed(o.model_dump(), ids) for o in plain.output]
    return got


def messages_both(proxy: str, **ask: Any) -> tuple[Any, Any, list[Any]]:
    """(unstreamed message, streamed final message, the stream's events) through the anthropic SDK."""
    client = claude(proxy)
    request: dict[str, Any] = {"model": "m", "max_tokens": 100,
                               "messages": [{"role": "user", "content": "Weather in Paris?"}], **ask}
    plain = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        seen = list(stream)
        final = stream.get_final_message()
    return plain, final, seen


def same_content(plain: Any, final: Any) -> list[dict[str, Any]]:
    got = [b.model_dump() for b in final.content]
    assert got == [b.model_dump() for b in plain.content]
    return got


# The Responses API.

def test_responses_reasoning_item_streams_first_then_the_text(proxy, fake):
    fake[0].push(Step(body=with_reasoning(completion("Sunny."))), Step(chunks=thinking_then_text("Sunny.")))
    plain, final, seen = responses_both(proxy)
    kinds = [e.type for e in seen]
    deltas = [e for e in seen if e.type == "response.reasoning_text.delta"]
    assert [d.delta for d in deltas] == list(PIECES)  # one event per upstream delta: as they came
    assert kinds.index("response.output_item.added") < kinds.index("response.reasoning_text.delta")
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    added = [e for e in seen if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "reasoning"), (1, "message")]
    assert all(d.output_index == 0 and d.content_index == 0 and d.item_id == added[0].item.id for d in deltas)
    done = next(e for e in seen if e.type == "response.reasoning_text.done")
    assert done.text == THOUGHT
    output = same_output(plain, final)
    assert [o["type"] for o in output] == ["reasoning", "message"] and final.output_text == "Sunny."
    assert output[0]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]


def test_responses_reasoning_then_a_call_equals_the_unstreamed_output(proxy, fake):
    call = native_call("get_weather", '{"city": "Paris"}', "Xy12")
    fake[0].push(Step(body=with_reasoning(completion(None, [call], "tool_calls"))),
                 Step(chunks=thinking_then_call()))
    plain, final, seen = responses_both(proxy, tools=[TOOL])
    kinds = [e.type for e in seen]
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_item.done")
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.function_call_arguments.delta")
    output = same_output(plain, final)
    assert [o["type"] for o in output] == ["reasoning", "function_call"]


@pytest.mark.parametrize("size", [1, 4])
def test_responses_split_think_markup_streams_as_reasoning_before_the_text(make_proxy, fake, size):
    proxy = make_proxy(reasoning_format="split")
    text = THINK + "Let me check. " + '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)))
    plain, final, seen = responses_both(proxy, tools=[TOOL])
    kinds = [e.type for e in seen]
    deltas = [e.delta for e in seen if e.type == "response.reasoning_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "The user wants the weather in Paris."
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    output = same_output(plain, final)
    assert [o["type"] for o in output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Let me check."


def test_responses_ollama_reasoning_field_streams_too(proxy, fake):
    fake[0].push(Step(body=with_reasoning(completion("Sunny."), field="reasoning")),
                 Step(chunks=thinking_then_text("Sunny.", field="reasoning")))
    plain, final, seen = responses_both(proxy)
    assert [e.delta for e in seen if e.type == "response.reasoning_text.delta"] == list(PIECES)
    assert [o["type"] for o in same_output(plain, final)] == ["reasoning", "message"]


def test_responses_reasoning_events_come_before_the_upstream_died(proxy, fake):
    # The upstream dies while the model still thinks: what the client got came before the end, so it was live.
    fake[0].push(Step(chunks=[content_chunks("")[0], *thinking_chunks(), *thinking_chunks()], die_after=4))
    with httpx.stream("POST", proxy + "/v1/responses", json={"model": "m", "input": "Hi", "stream": True},
                      timeout=20) as r:
        events, _ = named_events(r.read())
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["error", "response.failed"]
    assert [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"] == list(PIECES)


def test_responses_reasoning_after_the_text_began_is_an_item_after_the_message(make_proxy, fake):
    # Reasoning markup after answer text (rare): the message item is out, so it comes in an item of its own
    # after it, never lost.
    proxy = make_proxy(reasoning_format="split")
    text = "Sunny. <think>Was that right?</think> Yes."
    fake[0].push(Step(chunks=content_chunks(text, size=3)))
    with sdk(proxy) as client, client.responses.stream(model="m", input="Weather?") as stream:
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["message", "reasoning"]
    assert final.output_text == "Sunny. Yes."
    assert final.output[1].content[0].text == "Was that right?"  # type: ignore[union-attr,index]


def test_responses_harmony_analysis_comes_first_though_it_is_read_at_the_end(proxy, fake):
    # gpt-oss writes its analysis channel into content (vLLM test_openai_tool_parser.py, tests/corpus/harmony.json):
    # the call markup hold keeps it back, the codec reads it as reasoning at the end; no text went out, so the
    # reasoning item is still first.
    case = next(c for c in CORPUS["cases"] if c["id"] == "gptoss-harmony-call-and-final-01")
    text = case["message"]["content"]
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=7)))
    plain, final, seen = responses_both(proxy, tools=HARMONY_TOOLS)
    output = same_output(plain, final)
    assert [o["type"] for o in output] == ["reasoning", "message", "function_call"]
    assert output[0]["content"][0]["text"].startswith('User asks: "What is the weather in Tokyo?"')
    assert final.output_text == case["expect"]["content"]


def test_responses_hidden_correction_round_keeps_the_reasoning_the_client_saw(make_proxy, fake):
    # Round 1 reasons live, then calls without the required argument; the correction round is hidden (its
    # reasoning differs): the stream's one reasoning item holds what the client saw, the call is round 2's.
    proxy = make_proxy(constrain="off")
    again = thinking_then_call()
    again[1:4] = thinking_chunks(("Add the city.",))
    fake[0].push(Step(chunks=thinking_then_call("{}")), Step(chunks=again))
    with sdk(proxy) as client, client.responses.stream(model="m", input="Weather?", tools=[TOOL]) as stream:
        final = stream.get_final_response()
    assert final.sanctum["rounds"] == 2  # type: ignore[attr-defined]
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].content[0].text == THOUGHT  # type: ignore[union-attr,index]
    assert final.output[1].arguments == '{"city": "Paris"}'  # type: ignore[union-attr]


# The Messages API.

def test_messages_thinking_block_streams_first_then_the_text(proxy, fake):
    fake[0].push(Step(body=with_reasoning(completion("Sunny."))), Step(chunks=thinking_then_text("Sunny.")))
    plain, final, seen = messages_both(proxy)
    raw = [e for e in seen if e.type in ("content_block_start", "content_block_delta", "content_block_stop")]
    starts = [(e.index, e.content_block.type) for e in raw if e.type == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text")]
    thinking = [e.delta.thinking for e in raw if e.type == "content_block_delta" and e.delta.type == "thinking_delta"]
    assert thinking == list(PIECES)
    order = [(e.type, e.index) for e in raw if e.type != "content_block_delta"]
    assert order == [("content_block_start", 0), ("content_block_stop", 0), ("content_block_start", 1),
                     ("content_block_stop", 1)]
    content = same_content(plain, final)
    assert [b["type"] for b in content] == ["thinking", "text"]
    assert content[0] == {"type": "thinking", "thinking": THOUGHT, "signature": ""}


def test_messages_thinking_then_a_tool_use_equals_the_unstreamed_message(proxy, fake):
    call = native_call("get_weather", '{"city": "Paris"}', "Xy12")
    fake[0].push(Step(body=with_reasoning(completion(None, [call], "tool_calls"))),
                 Step(chunks=thinking_then_call()))
    plain, final, seen = messages_both(proxy, tools=[CLAUDE_TOOL])
    starts = [e.content_block.type for e in seen if e.type == "content_block_start"]
    assert starts == ["thinking", "tool_use"]
    assert [b["type"] for b in same_content(plain, final)] == ["thinking", "tool_use"]
    assert final.stop_reason == plain.stop_reason == "tool_use"


@pytest.mark.parametrize("size", [1, 4])
def test_messages_split_think_markup_streams_as_thinking_before_the_text(make_proxy, fake, size):
    proxy = make_proxy(reasoning_format="split")
    text = THINK + "Sunny in Paris."
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)))
    plain, final, seen = messages_both(proxy, tools=[CLAUDE_TOOL])
    deltas = [e.delta for e in seen if e.type == "content_block_delta"]
    kinds = [d.type for d in deltas]
    assert kinds.count("thinking_delta") > 1 and kinds.index("thinking_delta") < kinds.index("text_delta")
    assert "thinking_delta" not in kinds[kinds.index("text_delta"):]
    content = same_content(plain, final)
    assert content == [{"type": "thinking", "thinking": "The user wants the weather in Paris.", "signature": ""},
                       {"type": "text", "text": "Sunny in Paris.", "citations": None}]


def test_messages_thinking_events_come_before_the_upstream_died(proxy, fake):
    fake[0].push(Step(chunks=[content_chunks("")[0], *thinking_chunks(), *thinking_chunks()], die_after=4))
    ask = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.stream("POST", proxy + "/v1/messages", json=ask, timeout=20) as r:
        events, _ = named_events(r.read())
    assert events[-1]["type"] == "error"
    thinking = [e["delta"]["thinking"] for e in events
                if e["type"] == "content_block_delta" and e["delta"]["type"] == "thinking_delta"]
    assert thinking == list(PIECES)
