"""LangChain's ChatOllama (langchain-ollama) in its default configuration (`base_url` the proxy's root,
/api/chat), a bind_tools loop in front of the fake Ollama whose model fumbles its calls: invoke and stream (both
stream NDJSON on the wire, as ChatOllama always asks), the client's options reaching /api/chat each round."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")
langchain_ollama = pytest.importorskip("langchain_ollama")
messages_mod = pytest.importorskip("langchain_core.messages")
tools_mod = pytest.importorskip("langchain_core.tools")

from tests.fakes.ollama_model import ASK, CITY, SCENARIOS, not_kept, weather  # noqa: E402

OPTIONS = {"num_ctx": 8192, "temperature": 0.2, "top_k": 20}


def weather_tool(calls: list[str]) -> Any:
    @tools_mod.tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return weather(city)

    return get_weather


def bind_tools_loop(root: str, model: str, calls: list[str], stream: bool, **settings: Any) -> Any:
    tool = weather_tool(calls)
    llm = langchain_ollama.ChatOllama(model=model, base_url=root, **settings).bind_tools([tool])
    history: list[Any] = [messages_mod.HumanMessage(ASK)]
    for _ in range(4):
        if stream:
            reply = None
            for chunk in llm.stream(history):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = llm.invoke(history)
        history.append(reply)
        if not reply.tool_calls:
            return reply
        for call in reply.tool_calls:
            history.append(tool.invoke(call))  # a ToolMessage carrying the call's id
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_tool_loop_ends_with_the_tools_result(ollama_scripted, scenario, stream):
    root, model = ollama_scripted(scenario)
    calls: list[str] = []
    settings = {"reasoning": True} if scenario == "think" else {}
    reply = bind_tools_loop(root, model.model, calls, stream, **settings)
    assert calls == [CITY] and weather(CITY) in str(reply.content)
    if scenario == "think":  # ChatOllama keeps the thinking apart from the content
        assert reply.additional_kwargs.get("reasoning_content") == "I have the result."


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("scenario", ["native", "broken_args", "no_tools"])
def test_the_clients_options_reach_ollama_on_every_round(ollama_scripted, fake_ollama, scenario, stream):
    root, model = ollama_scripted(scenario)
    calls: list[str] = []
    reply = bind_tools_loop(root, model.model, calls, stream, keep_alive="10m", **OPTIONS)
    assert weather(CITY) in str(reply.content)
    assert not_kept(fake_ollama[0], model, options=OPTIONS, keep_alive="10m") == []


def test_a_correct_call_is_untouched_in_one_round(ollama_scripted):
    root, model = ollama_scripted("native")
    llm = langchain_ollama.ChatOllama(model=model.model, base_url=root).bind_tools([weather_tool([])])
    reply = llm.invoke([messages_mod.HumanMessage(ASK)])
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_weather", {"city": CITY})]
    assert reply.content == "" and len(model.requests) == 1
