"""POST /v1/responses through the real proxy, read by openai-python (`responses.create` / `.stream`) and the
OpenAI Agents SDK with its default (Responses) model, against the scripted upstream fumbling the call:
every tier runs as for chat completions, and the answer keeps the Responses API's own shapes (checked with
the SDK's own types)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response

from tests.fakes.upstream import LLAMA_NO_JINJA, Step, asked, completion, content_chunks, llama_tool_chunks, native_call
from tests.stream_rules import named_events

TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
GOOD = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def sdk(url: str, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=kwargs.pop("api_key", "none"), max_retries=0, **kwargs)


def call(name: str, arguments: str, call_id: str = "call_1") -> Step:
    return Step(body=completion(None, [native_call(name, arguments, call_id)], "tool_calls"))


def streamed_call(arguments: str, prose: str = "") -> Step:
    head = content_chunks(prose)[:-1] if prose else []
    tail = llama_tool_chunks("get_weather", arguments)
    usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
             "choices": [], "usage": USAGE}
    return Step(chunks=[*head, *(tail[1:] if head else tail), usage])


def raw_stream(proxy: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bytes]:
    """The events (checked: `event:` names its data's type, sequence numbers count up from 0) and omens."""
    with httpx.stream("POST", proxy + "/v1/responses", json={**body, "stream": True}, timeout=20) as r:
        raw = r.read()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), raw[:300]
    events, omens = named_events(raw)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events, omens, raw


ASK = {"model": "m", "input": "Weather in Paris?", "tools": [TOOL]}


def test_sdk_create_gets_a_mended_call_as_a_function_call_item(make_proxy, fake):
    proxy = make_proxy()
    fake[0].push(call("get_weather", "{'city': 'Paris',}", "call_keep"))
    with sdk(proxy) as client:
        got = client.responses.with_raw_response.create(model="m", input="Weather in Paris?", tools=[TOOL],
                                                        instructions="Be brief.", max_output_tokens=50)
    response = got.parse()
    Response.model_validate(orjson.loads(got.content))  # the SDK's own type, strictly
    item = response.output[0]
    assert item.type == "function_call" and item.call_id == "call_keep" and item.name == "get_weather"
    assert orjson.loads(item.arguments) == {"city": "Paris"} and response.status == "completed"
    assert response.usage is not None and (response.usage.input_tokens, response.usage.total_tokens) == (10, 15)
    sanctum = orjson.loads(got.content)["sanctum"]
    assert sanctum["rounds"] == 1 and sanctum["omens"][0]["type"] == "SpellCallRepaired"
    assert got.headers["x-sanctum-omens"] == "SpellCallRepaired=1"
    sent = fake[0].requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Weather in Paris?"}]
    assert sent["tools"] == [{"type": "function", "function": {k: TOOL[k] for k in
                                                               ("name", "description", "parameters")}}]
    assert sent["max_tokens"] == 50 and "max_output_tokens" not in sent and "input" not in sent


@pytest.mark.parametrize("stream", [False, True])
def test_missing_argument_gets_a_hidden_correction_round(make_proxy, fake, stream):
    proxy = make_proxy(constrain="off")
    if stream:
        fake[0].push(streamed_call("{}"), streamed_call('{"city": "Paris"}'))
        events, omens, _ = raw_stream(proxy, ASK)
        response = events[-1]["response"]
        assert events[-1]["type"] == "response.completed"
        assert [o["type"] for o in omens] == ["SpellCallRejected"]
    else:
        fake[0].push(call("get_weather", "{}"), call("get_weather", '{"city": "Paris"}'))
        response = httpx.post(proxy + "/v1/responses", json=ASK).json()
    Response.model_validate(response)
    assert response["sanctum"]["rounds"] == 2 and response["sanctum"]["omens"][0]["reason"] == "missing_arguments"
    assert [orjson.loads(i["arguments"]) for i in response["output"]] == [{"city": "Paris"}]
    assert response["usage"]["total_tokens"] == 30
    correction = fake[0].requests[1]["messages"][-1]
    assert correction["role"] == "user" and "city" in correction["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_rejecting_tools_falls_back_to_prompted_calls(make_proxy, fake, stream):
    proxy = make_proxy()
    answer = Step(chunks=content_chunks(GOOD)) if stream else Step(body=completion(GOOD))
    refused = Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1])
    fake[0].push(refused, answer)
    fake[0].checks.append(refused)  # the proxy's own check
    if stream:
        events, omens, _ = raw_stream(proxy, ASK)
        response = events[-1]["response"]
        assert omens[0]["type"] == "SpellCallingFallback"
    else:
        response = httpx.post(proxy + "/v1/responses", json=ASK).json()
    assert response["sanctum"]["omens"][0]["type"] == "SpellCallingFallback"
    assert response["output"][0]["type"] == "function_call" and response["output"][0]["name"] == "get_weather"
    assert response["sanctum"]["mode"] == "prompted"
    prompted = asked(fake[0].requests)[1]
    assert "tools" not in prompted and "<tool_call>" in prompted["messages"][0]["content"]


