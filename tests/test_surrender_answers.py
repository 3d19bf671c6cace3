"""What a client gets after the last repair round, through the real proxy: on every endpoint by default
(`on_surrender`, `messages_on_surrender`, `responses_on_surrender` = "last_call") the model's last call to a known
tool as it made it, the surrender in the omens and the trace, so an agent that validates tool input itself answers
the model and its session goes on; the 422 where `error` is asked. Each is overridable per request
(X-Sanctum-On-Surrender / sanctum.on_surrender)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fakes.upstream import Step, completion, llama_tool_chunks, native_call

TOOL = {"name": "get_weather", "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK: dict[str, Any] = {"model": "m", "max_tokens": 200, "tools": [TOOL], "sanctum": {"constrain": "off"},
                       "messages": [{"role": "user", "content": "Weather in Paris?"}]}
FUNCTION = {"type": "function", "function": {"name": "get_weather", "parameters": TOOL["input_schema"]}}


def missing_city(stream: bool, rounds: int = 3) -> list[Step]:
    """Every round calls get_weather without `city` (a different wrong argument each time)."""
    args = [f'{{"place{i}": "Paris"}}' for i in range(rounds)]
    if stream:
        return [Step(chunks=llama_tool_chunks("get_weather", a)) for a in args]
    return [Step(body=completion(None, [native_call("get_weather", a, f"call_{i}")], "tool_calls"))
            for i, a in enumerate(args)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_messages_answer_the_last_call_after_the_last_round(proxy, fake, stream):
    fake[0].push(*missing_city(stream))
    with anthropic.Anthropic(base_url=proxy, api_key="x", max_retries=0) as client:
        body = {k: v for k, v in ASK.items() if k != "sanctum"}
        if stream:
            with client.messages.stream(**body, extra_body={"sanctum": ASK["sanctum"]}) as streaming:
                message = streaming.get_final_message()
        else:
            message = client.messages.create(**body, extra_body={"sanctum": ASK["sanctum"]})
    assert message.stop_reason == "tool_use" and [b.type for b in message.content] == ["tool_use"]
    assert message.content[0].input == {"place2": "Paris"}  # type: ignore[union-attr]
    assert len(fake[0].requests) == 3
    listed = httpx.get(proxy + "/sanctum/traces").json()["data"]
    trace = httpx.get(f"{proxy}/sanctum/traces/{listed[0]['id']}").json()
    assert trace["outcome"] == "surrendered" and len(trace["rounds"]) == 3
    assert [o["type"] for o in trace["omens"]][-1] == "SpellCallSurrendered"


def test_the_surrender_is_in_the_omens_and_a_request_may_ask_for_the_error(proxy, fake):
    fake[0].push(*missing_city(False))
    answer = httpx.post(proxy + "/v1/messages", json=ASK).json()
    kinds = [o["type"] for o in answer["sanctum"]["omens"]]
    assert kinds[-1] == "SpellCallSurrendered" and set(kinds[:-1]) == {"SpellCallRejected"}
    assert {o["round"] for o in answer["sanctum"]["omens"]} == {1, 2, 3}
    assert "last_call" in answer["sanctum"]["omens"][-1]["message"]
    fake[0].push(*missing_city(False))
    r = httpx.post(proxy + "/v1/messages", json=ASK, headers={"X-Sanctum-On-Surrender": "error"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "spell_call_parse_error"
    r = httpx.post(proxy + "/v1/messages", json={**ASK, "sanctum": {"on_surrender": "later"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "sanctum.on_surrender"


def test_a_last_round_without_a_known_call_is_still_the_error(proxy, fake):
    fake[0].push(*[Step(body=completion(None, [native_call("nope", "{}")], "tool_calls")) for _ in range(3)])
    r = httpx.post(proxy + "/v1/messages", json=ASK)
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request_error"


def test_responses_answer_the_last_call_too(proxy, fake):
    fake[0].push(*missing_city(False))
    with openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0) as client:
        response = client.responses.create(
            model="m", input="Weather in Paris?", extra_body={"sanctum": {"constrain": "off"}},
            tools=[{"type": "function", "name": "get_weather", "parameters": TOOL["input_schema"]}])  # type: ignore[list-item]
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"place2": "Paris"}')]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_completions_answer_the_last_call_and_may_ask_for_the_error(proxy, fake, stream):
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                            "tools": [FUNCTION],
                            "extra_body": {"sanctum": {"constrain": "off", "on_surrender": "error"}}}
    fake[0].push(*missing_city(stream))
    with openai.OpenAI(base_url=proxy + "/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.APIError):
            if stream:
                for _ in client.chat.completions.create(**body, stream=True):  # type: ignore[call-overload]
                    pass
            else:
                client.chat.completions.create(**body)  # type: ignore[call-overload]
        fake[0].push(*missing_city(stream))
        body["extra_body"] = {"sanctum": {"constrain": "off"}}  # on_surrender = "last_call", the default
        if stream:
            chunks = list(client.chat.completions.create(**body, stream=True))  # type: ignore[call-overload]
            arguments = "".join(c.choices[0].delta.tool_calls[0].function.arguments or "" for c in chunks
                                if c.choices and c.choices[0].delta.tool_calls)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        else:
            answer = client.chat.completions.create(**body)  # type: ignore[call-overload]
            arguments = answer.choices[0].message.tool_calls[0].function.arguments
            finish = [answer.choices[0].finish_reason]
    assert arguments == '{"place2": "Paris"}' and finish == ["tool_calls"]
