"""smolagents' ToolCallingAgent on OpenAIServerModel pointed at the proxy, streamed (stream_outputs) and not.

A ToolCallingAgent run ends only through its `final_answer` tool; the scenario model calls it with the answer
once the tool result is in the history."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients.scenarios import ASK, CITY, WORKING, weather

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
smolagents = pytest.importorskip("smolagents")
tool = smolagents.tool  # @tool by its bare name: smolagents reads the tool's source and warns at `@smolagents.tool`


def agent(base_url: str, calls: list[str], stream: bool) -> Any:
    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: The city to look up.
        """
        calls.append(city)
        return weather(city)

    model = smolagents.OpenAIServerModel(model_id="m", api_base=base_url, api_key="x",
                                         client_kwargs={"max_retries": 0})
    return smolagents.ToolCallingAgent(tools=[get_weather], model=model, stream_outputs=stream, max_steps=4,
                                       verbosity_level=0)


def run(base_url: str, calls: list[str], stream: bool) -> str:
    runner = agent(base_url, calls, stream)
    try:
        return str(runner.run(ASK))
    finally:
        runner.model.client.close()  # its connections, not left to the garbage collector


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
def test_tool_loop_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = run(base_url, calls, stream)
    assert calls == [CITY]
    assert weather(CITY) in final
    assert model.streamed(stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_surfaces_as_an_agent_error(scripted, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    calls: list[str] = []
    with pytest.raises(smolagents.AgentGenerationError) as raised:
        run(base_url, calls, stream)
    assert calls == []
    assert "could not be repaired" in str(raised.value)


debug_run = run
