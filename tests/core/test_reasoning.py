"""Reasoning is never read for calls and is kept whole: the span finder (sanctum_proxy/core/reasoning.py), tier 1's
`assess`, the stream assembler, and the proxy on real sockets, streamed and not."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.core import reasoning
from sanctum_proxy.repair.mend import assess
from sanctum_proxy.repair.streaming import Assembler
from sanctum_proxy.repair.toolbox import Toolbox
from tests.fakes.upstream import Step, completion, content_chunks, native_call
from tests.stream_rules import Streamed, read_stream

SEARCH = {"type": "function", "function": {
    "name": "search_web", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
BOOK = Toolbox.from_tools([SEARCH])
ASK = {"model": "m", "messages": [{"role": "user", "content": "What is six times seven?"}], "tools": [SEARCH]}
# The issue's own example: a model that thinks about a call and then answers.
THOUGHT = ('<think>A call would look like {"name": "search_web", "arguments": {"query": "6*7"}}. '
           'No tool is needed.</think>The answer is 42.')
HERMES = '<tool_call>{"name": "search_web", "arguments": {"query": "weather"}}</tool_call>'


# --- the span finder -------------------------------------------------------------------------------------

@pytest.mark.parametrize("opener,closer", [(m.opener, m.closer) for m in reasoning.MARKERS])
def test_every_marker_pair_is_one_span_with_its_markers(opener, closer):
    text = f"a {opener}x {HERMES} y{closer} b"
    start = text.index(opener)
    assert reasoning.spans(text) == [(start, text.index(closer) + len(closer))]
    assert [text[s:e] for s, e in reasoning.outside(text)] == ["a ", " b"]


def test_an_unclosed_opener_runs_to_the_end():
    text = "<think>I will call " + HERMES
    assert reasoning.spans(text) == [(0, len(text))] and reasoning.outside(text) == []


def test_a_closer_alone_first_closes_reasoning_begun_in_the_prompt():
    text = "Maybe " + HERMES + "\n</think>\n\nThe answer."
    end = text.index("</think>") + len("</think>")
    assert reasoning.spans(text) == [(0, end)]


def test_harmony_end_alone_closes_nothing():
    text = "The answer.<|end|>"
    assert reasoning.spans(text) == [] and reasoning.outside(text) == [(0, len(text))]


def test_several_spans_and_text_between():
    text = "<think>a</think>one [THINK]b[/THINK] two"
    assert [text[s:e] for s, e in reasoning.spans(text)] == ["<think>a</think>", "[THINK]b[/THINK]"]
    assert [text[s:e] for s, e in reasoning.outside(text)] == ["one ", " two"]


def test_a_closer_after_an_opener_is_not_an_orphan():
    assert reasoning.first_orphan_closer("<think>a</think>") is None
    assert reasoning.first_orphan_closer("a</think>b<think>") == len("a</think>")


def test_partial_marker_finds_a_suffix_that_may_grow():
    assert reasoning.partial_marker("see <thi", reasoning.OPENERS) == 4
    assert reasoning.partial_marker("see [THI", reasoning.OPENERS) == 4
    assert reasoning.partial_marker("see <b", reasoning.OPENERS) == 6


# --- tier 1 ----------------------------------------------------------------------------------------------

def test_a_thought_of_call_is_no_call_and_the_content_stays_whole():
    got = assess({"role": "assistant", "content": THOUGHT}, BOOK)
    assert got.calls == () and got.problems == () and got.content == THOUGHT


@pytest.mark.parametrize("opener,closer", [(m.opener, m.closer) for m in reasoning.MARKERS])
def test_no_marker_pair_is_read_for_calls(opener, closer):
    content = f"{opener}Maybe {HERMES}{closer}No call needed."
    got = assess({"role": "assistant", "content": content}, BOOK)
    assert got.calls == () and got.problems == () and got.content == content


def test_an_unclosed_think_cut_by_max_tokens_is_no_call():
    content = "<think>I should call " + HERMES[:-5]
    got = assess({"role": "assistant", "content": content}, BOOK, finish_reason="length")
    assert got.calls == () and got.problems == () and got.content == content


def test_a_native_call_beside_reasoning_gets_no_thought_of_calls():
    message = {"role": "assistant", "content": "<think>Or " + HERMES + "?</think>",
               "tool_calls": [native_call("search_web", '{"query": "paris"}')]}
    got = assess(message, BOOK)
    assert [(c.name, c.arguments) for c in got.calls] == [("search_web", '{"query": "paris"}')]
    assert got.content == message["content"] and got.repairs == ()


def test_a_call_after_the_reasoning_is_read_and_the_reasoning_kept_whole():
    thought = "<think>The user wants " + HERMES.replace("weather", "news") + " maybe.</think>"
    got = assess({"role": "assistant", "content": thought + "\n\n" + HERMES}, BOOK)
    assert [orjson.loads(c.arguments) for c in got.calls] == [{"query": "weather"}] and got.content == thought


def test_a_closer_alone_hides_what_came_before_it():
    content = "I could use " + HERMES + "</think>\n\nIt is 42."
    got = assess({"role": "assistant", "content": content}, BOOK)
    assert got.calls == () and got.content == content


def test_reasoning_fields_are_never_read_for_calls():
    for field in reasoning.FIELDS:
        got = assess({"role": "assistant", "content": "42.", field: HERMES}, BOOK)
        assert got.calls == () and got.problems == ()


# --- the stream assembler --------------------------------------------------------------------------------

def feed(pieces: list[str], assembler: Assembler | None = None) -> tuple[Assembler, list[str]]:
    a = assembler or Assembler()
    return a, [a.feed({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]


def pieces_of(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_reasoning_with_call_markup_flows_live(size):
    pieces = pieces_of(THOUGHT, size)
    _, shown = feed(pieces)
    assert "".join(shown) == THOUGHT
    inside = THOUGHT.index("</think>")  # everything inside the reasoning is out before its closer arrives
    assert len("".join(shown[:inside // size])) >= (inside // size) * size - len("</think>")


@pytest.mark.parametrize("opener,closer", [(m.opener, m.closer) for m in reasoning.MARKERS])
def test_every_marker_flows_and_a_call_after_it_is_held(opener, closer):
    thought = f"{opener}Maybe {HERMES}{closer}"
    a, shown = feed(pieces_of(thought + "Sure. " + HERMES, 5))
    assert "".join(shown) == thought + "Sure. "
    assert a.content == thought + "Sure. " + HERMES


@pytest.mark.parametrize("closer", [["</think>"], ["</th", "ink>"], ["</", "think", ">"]])
def test_held_markup_is_let_go_when_a_closer_alone_shows_it_was_reasoning(closer):
    a, shown = feed(["I could use ", HERMES[:20], HERMES[20:], *closer, "\n\nIt is 42."])
    assert "".join(shown) == "I could use " + HERMES + "</think>\n\nIt is 42." and not a.holding
    assert shown[-1] == "\n\nIt is 42.", "released as it came once the closer was seen"


def test_a_held_call_with_no_closer_stays_held_to_the_end():
    a, shown = feed(["Sure. ", HERMES[:20], HERMES[20:], " done"])
    assert "".join(shown) == "Sure. " and a.holding


def test_reasoning_fields_are_taken_live_and_kept_in_the_message():
    a = Assembler()
    a.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "Think " + HERMES[:9]}}]})
    assert a.take_passed() == {"reasoning_content": "Think " + HERMES[:9]}
    a.feed({"choices": [{"index": 0, "delta": {"reasoning": "ollama", "reasoning_content": HERMES[9:]}}]})
    assert a.take_passed() == {"reasoning_content": HERMES[9:], "reasoning": "ollama"}
    assert a.take_passed() == {}
    message = a.message()
    assert message["reasoning_content"] == "Think " + HERMES and message["reasoning"] == "ollama"


# --- through the proxy -----------------------------------------------------------------------------------

def chunks_of(deltas: list[dict[str, Any]], finish: str = "stop") -> list[dict[str, Any]]:
    head = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    out = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                 "finish_reason": None}]}]
    out += [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    return [*out, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]


def stream(proxy: str, body: dict[str, Any]) -> Streamed:
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**body, "stream": True}, timeout=20) as r:
        raw = r.read()
    assert r.status_code == 200, raw[:300]
    return read_stream(raw)


def test_the_thought_of_call_comes_back_as_content(client, fake):
    fake[0].push(Step(body=completion(THOUGHT)))
    r = client.post("/v1/chat/completions", json=ASK)
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == THOUGHT and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop" and len(fake[0].requests) == 1


def test_the_thought_of_call_comes_back_as_content_streamed(proxy, fake):
    fake[0].push(Step(chunks=content_chunks(THOUGHT, size=6)))
    got = stream(proxy, ASK)
    assert got.content == THOUGHT and got.calls == [] and got.finish_reason == "stop"
    assert got.sanctum["rounds"] == 1


def test_streamed_reasoning_is_live_not_held(proxy, fake):
    upstream = fake[0]
    chunks = content_chunks(THOUGHT + " " + "and more " * 8, size=6)
    upstream.push(Step(chunks=chunks, chunk_delay=0.05))
    with httpx.stream("POST", proxy + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=20) as r:
        seen = ""
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in orjson.loads(line[6:]).get("choices") or []:
                    seen += choice["delta"].get("content") or ""
            if '"search_web"' in seen:
                sent_when_seen = upstream.chunks_sent
                break
    assert sent_when_seen < len(chunks) - 10, "the call-shaped reasoning was held back"


def test_a_native_call_beside_reasoning_streamed_and_not(client, proxy, fake):
    thought = "<think>Or " + HERMES + "?</think>"
    call = native_call("search_web", '{"query": "paris"}')
    fake[0].push(Step(body=completion(thought, [call], "tool_calls")))
    message = client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    assert message["content"] == thought and [c["function"]["arguments"] for c in message["tool_calls"]] == [
        '{"query": "paris"}']
    deltas = [{"content": p} for p in pieces_of(thought, 4)]
    deltas += [{"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                                "function": {"name": "search_web", "arguments": '{"query": "paris"}'}}]}]
    fake[0].push(Step(chunks=chunks_of(deltas, "tool_calls")))
    got = stream(proxy, ASK)
    assert got.content == thought and [c["arguments"] for c in got.calls] == ['{"query": "paris"}']


@pytest.mark.parametrize("tools", [True, False])
def test_reasoning_fields_reach_the_client(client, fake, tools):
    body = completion("It is 42.")
    body["choices"][0]["message"].update(reasoning_content="Six times seven. " + HERMES, reasoning="ollama's")
    fake[0].push(Step(body=body))
    message = client.post("/v1/chat/completions", json=ASK if tools else {**ASK, "tools": None}).json()[
        "choices"][0]["message"]
    assert message["reasoning_content"] == "Six times seven. " + HERMES and message["reasoning"] == "ollama's"
    assert message["content"] == "It is 42." and "tool_calls" not in message


@pytest.mark.parametrize("tools", [True, False])
def test_reasoning_fields_stream_live_as_deltas(proxy, fake, tools):
    thought = "Six times seven. " + HERMES
    deltas = [{"reasoning_content": p} for p in pieces_of(thought, 5)] + [{"content": "It is 42."}]
    fake[0].push(Step(chunks=chunks_of(deltas)))
    got = stream(proxy, ASK if tools else {k: v for k, v in ASK.items() if k != "tools"})
    assert got.reasoning == {"reasoning_content": thought} and got.content == "It is 42." and got.calls == []
    with_reasoning = [c for c in got.chunks if c["choices"] and "reasoning_content" in c["choices"][0]["delta"]]
    assert len(with_reasoning) == len(pieces_of(thought, 5)), "one delta per upstream delta: live"


def test_ollama_reasoning_streams_under_its_own_name(proxy, fake):
    fake[0].push(Step(chunks=chunks_of([{"reasoning": "Hmm, " + HERMES}, {"content": "42."}])))
    got = stream(proxy, ASK)
    assert got.reasoning == {"reasoning": "Hmm, " + HERMES} and got.calls == [] and got.content == "42."


def test_a_call_after_reasoning_in_a_prompted_round(make_proxy, fake):
    proxy = make_proxy(spell_calling="prompted")
    thought = "<think>Maybe " + HERMES.replace("weather", "news") + "</think>\n"
    fake[0].push(Step(body=completion(thought + HERMES)))
    with httpx.Client(base_url=proxy, timeout=20) as c:
        message = c.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]
    assert [orjson.loads(call["function"]["arguments"]) for call in message["tool_calls"]] == [{"query": "weather"}]
    assert message["content"] == thought.strip()


def test_reasoning_alone_to_a_tools_request_is_an_empty_answer_asked_again_prompted(client, fake):
    # Ollama cuts everything after a <tool_call> it could not parse: what is left is the reasoning alone.
    fake[0].push(Step(body=completion("<think>I need the weather, so I will call search_web.</think>\n\n")),
                 Step(body=completion(HERMES)))
    r = client.post("/v1/chat/completions", json=ASK)
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "search_web"
    assert r.json()["sanctum"]["omens"][0]["reason"] == "upstream_parse_failure"
    assert "tools" not in fake[0].requests[1]


def test_reasoning_cut_by_max_tokens_is_the_answer_not_a_parse_failure(client, fake):
    fake[0].push(Step(body=completion("<think>Let me think about whether to call", finish_reason="length")))
    r = client.post("/v1/chat/completions", json=ASK)
    assert r.json()["choices"][0]["message"]["content"] == "<think>Let me think about whether to call"
    assert r.json()["choices"][0]["finish_reason"] == "length" and len(fake[0].requests) == 1


def test_gemma_4s_thought_channel_is_reasoning():
    """Gemma 4 writes its thinking as `<|channel>thought\n...<channel|>` before the answer (its chat template);
    a call written inside it is no call, the text after it is the answer."""
    text = '<|channel>thought\nMaybe <|tool_call>call:f{a:1}<tool_call|>?<channel|>The answer.'
    assert [text[s:e] for s, e in reasoning.spans(text)] == [text[:text.index("The")]]
    assert [text[s:e] for s, e in reasoning.outside(text)] == ["The answer."]
    assert reasoning.first_orphan_closer("thinking<channel|>answer") == len("thinking<channel|>")
