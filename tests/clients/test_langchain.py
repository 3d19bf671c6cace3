"""langchain-openai's ChatOpenAI: a hand-written bind_tools loop and a langgraph ReAct agent, through the proxy,
streamed and not."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from tests.clients.scenarios import ASK, CITY, WORKING, weather

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
langchain_openai = pytest.importorskip("langchain_openai")
messages_mod = pytest.importorskip("langchain_core.messages")
tools_mod = pytest.importorskip("langchain_core.tools")
openai = pytest.importorskip("openai")


def weather_tool(calls: list[str]) -> Any:
    @tools_mod.tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return weather(city)

    return get_weather


def chat(base_url: str, stream: bool) -> Any:
    return langchain_openai.ChatOpenAI(model="m", base_url=base_url, api_key="x", max_retries=0, streaming=stream)


def bind_tools_loop(base_url: str, calls: list[str], stream: bool) -> str:
    tool = weather_tool(calls)
    llm = chat(base_url, stream).bind_tools([tool])
    history: list[Any] = [messages_mod.HumanMessage(ASK)]
    for _ in range(5):
        if stream:
            reply = None
            for chunk in llm.stream(history):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = llm.invoke(history)
        history.append(reply)
        if not reply.tool_calls:
            return str(reply.content)
        for call in reply.tool_calls:
            history.append(tool.invoke(call))  # a ToolMessage carrying the call's id
    raise AssertionError("the loop did not end")


def langgraph_agent(base_url: str, calls: list[str], stream: bool) -> str:
    prebuilt = pytest.importorskip("langgraph.prebuilt")
    agent = prebuilt.create_react_agent(chat(base_url, stream), [weather_tool(calls)])
    inputs = {"messages": [("user", ASK)]}
    if not stream:
        return str(agent.invoke(inputs)["messages"][-1].content)
    last = None
    for state in agent.stream(inputs, stream_mode="values"):
        last = state
    assert last is not None
    return str(last["messages"][-1].content)


LOOPS = {"bind_tools": bind_tools_loop, "langgraph": langgraph_agent}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
@pytest.mark.parametrize("loop", list(LOOPS))
def test_tool_loop_runs_the_tool_and_answers_with_its_result(scripted, loop, scenario, stream):
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = LOOPS[loop](base_url, calls, stream)
    assert calls == [CITY]
    assert weather(CITY) in final
    assert model.streamed(stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("loop", list(LOOPS))
def test_surrender_surfaces_as_an_api_error(scripted, loop, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    calls: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        LOOPS[loop](base_url, calls, stream)
    assert calls == []
    assert "could not be repaired" in raised.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_after_a_surrender_langgraphs_tool_node_answers_the_model_with_its_own_error(scripted, stream):
    # on_surrender = "last_call" (the default): ToolNode validates the last call itself and hands the model the
    # error as the tool's message; the run ends with the model's answer quoting it.
    base_url, model = scripted("surrender")
    calls: list[str] = []
    final = LOOPS["langgraph"](base_url, calls, stream)
    assert calls == [] and "city: Field required" in final


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_after_a_surrender_a_hand_written_bind_tools_loop_meets_the_tools_own_validation_error(scripted, stream):
    # A loop that invokes the tool with the model's arguments unchecked: the clients on_surrender = "error" serves.
    base_url, model = scripted("surrender")
    calls: list[str] = []
    with pytest.raises(pydantic.ValidationError):
        LOOPS["bind_tools"](base_url, calls, stream)
    assert calls == []


def debug_run(base_url: str, calls: list[str], stream: bool) -> str:
    import os
    return LOOPS[os.environ.get("LOOP", "bind_tools")](base_url, calls, stream)
