"""Agent loops that finish: a call the conversation already answered is bounced, and the model is asked for
text with the result quoted (repair/answers.py)."""

from __future__ import annotations

import orjson

from sanctum_proxy.core.calls import ToolCall
from sanctum_proxy.repair.answers import answered_calls, repeated_call
from tests.fakes.upstream import Step, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import read_stream
from tests.tools import WEATHER

LOOP = [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 24 C"}]
ASK = {"model": "m", "messages": LOOP, "tools": [WEATHER], "sanctum": {"constrain": "off"}}


def test_same_name_and_arguments_in_another_key_order_is_a_repeat():
    problem = repeated_call([ToolCall("x", "get_weather", '{ "city":"Paris" }')], LOOP, lambda: "raw")
    assert problem is not None and problem.reason == "repeated_call" and "Sunny, 24 C" in problem.details[0]


def test_other_arguments_or_an_unanswered_call_are_not_repeats():
    assert repeated_call([ToolCall("x", "get_weather", '{"city": "Rome"}')], LOOP, lambda: "raw") is None
    unanswered = LOOP[:2]
    assert repeated_call([ToolCall("x", "get_weather", '{"city": "Paris"}')], unanswered, lambda: "raw") is None
    assert answered_calls("not a list") == {}


def test_a_new_call_beside_a_repeat_goes_on():
    calls = [ToolCall("x", "get_weather", '{"city": "Paris"}'), ToolCall("y", "get_weather", '{"city": "Rome"}')]
    assert repeated_call(calls, LOOP, lambda: "raw") is None


def test_repeated_call_after_its_result_is_asked_for_text_and_the_loop_ends(client, fake):
    fake[0].push(Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls")),
                 Step(body=completion("It is sunny in Paris, 24 C.")))
    r = client.post("/v1/chat/completions", json=ASK)
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "It is sunny in Paris, 24 C."
    assert body["choices"][0]["finish_reason"] == "stop" and not body["choices"][0]["message"].get("tool_calls")
    (omen,) = body["sanctum"]["omens"]
    assert omen["reason"] == "repeated_call" and "Sunny, 24 C" in omen["correction"]
    second = fake[0].requests[1]
    assert "tools" not in second  # asked for text: no tools offered
    assert second["messages"][-1] == {"role": "user", "content": omen["correction"]}  # exactly what was sent


def test_repeated_call_streamed_ends_in_text(client, fake):
    fake[0].push(Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')),
                 Step(chunks=content_chunks("Sunny in Paris.")))
    with client.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}) as r:
        got = read_stream(b"".join(r.iter_bytes()))
    assert got.content == "Sunny in Paris." and got.calls == [] and got.finish_reason == "stop"
    assert [o["reason"] for o in got.sanctum["omens"]] == ["repeated_call"]


def test_required_tool_choice_keeps_a_repeated_call(client, fake):
    fake[0].push(Step(body=completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls")))
    r = client.post("/v1/chat/completions", json={**ASK, "tool_choice": "required"})
    call = r.json()["choices"][0]["message"]["tool_calls"][0]
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris"} and len(fake[0].requests) == 1
