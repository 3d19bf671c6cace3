"""POST /v1/messages through the real proxy, read by the anthropic SDK (`messages.create` / `.stream`) and in a
tool loop, against the scripted upstream fumbling the call: every tier runs as for chat completions, and the
answer and errors keep the Messages API's own shapes (checked with the SDK's own types)."""

from __future__ import annotations

import threading
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from anthropic.types import Message

from tests.conftest import ServerThread
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, asked, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import named_events

TOOL = {"name": "get_weather", "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
GOOD = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
ASK: dict[str, Any] = {"model": "m", "max_tokens": 200, "tools": [TOOL],
                       "messages": [{"role": "user", "content": "Weather in Paris?"}]}


def sdk(url: str, api_key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=api_key, max_retries=0)


def call(name: str, arguments: str, call_id: str = "toolu_1", content: str | None = None) -> Step:
    return Step(body=completion(content, [native_call(name, arguments, call_id)], "tool_calls"))


def streamed_call(arguments: str, prose: str = "", name: str = "get_weather") -> Step:
    head = content_chunks(prose)[:-1] if prose else []
    tail = llama_tool_chunks(name, arguments)
    usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
             "choices": [], "usage": USAGE}
    return Step(chunks=[*head, *(tail[1:] if head else tail), usage])


def raw_stream(proxy: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The events (checked: `event:` names its data's type) and the omens of a streamed answer."""
    with httpx.stream("POST", proxy + "/v1/messages", json={**body, "stream": True}, timeout=20) as r:
        raw = r.read()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), raw[:300]
    events, omens = named_events(raw)
    return events, omens


def test_sdk_create_gets_a_mended_call_as_a_tool_use_block(proxy, fake):
    fake[0].push(call("get_weather", "{'city': 'Paris',}", content="Let me check."))
    with sdk(proxy) as client:
        got = client.messages.with_raw_response.create(
            model="m", max_tokens=200, system=[{"type": "text", "text": "Be brief."}], tools=[TOOL],
            messages=[{"role": "user", "content": "Weather in Paris?"}], tool_choice={"type": "any"})
    Message.model_validate(orjson.loads(got.read()))
    message = got.parse()
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.stop_reason == "tool_use"
    use = message.content[1]
    assert use.type == "tool_use" and use.input == {"city": "Paris"} and use.id == "toolu_1"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 5)
    sanctum = orjson.loads(got.read())["sanctum"]
    assert sanctum["omens"][0]["type"] == "SpellCallRepaired" and got.headers["x-sanctum-rounds"] == "1"
    sent = fake[0].requests[0]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["tools"][0]["function"]["parameters"] == TOOL["input_schema"] and sent["tool_choice"] == "required"


