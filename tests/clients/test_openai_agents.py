"""openai-agents runs its tool loop through the proxy, streamed and not: with its default model (the Responses API,
`/v1/responses`) and with its chat-completions model."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.clients.scenarios import ASK, CITY, WORKING, Model, weather

agents = pytest.importorskip("agents")
openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")

agents.set_tracing_disabled(True)  # no trace export to api.openai.com


async def run(base_url: str, calls: list[str], stream: bool, output_type: Any = None, api: str = "chat") -> Any:
    """`api` "responses": the SDK's default model (a model name, the default OpenAIProvider); "chat": its
    OpenAIChatCompletionsModel."""
    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return weather(city)

    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
        model: Any = "m" if api == "responses" else agents.OpenAIChatCompletionsModel(model="m", openai_client=client)
        agent = agents.Agent(name="weather", instructions="Answer with the tools.", model=model, tools=[get_weather],
                             output_type=output_type)
        config = agents.RunConfig(model_provider=agents.OpenAIProvider(openai_client=client))  # Responses: default
        if not stream:
            return (await agents.Runner.run(agent, ASK, run_config=config)).final_output
        result = agents.Runner.run_streamed(agent, ASK, run_config=config)
        async for _ in result.stream_events():
            pass
        return result.final_output


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
def test_tool_loop_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream))
    assert calls == [CITY]
    assert weather(CITY) in str(final)
    assert model.streamed(stream)


class Report(pydantic.BaseModel):
    summary: str


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", [s for s in WORKING if s != "no_tools"])
def test_structured_output_beside_tools(scripted, scenario, stream):
    # output_type sends `response_format: json_schema` with every request. Not with `no_tools`: prompted mode
    # forwards that response_format unchanged beside its `<tool_call>` prompt, and an upstream that enforces the
    # schema as a grammar (llama-server) leaves no way to write the call; the fake does not enforce it.
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream, Report))
    assert calls == [CITY]
    assert isinstance(final, Report) and weather(CITY) in final.summary
    assert model.streamed(stream)
    assert all(r["response_format"]["json_schema"]["name"] == "final_output" for r in model.requests
               if r.get("tools"))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_model_after_a_surrender_answers_the_model_with_its_own_error(scripted, stream):
    # on_surrender = "last_call" (the chat default): the SDK checks the last call's input itself and hands the
    # model its own error as the tool's output; the run goes on to the model's answer quoting that error.
    base_url, model = scripted("surrender")
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream))
    assert calls == []  # the tool never ran with bad input
    results = [m["content"] for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    assert results and str(final) == f"The weather tool said: {results[-1]}"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_model_meets_a_surrender_as_an_api_error_where_asked(make_proxy, fake, stream):
    fake[0].responder = Model("surrender")
    base_url = make_proxy(on_surrender="error") + "/v1"
    calls: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        asyncio.run(run(base_url, calls, stream))
    assert calls == []
    assert "could not be repaired" in raised.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", [*WORKING, "unknown_tool"])
def test_default_responses_model_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream, api="responses"))
    assert calls == [CITY]
    assert weather(CITY) in str(final)
    assert model.streamed(stream)
    assert protocols(base_url) == {"responses"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_default_responses_model_after_a_surrender_answers_the_model_with_its_own_error(scripted, stream):
    # responses_on_surrender = "last_call" (the default): the SDK gets the model's last call as it was made, checks
    # its input itself, and hands the model its own error as the tool's output instead of raising; the run goes on
    # to the model's answer (the scripted model never names `city`, so its answer quotes that error).
    base_url, model = scripted("surrender")
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream, api="responses"))
    assert calls == []  # the tool never ran with bad input
    results = [m["content"] for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    assert results and str(final) == f"The weather tool said: {results[-1]}"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_default_responses_model_meets_a_surrender_as_an_error_where_asked(make_proxy, fake, stream):
    # responses_on_surrender = "error". Unstreamed: the 422 as openai.APIError; streamed: the `error` event, which the
    # SDK raises as ModelBehaviorError ("Responses stream ended with terminal event `error`").
    fake[0].responder = Model("surrender")
    base_url = make_proxy(responses_on_surrender="error") + "/v1"
    calls: list[str] = []
    expected = agents.exceptions.ModelBehaviorError if stream else openai.APIError
    with pytest.raises(expected) as raised:
        asyncio.run(run(base_url, calls, stream, api="responses"))
    assert calls == [] and "could not be repaired" in str(raised.value)


def protocols(base_url: str) -> set[str]:
    """The protocols of the requests the proxy traced (`responses`: the client spoke the Responses API)."""
    traces = httpx.get(base_url.removesuffix("/v1") + "/sanctum/traces").json()["data"]
    return {t["protocol"] for t in traces}


def debug_run(base_url: str, calls: list[str], stream: bool) -> str:
    return asyncio.run(run(base_url, calls, stream))
