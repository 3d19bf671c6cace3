"""A refusal (`content: null, refusal: "..."`) is an answer: one round, the refusal kept, never a prompted
fallback nor a parse-failure count; streamed as `refusal` deltas, live."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.upstream import Step, completion
from tests.stream_rules import read_stream

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
REFUSAL = "I'm sorry, I can't help with that."


def refused() -> dict[str, Any]:
    body = completion(None)
    body["choices"][0]["message"]["refusal"] = REFUSAL
    return body


def refusal_chunks() -> list[dict[str, Any]]:
    head = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    deltas = [{"role": "assistant", "content": None, "refusal": ""}, {"refusal": "I'm sorry, "},
              {"refusal": "I can't help with that."}]
    out = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    return [*out, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]


@pytest.mark.parametrize("choice", [None, "required"])
def test_a_refusal_is_passed_through_in_one_round(client, fake, choice):
    fake[0].push(Step(body=refused()))
    body = ASK if choice is None else {**ASK, "tool_choice": choice}
    r = client.post("/v1/chat/completions", json=body)
    message = r.json()["choices"][0]["message"]
    assert r.status_code == 200 and message["refusal"] == REFUSAL and message["content"] is None
    assert "tool_calls" not in message and r.json()["choices"][0]["finish_reason"] == "stop"
    assert len(fake[0].requests) == 1 and r.json()["sanctum"]["omens"] == []
    assert r.headers["x-sanctum-spell-calling"] == "native"


def test_refusals_never_count_as_parse_failures(make_proxy, fake):
    with httpx.Client(base_url=make_proxy(parse_failure_threshold=2), timeout=10) as c:
        for _ in range(3):
            fake[0].push(Step(body=refused()))
            assert c.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]["refusal"] == REFUSAL
        assert c.get("/sanctum/status").json()["modes"] == []
    assert len(fake[0].requests) == 3 and all("tools" in r for r in fake[0].requests)


@pytest.mark.parametrize("choice", [None, "required"])
def test_a_streamed_refusal_is_passed_through_live_in_one_round(proxy, fake, choice):
    fake[0].push(Step(chunks=refusal_chunks()))
    body = {**ASK, "stream": True, **({"tool_choice": choice} if choice else {})}
    with httpx.stream("POST", proxy + "/v1/chat/completions", json=body, timeout=20) as r:
        got = read_stream(r.read())
    assert got.reasoning == {} and got.calls == [] and got.finish_reason == "stop"
    refusals = [c["choices"][0]["delta"]["refusal"] for c in got.chunks
                if c["choices"] and "refusal" in c["choices"][0]["delta"]]
    assert refusals == ["I'm sorry, ", "I can't help with that."]
    assert len(fake[0].requests) == 1 and got.omens == []
