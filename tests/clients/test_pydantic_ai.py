"""pydantic-ai's OpenAIChatModel with an OpenAIProvider pointed at the proxy: its agent loop, streamed and not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.clients.scenarios import ASK, CITY, WORKING, weather

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
pydantic_ai = pytest.importorskip("pydantic_ai")
openai_models = pytest.importorskip("pydantic_ai.models.openai")
openai_providers = pytest.importorskip("pydantic_ai.providers.openai")
exceptions = pytest.importorskip("pydantic_ai.exceptions")
openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")


async def run(base_url: str, calls: list[str], stream: bool, output_type: Any = str) -> Any:
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return weather(city)

    async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
        provider = openai_providers.OpenAIProvider(openai_client=client)
        model = openai_models.OpenAIChatModel("m", provider=provider)
        agent: Any = pydantic_ai.Agent(model, tools=[get_weather], output_type=output_type)
        if not stream:
            return (await agent.run(ASK)).output
        # run_stream_events, not run_stream: run_stream takes the first streamed text as the run's output, so a
        # model that writes "Let me check." before its call ends the run there (pydantic-ai's own rule).
        output = None
        async with agent.run_stream_events(ASK) as events:
            async for event in events:
                if isinstance(event, pydantic_ai.AgentRunResultEvent):
                    output = event.result.output
        return output


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
@pytest.mark.parametrize("scenario", WORKING)
def test_structured_output_through_its_final_result_tool(scripted, scenario, stream):
    # A structured output type is a `final_result` tool and every request says `tool_choice: "required"`.
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream, Report))
    assert calls == [CITY]
    assert isinstance(final, Report) and weather(CITY) in final.summary
    assert model.streamed(stream)
    assert all(r.get("tool_choice") == "required" for r in model.requests if r.get("tools"))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_after_a_surrender_the_agent_answers_the_model_with_its_own_retry_prompt(scripted, stream):
    # on_surrender = "last_call" (the default): pydantic-ai validates the last call and sends the model its
    # validation errors; the run ends with the model's answer quoting them.
    base_url, model = scripted("surrender")
    calls: list[str] = []
    final = asyncio.run(run(base_url, calls, stream))
    assert calls == [] and '"loc":["city"]' in final and "Field required" in final


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_surfaces_as_a_model_error(scripted, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    calls: list[str] = []
    with pytest.raises(exceptions.ModelAPIError) as raised:  # ModelRequestRejectedError (422) or in-band
        asyncio.run(run(base_url, calls, stream))
    assert calls == []
    assert "could not be repaired" in str(raised.value)


def debug_run(base_url: str, calls: list[str], stream: bool) -> str:
    return asyncio.run(run(base_url, calls, stream))
