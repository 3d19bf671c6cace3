"""A Responses API request through the real proxy: its history, tools and fields reach the scripted upstream as
a chat body, and what the proxy cannot serve is a 400 naming the field or a withheld tool with its omen."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response

from tests.fakes.upstream import Step, completion, content_chunks
from tests.protocols.test_responses_output import CODEX_TOOLS, TOOL, raw_stream, sdk


def test_earlier_calls_and_their_outputs_reach_the_upstream_as_chat_history(proxy, fake):
    fake[0].push(Step(body=completion("Sunny, 21 C.")))
    history = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
               {"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
               {"type": "function_call_output", "call_id": "c1", "output": "sunny, 21"}]
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input=history, tools=[TOOL])  # type: ignore[arg-type]
    assert response.output_text == "Sunny, 21 C." and response.output[0].type == "message"
    assert fake[0].requests[0]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21"}]


@pytest.mark.parametrize(("field", "value", "param"), [
    ("previous_response_id", "resp_123", "previous_response_id"),
    ("tools", [{"type": "custom", "name": "apply_patch"}], "tools[0].type"),
    ("input", [{"type": "item_reference", "id": "msg_1"}], "input[0]"),
])
def test_what_needs_server_state_is_a_400_naming_the_field(proxy, fake, field, value, param):
    with sdk(proxy) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**{"model": "m", "input": "Hi", field: value})
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert fake[0].requests == []


def test_store_and_metadata_are_accepted_and_not_sent_upstream(proxy, fake):
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input="Hi", store=True, metadata={"k": "v"})
    assert response.output_text == "default answer" and response.store is False
    assert "store" not in fake[0].requests[0] and "metadata" not in fake[0].requests[0]


@pytest.mark.parametrize("stream", [False, True])
def test_hosted_tools_are_left_out_with_an_omen(make_proxy, fake, stream):
    proxy = make_proxy()
    body = {"model": "m", "input": "Hi", "tools": CODEX_TOOLS}
    if stream:
        fake[0].push(Step(chunks=content_chunks("Hello.")))
        events, omens, _ = raw_stream(proxy, body)
        assert events[-1]["type"] == "response.completed"
        sanctum = events[-1]["response"]["sanctum"]
        assert omens[0]["type"] == "SpellsWithheld"
    else:
        got = httpx.post(proxy + "/v1/responses", json=body)
        assert got.status_code == 200, got.text
        Response.model_validate(got.json())
        sanctum = got.json()["sanctum"]
        assert got.headers["x-sanctum-omens"] == "SpellsWithheld=1"
    assert sanctum["omens"][0]["type"] == "SpellsWithheld"
    assert sanctum["omens"][0]["tools"] == [{"index": 2, "type": "web_search"}]
    assert "web_search" not in orjson.dumps(fake[0].requests[0]["tools"]).decode()


def test_only_hosted_tools_leave_no_tools_and_no_tool_choice(make_proxy, fake):
    proxy = make_proxy()
    got = httpx.post(proxy + "/v1/responses", json={
        "model": "m", "input": "Hi", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}],
        "tool_choice": "auto", "parallel_tool_calls": True})
    assert got.status_code == 200 and got.json()["status"] == "completed"
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(fake[0].requests[0])


@pytest.mark.parametrize(("tools", "choice"), [
    ([TOOL, {"type": "web_search"}], {"type": "web_search"}),
    ([TOOL, {"type": "mcp", "server_label": "x"}], {"type": "mcp", "server_label": "x"}),
    ([{"type": "web_search"}], "required"),
])
def test_a_tool_choice_forcing_a_left_out_tool_is_a_400(make_proxy, fake, tools, choice):
    proxy = make_proxy()
    with sdk(proxy) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="Hi", tools=tools, tool_choice=choice)  # type: ignore[arg-type]
    assert caught.value.body["param"] == "tool_choice"  # type: ignore[index]
    assert "cannot run" in caught.value.message and fake[0].requests == []


def test_codex_client_metadata_and_other_client_fields_stay_home(make_proxy, fake):
    proxy = make_proxy()
    got = httpx.post(proxy + "/v1/responses", json={
        "model": "m", "input": "Hi", "client_metadata": {"x-codex-installation-id": "i", "turn_id": "t"},
        "prompt_cache_key": "k", "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"},
        "store": False, "seed": 7, "top_k": 3, "moderation": "auto", "future_field": 1})
    assert got.status_code == 200, got.text
    assert fake[0].requests[0] == {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "seed": 7,
                                   "top_k": 3, "stream": False}
