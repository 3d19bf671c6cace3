"""The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`): generateText and streamText with a tool and
stopWhen, through the proxy (tests/node/tool_loops.mjs)."""

from __future__ import annotations

import pytest

from tests.clients.node_loops import need, run_loop
from tests.clients.scenarios import CITY, WORKING, weather

need("@ai-sdk/openai-compatible")


@pytest.mark.parametrize("stream", [False, True], ids=["generateText", "streamText"])
@pytest.mark.parametrize("scenario", WORKING)
def test_tool_loop_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    out = run_loop(base_url, "ai-sdk", stream)
    assert "error" not in out, out
    assert out["calls"] == [CITY]
    assert weather(CITY) in out["text"]
    assert model.streamed(stream)


@pytest.mark.parametrize("stream", [False, True], ids=["generateText", "streamText"])
def test_surrender_surfaces_as_an_api_call_error(scripted, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    out = run_loop(base_url, "ai-sdk", stream)
    assert out["calls"] == []
    assert "could not be repaired" in out["error"]["message"], out
    # generateText throws an APICallError with the status; streamText yields an `error` part whose error is the
    # in-band error event's object as it came.
    assert (out["error"]["name"], out["error"]["status"]) == (("Object", None) if stream else ("APICallError", 422))