def test_surrender_is_an_openai_error_with_every_rejected_answer(make_proxy, fake):
    proxy = make_proxy(constrain="off")
    for city in ("A", "B", "C"):
        fake[0].push(call("nope", f'{{"city":"{city}"}}'))
    with sdk(proxy) as client, pytest.raises(openai.UnprocessableEntityError) as caught:
        client.responses.create(model="m", input="Weather?", tools=[TOOL])
    error = caught.value.body
    assert isinstance(error, dict) and error["type"] == "spell_call_parse_error" and len(error["rejected"]) == 3


def test_surrender_in_a_stream_ends_it_with_error_and_response_failed(make_proxy, fake):
    proxy = make_proxy(constrain="off")
    for city in ("A", "B", "C"):
        fake[0].push(Step(chunks=[*llama_tool_chunks("nope", f'{{"city":"{city}"}}')]))
    events, omens, _ = raw_stream(proxy, ASK)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2]["code"] == "spell_call_parse_error"
    Response.model_validate(events[-1]["response"])
    assert events[-1]["response"]["status"] == "failed"
    assert [o["type"] for o in omens] == ["SpellCallRejected"] * 2


def test_sdk_stream_shows_text_live_and_the_call_when_complete(make_proxy, fake):
    proxy = make_proxy()
    fake[0].push(streamed_call('{"city": "Paris"}', prose="Let me look that up. "))
    seen: list[str] = []
    with sdk(proxy) as client, client.responses.stream(model="m", input="Weather in Paris?", tools=[TOOL]) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_response()
    assert seen[:2] == ["response.created", "response.in_progress"] and seen[-1] == "response.completed"
    assert seen.index("response.output_text.delta") < seen.index("response.function_call_arguments.delta")
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output_text == "Let me look that up. "
    assert final.output[1].call_id == "Xy12" and orjson.loads(final.output[1].arguments) == {"city": "Paris"}
    assert final.usage is not None and final.usage.output_tokens == 5


def test_reasoning_comes_back_as_a_reasoning_item(proxy, fake):
    body = completion("Paris is sunny.")
    body["choices"][0]["message"]["reasoning_content"] = "The user wants the weather."
    fake[0].push(Step(body=body))
    with sdk(proxy) as client:
        response = client.responses.create(model="m", input="Weather?")
    assert [o.type for o in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text == "The user wants the weather."  # type: ignore[union-attr,index]


def test_traces_and_metrics_count_responses_requests(proxy, fake):
    fake[0].push(call("get_weather", "{}"), call("get_weather", '{"city": "Paris"}'))
    answer = httpx.post(proxy + "/v1/responses", json={**ASK, "sanctum": {"constrain": "off"}}).json()
    trace = httpx.get(f"{proxy}/sanctum/traces/{answer['sanctum']['trace_id']}").json()
    assert trace["protocol"] == "responses" and trace["outcome"] == "rejected" and len(trace["rounds"]) == 2
    assert httpx.get(proxy + "/sanctum/traces").json()["data"][0]["protocol"] == "responses"
    metrics = httpx.get(proxy + "/metrics").text
    assert 'sanctum_rejections_total{reason="missing_arguments"} 1.0' in metrics


def test_pass_setting_sends_the_request_to_the_upstream_untouched(make_proxy, fake):
    proxy = make_proxy(responses_api="pass")
    r = httpx.post(proxy + "/v1/responses", json=ASK)
    assert r.status_code == 201 and r.json()["path"] == "/v1/responses"
    assert fake[0].requests == [] and orjson.loads(fake[0].other_requests[0][2]) == ASK


def test_agents_sdk_default_model_completes_a_fumbled_tool_call(make_proxy, fake):
    agents = pytest.importorskip("agents")
    proxy = make_proxy(constrain="off")
    fake[0].push(call("get_weather", "{}"), call("get_weather", "{'city': 'Paris',}"),
                 Step(body=completion("It is sunny in Paris.")))
    ran: list[str] = []
    get_weather = _weather_tool(agents, ran)
    result = asyncio.run(_run_agent(agents, proxy, get_weather, streamed=False))
    assert ran == ["Paris"] and result == "It is sunny in Paris."
    assert fake[0].requests[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                                   "content": "sunny in Paris"}


def test_agents_sdk_default_model_streamed_completes_a_fumbled_tool_call(make_proxy, fake):
    agents = pytest.importorskip("agents")
    proxy = make_proxy(constrain="off")
    fake[0].push(streamed_call("{}"), streamed_call("{'city': 'Paris',}"),
                 Step(chunks=content_chunks("It is sunny in Paris.")))
    ran: list[str] = []
    get_weather = _weather_tool(agents, ran)
    result = asyncio.run(_run_agent(agents, proxy, get_weather, streamed=True))
    assert ran == ["Paris"] and result == "It is sunny in Paris."
    assert len(fake[0].requests) == 3


def _weather_tool(agents: Any, ran: list[str]) -> Any:
    """The Agents SDK's function tool for get_weather; each city it runs for goes into `ran`."""

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    return get_weather


async def _run_agent(agents: Any, proxy: str, tool: Any, *, streamed: bool) -> str:
    async with openai.AsyncOpenAI(base_url=proxy + "/v1", api_key="none", max_retries=0) as client:
        return await _agent_answer(agents, client, tool, streamed=streamed)


async def _agent_answer(agents: Any, client: openai.AsyncOpenAI, tool: Any, *, streamed: bool) -> str:
    agent = agents.Agent(name="weather", instructions="Use the tool.", tools=[tool], model="m")
    config = agents.RunConfig(model_provider=agents.OpenAIProvider(openai_client=client), tracing_disabled=True)
    if not streamed:
        result = await agents.Runner.run(agent, "Weather in Paris?", run_config=config)
        return str(result.final_output)
    streaming = agents.Runner.run_streamed(agent, "Weather in Paris?", run_config=config)
    async for _ in streaming.stream_events():
        pass
    return str(streaming.final_output)


@pytest.mark.parametrize("stream", [False, True])
def test_same_rounds_and_omens_as_the_chat_endpoint(make_proxy, fake, stream):
    """One fumbling script (a broken call mended, then a missing argument bounced) through all three endpoints."""
    proxy = make_proxy(constrain="off")
    schema = TOOL["parameters"]
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    bodies = {
        "/v1/chat/completions": {"model": "m", "messages": asked,
                                 "tools": [{"type": "function", "function": {"name": "get_weather",
                                                                             "parameters": schema}}]},
        "/v1/responses": {"model": "m", "input": "Weather in Paris?", "tools": [TOOL]},
        "/v1/messages": {"model": "m", "max_tokens": 100, "messages": asked,
                         "tools": [{"name": "get_weather", "input_schema": schema}]},
    }
    seen = {}
    for path, body in bodies.items():
        if stream:
            fake[0].push(streamed_call("{'days': 1,}"), streamed_call("{'city': 'Paris',}"))
        else:
            fake[0].push(call("get_weather", "{'days': 1,}"), call("get_weather", "{'city': 'Paris',}"))
        r = httpx.post(proxy + path, json={**body, "stream": stream}, timeout=20)
        assert r.status_code == 200
        trace = httpx.get(f"{proxy}/sanctum/traces/{r.headers['x-sanctum-trace-id']}").json()
        seen[path] = ([o["type"] for o in trace["omens"]], [o.get("reason") for o in trace["omens"]],
                      len(trace["rounds"]), [o["type"] for o in _omen_comments(r.text)] if stream else None)
    assert seen["/v1/responses"] == seen["/v1/chat/completions"] == seen["/v1/messages"]
    omens, reasons, rounds, _ = seen["/v1/chat/completions"]
    assert omens == ["SpellCallRejected", "SpellCallRejected", "SpellCallRepaired"] and rounds == 2
    assert set(reasons[:2]) == {"missing_arguments", "unexpected_arguments"}


def _omen_comments(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[len(": omen "):]) for line in text.split("\n") if line.startswith(": omen ")]


