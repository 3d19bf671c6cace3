"""Agent frameworks' own tool loops, unmodified, through the proxy in front of the real llama-server
(SmolLM2-135M, --no-jinja, constrain = "always" as the embedded default sets it): the loop calls the tool, gets
its result and ends with text, streamed and not (temperature 0 and a seed, set the frameworks' own way).
The same frameworks against the scripted fake: tests/clients/.

SmolLM2 calls the tool again after every result; the proxy bounces that repeat (repair/answers.py) and asks
for text, so the loop ends instead of running to the framework's turn cap. At temperature 0 its text often
echoes the prompted history's `<tool_response ...>` wrapper around the result: the proxy takes the tags out
(repair/prompted.without_result_tags), streamed or not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.clients.scenarios import CITY

pytestmark = [pytest.mark.e2e,
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::PendingDeprecationWarning")]
STREAM = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


@pytest.fixture
def proxy(constrained_proxy: str) -> str:
    return constrained_proxy + "/v1"


def ended_with_the_result(final: Any, calls: list[str]) -> None:
    text = str(final)
    assert calls and all(c.lower() == CITY.lower() for c in calls), (calls, text)
    assert text.strip() and "tool_call" not in text and "tool_response" not in text, text
    assert "21" in text, text  # the tool said "Paris: sunny, 21 C, wind 7 km/h (station report 4711)"
    print("final:", repr(text))


@STREAM
def test_openai_agents_chat_completions_model(proxy, stream, monkeypatch):
    agents = pytest.importorskip("agents")
    from tests.clients import test_openai_agents

    deterministic = agents.ModelSettings(temperature=0, extra_args={"seed": 42})
    real_agent = agents.Agent
    monkeypatch.setattr(test_openai_agents.agents, "Agent",
                        lambda **kw: real_agent(**kw, model_settings=deterministic))
    calls: list[str] = []
    ended_with_the_result(asyncio.run(test_openai_agents.run(proxy, calls, stream)), calls)


@STREAM
def test_openai_agents_default_responses_model(proxy, stream, monkeypatch):
    agents = pytest.importorskip("agents")
    from tests.clients import test_openai_agents

    deterministic = agents.ModelSettings(temperature=0, extra_body={"seed": 42})  # a Responses field: no seed
    real_agent = agents.Agent
    monkeypatch.setattr(test_openai_agents.agents, "Agent",
                        lambda **kw: real_agent(**kw, model_settings=deterministic))
    calls: list[str] = []
    ended_with_the_result(asyncio.run(test_openai_agents.run(proxy, calls, stream, api="responses")), calls)


@STREAM
def test_anthropic_tool_runner_default_thread_mode(proxy, stream):
    pytest.importorskip("anthropic")
    from tests.clients import test_anthropic_tool_runner

    calls: list[str] = []
    ended_with_the_result(test_anthropic_tool_runner.run(  # this SDK takes no temperature argument
        proxy, calls, stream, extra_body={"temperature": 0}), calls)


@STREAM
def test_openai_agents_js_default_responses_model(proxy, stream):
    from tests.clients.node_loops import NODE_DIR, run_loop

    if not (NODE_DIR / "node_modules" / "@openai" / "agents").is_dir():
        pytest.skip("tests/node/node_modules/@openai/agents missing (npm ci in tests/node)")
    out = run_loop(proxy, "agents", stream)
    assert "error" not in out, out
    ended_with_the_result(out["text"], out["calls"])


@pytest.fixture
def deterministic_langchain(monkeypatch):
    langchain_openai = pytest.importorskip("langchain_openai")
    from tests.clients import test_langchain

    real = langchain_openai.ChatOpenAI
    monkeypatch.setattr(test_langchain.langchain_openai, "ChatOpenAI",
                        lambda **kw: real(**kw, temperature=0, seed=42))
    return test_langchain


@STREAM
def test_langchain_bind_tools_loop(proxy, stream, deterministic_langchain):
    calls: list[str] = []
    ended_with_the_result(deterministic_langchain.bind_tools_loop(proxy, calls, stream), calls)


@STREAM
def test_langgraph_react_agent(proxy, stream, deterministic_langchain):
    calls: list[str] = []
    ended_with_the_result(deterministic_langchain.langgraph_agent(proxy, calls, stream), calls)
