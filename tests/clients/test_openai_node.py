"""openai-node's `chat.completions.runTools` loop through the proxy, streamed and not
(tests/node/tool_loops.mjs)."""

from __future__ import annotations

import pytest

from tests.clients.node_loops import need, run_loop
from tests.clients.scenarios import CITY, WORKING, weather

need("openai")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
def test_run_tools_runs_the_tool_and_answers_with_its_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    out = run_loop(base_url, "runTools", stream)
    assert "error" not in out, out
    assert out["calls"] == [CITY]
    assert weather(CITY) in out["text"]
    assert model.streamed(stream)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_surfaces_as_an_api_error(scripted, stream):
    base_url, model = scripted("surrender", on_surrender="error")  # the error, asked for
    out = run_loop(base_url, "runTools", stream)
    assert out["calls"] == []
    assert "could not be repaired" in out["error"]["message"], out
    assert (out["error"]["name"], out["error"]["status"]) == (
        ("APIError", None) if stream else ("UnprocessableEntityError", 422))  # streamed: the in-band error event