def test_streamed_reasoning_comes_back_as_a_reasoning_item(proxy, fake):
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    thinking = [{**base, "choices": [{"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}]}
                for piece in ("The user ", "wants weather.")]
    fake[0].push(Step(chunks=[*thinking, *content_chunks("Sunny.")]))
    with sdk(proxy) as client, client.responses.stream(model="m", input="Weather?") as stream:
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == "Sunny."
    assert final.output[0].content[0].text == "The user wants weather."  # type: ignore[union-attr,index]


# Codex CLI's tools (0.171, captured): function tools, a namespace of functions and a hosted web_search.
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Tools for sub-agents.", "tools": [
    {"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": False,
     "parameters": {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"],
                    "additionalProperties": False}}]}
CODEX_TOOLS = [TOOL, NAMESPACE, {"type": "web_search", "external_web_access": False}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_call_comes_back_with_its_name_and_namespace(make_proxy, fake, stream):
    proxy = make_proxy()
    arguments = '{"target": "a1"}'
    fake[0].push(Step(chunks=llama_tool_chunks("multi_agent_v1__close_agent", arguments)) if stream else
                 call("multi_agent_v1__close_agent", arguments))
    with sdk(proxy) as client:
        if stream:
            with client.responses.stream(model="m", input="Close a1.", tools=CODEX_TOOLS) as events:
                done = [e for e in events if e.type == "response.function_call_arguments.done"]
                response = events.get_final_response()
            assert [e.name for e in done] == ["close_agent"]
        else:
            response = client.responses.create(model="m", input="Close a1.", tools=CODEX_TOOLS)  # type: ignore[arg-type]
    item = response.output[0]
    assert item.type == "function_call" and (item.name, item.namespace) == ("close_agent", "multi_agent_v1")
    assert item.arguments == arguments
    sent = fake[0].requests[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "multi_agent_v1__close_agent"]
    assert sent["tools"][1]["function"]["parameters"] == NAMESPACE["tools"][0]["parameters"]  # type: ignore[index]
