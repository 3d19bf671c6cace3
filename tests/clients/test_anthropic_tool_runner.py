"""The anthropic SDK's tool runner (`client.beta.messages.tool_runner`) in its default configuration runs its tool
loop through the proxy's /v1/messages, streamed and not.

By default the runner keeps the conversation in a server-side thread: its first request carries `"thread":
{"type": "create"}`, later ones only the new tool_result with `"thread": {"type": "continue", ...}`. The proxy keeps
no threads, so it refuses `thread` with Anthropic's `thread_unsupported_request`, and the runner sends each turn
again with the whole history and no `thread` (anthropic/lib/threads/_thread_state.py `recovers_from`)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from tests.clients.scenarios import ASK, CITY, WORKING, weather

anthropic = pytest.importorskip("anthropic")


def run(base_url: str, calls: list[str], stream: bool, **options: Any) -> str:
    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: the city's name
        """
        calls.append(city)
        return weather(city)

    seen: list[dict[str, Any]] = []

    def record(request: httpx2.Request) -> None:
        if request.url.path.endswith("/v1/messages"):
            seen.append({"thread": request.read().find(b'"thread"') >= 0})

    http = httpx2.Client(event_hooks={"request": [record]})
    with anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key="x", max_retries=0,
                             http_client=http) as client:
        runner = client.beta.messages.tool_runner(
            model="m", max_tokens=300, tools=[get_weather], messages=[{"role": "user", "content": ASK}],
            **({"stream": True} if stream else {}), **options)
        if stream:
            for message_stream in runner:
                for _ in message_stream:
                    pass
        final = runner.until_done()
    assert seen and seen[0]["thread"], "the runner's first request did not ask for a thread (default changed?)"
    return "".join(b.text for b in final.content if b.type == "text")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("scenario", WORKING)
def test_default_thread_mode_runner_resends_the_history_and_answers_with_the_result(scripted, scenario, stream):
    base_url, model = scripted(scenario)
    calls: list[str] = []
    final = run(base_url, calls, stream)
    assert calls == [CITY]
    assert weather(CITY) in final
    assert model.streamed(stream)
    assert all("thread" not in r for r in model.requests)  # refused, never forwarded
    history = [m for m in model.requests[-1]["messages"] if m["role"] != "system"]  # the whole history, resent
    assert history[0] == {"role": "user", "content": ASK} and history[1]["role"] == "assistant"
    assert weather(CITY) in str(history[-1]["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_surrender_gives_the_runner_the_last_call_and_its_own_validation_error_goes_to_the_model(scripted, stream):
    # The model never names `city` (scenarios.py `surrender`): after the last repair round the proxy answers the
    # last call as it was made (messages_on_surrender = "last_call"); the runner checks the input itself, answers
    # with an error tool_result, and the run goes on to the model's answer instead of ending in an API error.
    base_url, model = scripted("surrender")
    calls: list[str] = []
    final = run(base_url, calls, stream)
    assert calls == []  # the tool never ran with bad input
    errors = [m for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    assert errors and "Invalid arguments for function get_weather" in errors[-1]["content"]  # the SDK's words
    assert final.startswith("The weather tool said: Error: ")
