"""The setting `reasoning_format`: "keep" leaves reasoning markup in content as sent; "split" moves it into
`reasoning_content` the way llama.cpp's `--reasoning-format deepseek` does, streamed live as reasoning_content
deltas (never held back by the call-markup hold), the same text streamed or not."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanctum_proxy.core.reasoning import Splitter, split
from tests.fakes.upstream import Step, completion, content_chunks
from tests.stream_rules import read_stream
from tests.tools import WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
THOUGHT = '<think>\nA call would look like {"name": "get_weather"}. No tool is needed.\n</think>\n\n'
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def streamed(proxy: str, body: dict) -> object:
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**body, "stream": True}, timeout=20) as r:
        return read_stream(r.read())


def test_keep_is_the_default_and_leaves_reasoning_in_content(client, proxy, fake):
    fake[0].push(Step(body=completion(THOUGHT + "The answer is 42.")), Step(chunks=content_chunks(
        THOUGHT + "The answer is 42.")))
    message = client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    assert message["content"] == THOUGHT + "The answer is 42." and "reasoning_content" not in message
    got = streamed(proxy, ASK)
    assert got.content == THOUGHT + "The answer is 42." and got.reasoning == {}


def test_split_moves_reasoning_into_reasoning_content(make_proxy, fake):
    proxy = make_proxy(reasoning_format="split")
    fake[0].push(Step(body=completion(THOUGHT + "The answer is 42.")))
    message = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20).json()["choices"][0]["message"]
    assert message["content"] == "The answer is 42."
    assert message["reasoning_content"] == 'A call would look like {"name": "get_weather"}. No tool is needed.'


@pytest.mark.parametrize("size", [1, 3, 50])
def test_split_streams_the_same_text_as_not_streamed_and_the_call_after_it(make_proxy, fake, size):
    proxy = make_proxy(reasoning_format="split")
    text = THOUGHT + "Let me look. " + HERMES
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)))
    plain = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20).json()["choices"][0]
    got = streamed(proxy, ASK)
    assert got.content == plain["message"]["content"] == "Let me look."
    assert got.reasoning == {"reasoning_content": plain["message"]["reasoning_content"]}
    call = plain["message"]["tool_calls"][0]["function"]
    assert got.parsed_calls() == [{"name": call["name"], "arguments": json.loads(call["arguments"])}]
    assert got.finish_reason == plain["finish_reason"] == "tool_calls"


def test_split_reasoning_is_live_never_held_by_the_call_markup_hold(make_proxy, fake):
    proxy = make_proxy(reasoning_format="split")
    # The upstream dies inside the reasoning: what the client got came before the end, so it was live.
    fake[0].push(Step(chunks=content_chunks('<think>A call looks like <tool_call>{"name": "x"}</tool_call>, '
                                            "but I only think so, and think on and on", size=6), die_after=12))
    got = streamed(proxy, ASK)
    assert got.error is not None and got.content == ""
    assert got.reasoning["reasoning_content"].startswith('A call looks like <tool_call>{"name": "x"}</tool_call>')


_TEXT = st.lists(st.sampled_from(["a", " ", "\n", "<think>", "</think>", "[THINK]", "[/THINK]", "<th", "<", "x",
                                  "<|channel>thought", "<channel|>", "<|chan"]),
                 max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=_TEXT, size=st.integers(1, 6))
def test_the_splitter_gives_the_same_text_fed_in_pieces_or_whole(text: str, size: int) -> None:
    splitter = Splitter()
    pieces = [p for i in range(0, len(text), size) for p in splitter.feed(text[i:i + size])] + splitter.flush()
    content = "".join(t for f, t in pieces if f == "content")
    thought = "".join(t for f, t in pieces if f == "reasoning_content")
    assert (content, thought) == split(text)
    assert all(t for _, t in pieces)


@pytest.mark.parametrize("size", [1, 5])
def test_split_in_the_responses_and_messages_apis_streamed_or_not(make_proxy, fake, size):
    proxy = make_proxy(reasoning_format="split")
    text = THOUGHT + "Sunny in Paris."
    reasoning = 'A call would look like {"name": "get_weather"}. No tool is needed.'
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)),
                 Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)))
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    with openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0) as client:
        plain = client.responses.create(model="m", input="Weather?", tools=[tool])  # type: ignore[list-item]
        with client.responses.stream(model="m", input="Weather?", tools=[tool]) as stream:  # type: ignore[list-item]
            final = stream.get_final_response()
    for response in (plain, final):
        assert response.output_text == "Sunny in Paris."
        item = next(i for i in response.output if i.type == "reasoning")
        assert item.type == "reasoning" and item.content and item.content[0].text == reasoning
    claude = anthropic.Anthropic(base_url=proxy, api_key="x", max_retries=0)
    ask = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "Weather?"}],
           "tools": [{"name": "get_weather", "input_schema": tool["parameters"]}]}
    message = claude.messages.create(**ask)  # type: ignore[arg-type]
    with claude.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        streamed_message = stream.get_final_message()
    for got in (message, streamed_message):
        blocks = {b.type: b for b in got.content}
        assert blocks["text"].text == "Sunny in Paris." and blocks["thinking"].thinking == reasoning  # type: ignore[union-attr]


GEMMA4_THOUGHT = "<|channel>thought\nThe user wants Paris. <|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}" \
                 "<tool_call|> would be wrong.<channel|>"
GEMMA4_CALL = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'


@pytest.mark.parametrize("size", [1, 5, 200])
def test_gemma_4s_thought_channel_is_reasoning_and_its_call_after_it_the_call(make_proxy, fake, size):
    """Gemma 4 (its chat template's thought channel): the call thought of inside the channel is no call; split
    moves the channel's text into reasoning_content, streamed or not."""
    proxy = make_proxy(reasoning_format="split")
    text = GEMMA4_THOUGHT + GEMMA4_CALL
    fake[0].push(Step(body=completion(text)), Step(chunks=content_chunks(text, size=size)))
    plain = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20).json()["choices"][0]["message"]
    assert [json.loads(c["function"]["arguments"]) for c in plain["tool_calls"]] == [{"city": "Paris"}]
    assert plain["reasoning_content"].startswith("The user wants Paris.") and "content" not in plain or \
        not plain["content"], plain
    got = streamed(proxy, ASK)
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert got.reasoning == {"reasoning_content": plain["reasoning_content"]}