def test_tool_loop_call_then_result_then_final_text(proxy, fake):
    fake[0].push(call("get_weather", '{"city": "Paris"}'), Step(body=completion("Sunny, 21 C.")))
    history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    with sdk(proxy) as client:
        while True:
            message = client.messages.create(model="m", max_tokens=200, tools=[TOOL], messages=history)
            history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                             for b in message.content]})
            if message.stop_reason != "tool_use":
                break
            uses = [b for b in message.content if b.type == "tool_use"]
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": [{"type": "text", "text": "sunny, 21"}]}
                for u in uses]})
    assert message.content[0].type == "text" and message.content[0].text == "Sunny, 21 C."
    assert message.stop_reason == "end_turn"
    assert fake[0].requests[1]["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "toolu_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny, 21"}]


@pytest.mark.parametrize("stream", [False, True])
def test_missing_argument_gets_a_hidden_correction_round(make_proxy, fake, stream):
    proxy = make_proxy(constrain="off")
    if stream:
        fake[0].push(streamed_call("{}"), streamed_call('{"city": "Paris"}'))
        events, omens = raw_stream(proxy, ASK)
        assert [o["type"] for o in omens] == ["SpellCallRejected"]
        delta = next(e for e in events if e["type"] == "message_delta")
        sanctum, stop = delta["sanctum"], delta["delta"]["stop_reason"]
        arguments = next(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
        assert orjson.loads(arguments) == {"city": "Paris"} and delta["usage"]["output_tokens"] == 10
    else:
        fake[0].push(call("get_weather", "{}"), call("get_weather", '{"city": "Paris"}'))
        message = httpx.post(proxy + "/v1/messages", json=ASK).json()
        Message.model_validate(message)
        sanctum, stop = message["sanctum"], message["stop_reason"]
        assert message["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                       "input": {"city": "Paris"}}]
    assert stop == "tool_use" and sanctum["rounds"] == 2 and sanctum["omens"][0]["reason"] == "missing_arguments"
    assert "city" in fake[0].requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_rejecting_tools_falls_back_to_prompted_calls(proxy, fake, stream):
    answer = Step(chunks=content_chunks(GOOD)) if stream else Step(body=completion(GOOD))
    refused = Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1])
    fake[0].push(refused, answer)
    fake[0].checks.append(refused)  # the proxy's own check
    with sdk(proxy) as client:
        if stream:
            with client.messages.stream(**ASK) as streaming:
                message = streaming.get_final_message()
        else:
            message = client.messages.create(**ASK)
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"
    assert message.content[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert "tools" not in asked(fake[0].requests)[1]


def test_surrender_is_an_anthropic_error_with_every_rejected_answer(make_proxy, fake):
    proxy = make_proxy(constrain="off")
    for city in ("A", "B", "C"):
        fake[0].push(call("nope", f'{{"city":"{city}"}}'))
    r = httpx.post(proxy + "/v1/messages", json=ASK)
    assert r.status_code == 422 and r.headers["x-should-retry"] == "false"
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "spell_call_parse_error" and len(body["error"]["rejected"]) == 3
    trace = httpx.get(f"{proxy}/sanctum/traces/{r.headers['x-sanctum-trace-id']}").json()  # the failed one's
    assert trace["outcome"] == "surrendered" and len(trace["rounds"]) == 3


def test_surrender_in_a_stream_is_an_error_event_the_sdk_raises(make_proxy, fake):
    proxy = make_proxy(constrain="off")
    for city in ("A", "B", "C"):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city":"{city}"}}')))
    events, omens = raw_stream(proxy, ASK)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == "spell_call_parse_error" and len(omens) == 2
    for city in ("A", "B", "C"):
        fake[0].push(Step(chunks=llama_tool_chunks("nope", f'{{"city":"{city}"}}')))
    with sdk(proxy) as client, pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(**ASK) as streaming:
            streaming.until_done()
    assert "spell call could not be repaired" in str(caught.value)


def test_sdk_stream_shows_text_live_and_the_call_when_complete(proxy, fake):
    fake[0].push(streamed_call('{"city": "Paris"}', prose="Let me look that up. "))
    seen: list[str] = []
    with sdk(proxy) as client, client.messages.stream(**ASK) as streaming:
        for event in streaming:
            seen.append(event.type)
        message = streaming.get_final_message()
    assert seen[0] == "message_start" and seen[-1] == "message_stop"
    assert seen.index("text") < seen.index("input_json")
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Let me look that up. "  # type: ignore[union-attr]
    assert message.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 5


def test_reasoning_comes_back_as_a_thinking_block(proxy, fake):
    body = completion("Paris is sunny.", finish_reason="length")
    body["choices"][0]["message"]["reasoning_content"] = "The user wants the weather."
    fake[0].push(Step(body=body))
    with sdk(proxy) as client:
        message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    assert [b.type for b in message.content] == ["thinking", "text"] and message.stop_reason == "max_tokens"
    assert message.content[0].thinking == "The user wants the weather."  # type: ignore[union-attr]


def test_ollama_reasoning_with_tools_comes_back_as_a_thinking_block(proxy, fake):
    body = completion("Paris is sunny.")
    body["choices"][0]["message"]["reasoning"] = "Ollama's thinking."
    fake[0].push(Step(body=body))
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    with sdk(proxy) as client:
        message = client.messages.create(model="m", max_tokens=50, tools=[tool],  # type: ignore[list-item]
                                         messages=[{"role": "user", "content": "Hi"}])
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Ollama's thinking."  # type: ignore[union-attr]


def test_x_api_key_is_a_client_key_and_a_wrong_one_is_an_authentication_error(make_proxy, fake):
    proxy = make_proxy(api_keys=["sekret"])
    with sdk(proxy, api_key="sekret") as client:
        assert client.messages.create(**{**ASK, "tools": []}).content[0].text == "default answer"  # type: ignore[union-attr]
    with sdk(proxy, api_key="wrong") as client, pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(**ASK)
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


@pytest.mark.parametrize(("change", "param"), [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": []}, "messages"),
])
def test_what_the_proxy_cannot_serve_is_an_invalid_request_error_naming_the_field(proxy, fake, change, param):
    r = httpx.post(proxy + "/v1/messages", json={**ASK, **change})
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["param"] == param and fake[0].requests == []


def test_traces_and_metrics_count_messages_requests(proxy, fake):
    fake[0].push(call("get_weather", "{}"), call("get_weather", '{"city": "Paris"}'))
    answer = httpx.post(proxy + "/v1/messages", json={**ASK, "sanctum": {"constrain": "off"}}).json()
    trace = httpx.get(f"{proxy}/sanctum/traces/{answer['sanctum']['trace_id']}").json()
    assert trace["protocol"] == "messages" and trace["outcome"] == "rejected" and len(trace["rounds"]) == 2
    assert 'sanctum_rejections_total{reason="missing_arguments"} 1.0' in httpx.get(proxy + "/metrics").text


def test_pass_setting_sends_the_request_to_the_upstream_untouched(make_proxy, fake):
    proxy = make_proxy(messages_api="pass")
    r = httpx.post(proxy + "/v1/messages", json=ASK, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 201 and r.json()["path"] == "/v1/messages"
    assert fake[0].requests == [] and orjson.loads(fake[0].other_requests[0][2]) == ASK


def test_forwarded_x_api_key_reaches_the_upstream_as_a_bearer_token(make_proxy, fake):
    seen: list[str | None] = []
    app = fake[0].app()

    async def recording(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["path"] != "/api/version":  # not the is-it-Ollama question
            seen.append(dict(scope["headers"]).get(b"authorization", b"").decode() or None)
        await app(scope, receive, send)

    with ServerThread(recording) as upstream:
        proxy = make_proxy(upstream=upstream.url + "/v1", forward_client_key=True, probe_capabilities=False)
        with sdk(proxy, api_key="client-key") as client:
            client.messages.create(**{**ASK, "tools": []})
    assert seen == ["Bearer client-key"]


def test_requests_over_the_concurrency_limit_get_an_anthropic_rate_limit_error(make_proxy, fake):
    proxy = make_proxy(max_concurrent_requests=1)
    fake[0].push(Step(body=completion("slow"), delay=1.0))
    slow = threading.Thread(target=lambda: httpx.post(f"{proxy}/v1/messages", json=ASK, timeout=20))
    slow.start()
    while not fake[0].requests:
        threading.Event().wait(0.01)
    with sdk(proxy) as client, pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(**ASK)
    slow.join(10)
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
