"""The OpenAI Agents SDK for JS (@openai/agents) with its default model, the Responses API, runs its tool loop
through the proxy, streamed and not (tests/node/tool_loops.mjs `agents`)."""

from __future__ import annotations

import httpx
import pytest

from tests.clients.node_loops import need, run_loop
from tests.clients.scenarios import CITY, WORKING, Model, weather

need("@openai/agents")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", [*WORKING, "unknown_tool"])
def test_agents_js_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    out = run_loop(base_url, "agents", stream)
    assert "error" not in out, out
    assert out["calls"] == [CITY]
    assert weather(CITY) in out["text"]
    assert model.streamed(stream)
    traces = httpx.get(base_url.removesuffix("/v1") + "/sanctum/traces").json()["data"]
    assert {t["protocol"] for t in traces} == {"responses"}  # the SDK's default model speaks the Responses API


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_after_a_surrender_the_sdk_answers_the_model_with_its_own_error(scripted, stream):
    # responses_on_surrender = "last_call" (the default): the SDK gets the model's last call as it was made, checks
    # it against the tool's zod schema itself and hands the model its own error; the run ends with the model's
    # answer (the scripted model never names `city`, so the answer quotes that error).
    base_url, model = scripted("surrender")
    out = run_loop(base_url, "agents", stream)
    assert "error" not in out, out
    assert out["calls"] == []
    results = [m["content"] for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    assert results and out["text"] == f"The weather tool said: {results[-1]}"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_surfaces_as_an_api_error_where_asked(fake, make_proxy, stream):
    fake[0].responder = Model("surrender")
    out = run_loop(make_proxy(responses_on_surrender="error") + "/v1", "agents", stream)
    assert out["calls"] == []
    assert "could not be repaired" in out["error"]["message"], out