# Magistral writes `[THINK]...[/THINK]` (mistralai/Magistral-Small-2509 chat template, vLLM's mistral reasoning
# parser tests); no client folds it as it folds `<think>`, so even under "keep" it leaves content.
MAGISTRAL = ('[THINK]The user wants the weather. A call looks like [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}, '
             'but Paris is asked.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}')


@pytest.mark.parametrize("size", [1, 3, 50])
def test_keep_still_takes_magistral_reasoning_out_and_never_reads_the_call_it_quotes(client, proxy, fake, size):
    fake[0].push(Step(body=completion(MAGISTRAL)), Step(chunks=content_chunks(MAGISTRAL, size=size)))
    plain = client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    got = streamed(proxy, ASK)
    thought = MAGISTRAL[len("[THINK]") : MAGISTRAL.index("[/THINK]")]
    assert plain["content"] is None and plain["reasoning_content"] == thought
    assert [json.loads(c["function"]["arguments"]) for c in plain["tool_calls"]] == [{"city": "Paris"}]
    assert got.content == "" and got.reasoning == {"reasoning_content": thought}
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


# Reasoning the template opened (DeepSeek-R1, QwQ): the answer holds only its closer. Under "keep" it stays in
# content as clients fold it (their `</think>` handling); a call it quotes is never read.
ORPHAN = ('I could write <tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>, but Paris '
          'is asked.\n</think>\n\n' + HERMES)


@pytest.mark.parametrize("size", [1, 3, 50])
def test_a_call_quoted_in_reasoning_the_template_opened_is_never_read(client, proxy, fake, size):
    fake[0].push(Step(body=completion(ORPHAN)), Step(chunks=content_chunks(ORPHAN, size=size)))
    plain = client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    got = streamed(proxy, ASK)
    kept = ORPHAN[: ORPHAN.index("</think>") + len("</think>")]
    assert plain["content"] == got.content == kept
    assert [json.loads(c["function"]["arguments"]) for c in plain["tool_calls"]] == [{"city": "Paris"}]
    assert got.parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
