"""`n` > 1 (contract "Several choices"): every choice judged and repaired on its own, a choice that needs a
correction re-asked alone (n = 1) and put back in its place, streamed choices under their own index."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.upstream import (
    LLAMA_NO_JINJA,
    LLAMA_ONE_CHOICE,
    Step,
    asked,
    completion,
    content_chunks,
    native_call,
    several,
    several_chunks,
)
from tests.stream_rules import read_choices
from tests.tools import WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER], "n": 3}
HERMES = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "get_forecast", "arguments": {"city": "Paris"}}</tool_call>'


def test_each_choice_is_judged_alone_and_a_bad_one_is_reasked_alone_in_its_place(client, fake):
    fake[0].push(Step(body=several({"content": "It is sunny."}, {"content": UNKNOWN}, {"content": HERMES})),
                 Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}', "call_re")],
                                      "tool_calls")))
    got = client.post("/v1/chat/completions", json=ASK).json()
    first, again = fake[0].requests
    assert first["n"] == 3 and "n" not in again  # the correction round is of that choice alone
    one, two, three = got["choices"]
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    assert one["message"]["content"] == "It is sunny." and one["finish_reason"] == "stop"
    assert two["message"]["tool_calls"][0]["id"] == "call_re" and two["finish_reason"] == "tool_calls"
    call = three["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert three["message"]["content"] is None and three["finish_reason"] == "tool_calls"
    assert got["usage"]["completion_tokens"] == 15 + 5  # the first round once, the re-asked choice's own
    assert got["sanctum"]["rounds"] == 2
    kinds = [(o["type"], o.get("choice")) for o in got["sanctum"]["omens"]]
    assert ("SpellCallRejected", 1) in kinds and ("SpellCallRepaired", 2) in kinds


def test_clean_choices_come_back_as_the_upstream_sent_them(client, fake):
    sent = several({"content": "A.", "refusal": None, "x_extra": 1}, {"content": "B.", "refusal": None})
    sent["choices"][1]["logprobs"] = {"content": [], "refusal": None}
    fake[0].push(Step(body=sent))
    got = client.post("/v1/chat/completions", json={**ASK, "n": 2, "tools": None}).json()
    assert got["choices"] == sent["choices"] and got["usage"] == sent["usage"]
    assert len(fake[0].requests) == 1


def test_an_upstream_that_ignores_n_answers_one_choice(client, fake):
    fake[0].push(Step(body=completion("Only one.")))  # Ollama: n is not read
    got = client.post("/v1/chat/completions", json=ASK).json()
    assert [c["message"]["content"] for c in got["choices"]] == ["Only one."]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_that_refuses_n_says_so_to_the_client(client, fake, stream):
    status, body = LLAMA_ONE_CHOICE
    fake[0].push(Step(status=status, body=body))
    got = client.post("/v1/chat/completions", json={**ASK, "stream": stream})
    assert got.status_code == 400
    assert got.json()["error"]["message"] == "Only one completion choice is allowed"


def test_streamed_choices_keep_their_index_and_each_is_repaired_alone(proxy, fake):
    fake[0].push(Step(chunks=several_chunks("It is sunny in Paris.", "Let me look. " + UNKNOWN, HERMES)),
                 Step(chunks=content_chunks(HERMES)))
    body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got, chunks = read_choices(r.read())
    trace = httpx.get(f"{proxy}/sanctum/traces/{r.headers['x-sanctum-trace-id']}", timeout=20).json()
    assert trace["usage"]["completion_tokens"] == 15 and len(trace["rounds"]) == 4  # every choice's rounds
    assert ("SpellCallRejected", 1) in [(o["type"], o.get("choice")) for o in trace["omens"]]
    first, again = fake[0].requests
    assert first["n"] == 3 and "n" not in again
    assert got[0].content == "It is sunny in Paris." and got[0].finish_reason == "stop"
    assert got[1].content == "Let me look." and got[1].finish_reason == "tool_calls"
    assert got[1].parsed_calls() == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert got[2].content == "" and got[2].parsed_calls() == got[1].parsed_calls()
    assert got[0].usage is not None and got[0].usage["completion_tokens"] == 15  # the correction round sent none
    assert got[0].sanctum is not None and got[0].sanctum["rounds"] == 2
    assert all(c["id"] == "chatcmpl-fake" and c["model"] == "fake-model" for c in chunks)


def test_streamed_choices_without_tools_pass_through_under_their_index(proxy, fake):
    fake[0].push(Step(chunks=several_chunks("one two three four", "five six seven eight")))
    body = {**ASK, "n": 2, "stream": True, "tools": None}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got, chunks = read_choices(r.read())
    assert got[0].content == "one two three four" and got[1].content == "five six seven eight"
    assert got[0].finish_reason == got[1].finish_reason == "stop"
    assert got[0].usage is None and "usage" not in chunks[-1]  # not asked for
    assert len(fake[0].requests) == 1


def test_a_first_round_that_falls_back_is_asked_again_with_n(client, fake):
    refused = Step(*LLAMA_NO_JINJA)
    fake[0].push(refused, Step(body=several({"content": HERMES}, {"content": "Sunny."})))
    fake[0].checks.append(refused)
    got = client.post("/v1/chat/completions", json={**ASK, "n": 2})
    assert got.status_code == 200, got.text
    refused, prompted = asked(fake[0].requests)
    assert refused["n"] == prompted["n"] == 2 and "tools" in refused and "tools" not in prompted
    one, two = got.json()["choices"]
    assert one["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert two["message"]["content"] == "Sunny." and got.headers["x-sanctum-spell-calling"] == "prompted"


@pytest.mark.parametrize("stream", [False, True])
def test_a_choice_that_surrenders_fails_the_request(client, fake, stream):
    fake[0].push(Step(body=several({"content": "Fine."}, {"content": UNKNOWN})) if not stream else
                 Step(chunks=several_chunks("Fine.", UNKNOWN)))
    body = {**ASK, "n": 2, "stream": stream, "sanctum": {"max_repair_rounds": 0}}
    got = client.post("/v1/chat/completions", json=body)
    if not stream:
        assert got.status_code == 422 and got.json()["error"]["type"] == "spell_call_parse_error"
        return
    error = [line for line in got.text.split("\n\n") if line.startswith("data: {\"error\"")]
    assert len(error) == 1 and "spell_call_parse_error" in error[0] and not got.text.endswith("[DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
def test_the_trace_of_a_surrender_keeps_every_choices_omens_and_rounds(client, fake, stream):
    """They came only with the Finals, which a surrender never reaches: the trace had no omen and only
    choice 0's rounds."""
    fake[0].push(Step(body=several({"content": "Fine."}, {"content": UNKNOWN})) if not stream else
                 Step(chunks=several_chunks("Fine.", UNKNOWN)))
    fake[0].push(Step(body=completion(UNKNOWN)) if not stream else Step(chunks=content_chunks(UNKNOWN)))
    body = {**ASK, "n": 2, "stream": stream, "sanctum": {"max_repair_rounds": 1}}
    got = client.post("/v1/chat/completions", json=body)
    assert (got.status_code == 422) != stream and "spell_call_parse_error" in got.text
    trace = client.get(f"/sanctum/traces/{got.headers['x-sanctum-trace-id']}").json()
    assert trace["outcome"] == "surrendered"
    assert [(o["type"], o.get("choice")) for o in trace["omens"]] == [("SpellCallRejected", 1)]
    # every choice's rounds, as on success: the first round as each choice judged it, choice 1's correction
    assert [(r["number"], r["outcome"]) for r in trace["rounds"]] == [(1, "accepted"), (1, "rejected"),
                                                                     (2, "rejected")]
