"""tests/clients/exchanges.py on the proxy's real answers (in front of the scripted fake): a call and a
surrender on each endpoint, and what the proxy must never send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from tests.clients.exchanges import Exchange, Recorder, verdict
from tests.clients.scenarios import ASK, Model
from tests.conftest import ServerThread
from tests.fakes.upstream import Step, content_chunks
from tests.polling import wait_until
from tests.tools import WEATHER_DESCRIBED

MESSAGES_TOOL = {"name": "get_weather", "description": "Weather for a city",
                 "input_schema": WEATHER_DESCRIBED["function"]["parameters"]}
RESPONSES_TOOL = {"type": "function", **WEATHER_DESCRIBED["function"]}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": ASK}],
                             "tools": [WEATHER_DESCRIBED]},
    "/v1/messages": {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": ASK}],
                     "tools": [MESSAGES_TOOL]},
    "/v1/responses": {"model": "m", "input": ASK, "tools": [RESPONSES_TOOL]},
}


@pytest.fixture
def recorded(fake: Any) -> Iterator[Any]:
    def exchange(scenario: str, path: str, stream: bool, **settings: Any) -> Exchange:
        fake[0].responder = Model(scenario)
        recorder = Recorder(create_app(load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:",
                                                      **settings})))
        with ServerThread(recorder) as proxy:
            httpx.post(proxy.url + path, json={**BODIES[path], "stream": stream}, timeout=30,
                       headers={"x-api-key": "x", "anthropic-version": "2023-06-01"})
        assert len(recorder.exchanges) == 1
        return recorder.exchanges[0]

    yield exchange


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(BODIES))
def test_a_repaired_call_reads_as_a_call(recorded, path, stream):
    assert verdict(recorded("malformed_args", path, stream)) == "call"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(BODIES))
def test_a_surrender_reads_as_the_clear_error(recorded, path, stream):
    assert verdict(recorded("surrender", path, stream, on_surrender="error", messages_on_surrender="error",
                            responses_on_surrender="error")) == "spell_call_parse_error"


@pytest.mark.parametrize("path", list(BODIES))
def test_a_cut_stream_is_refused(recorded, path):
    answered = recorded("malformed_args", path, True)
    with pytest.raises(AssertionError):
        verdict(replace(answered, response=answered.response[:len(answered.response) // 2]))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(BODIES))
def test_a_call_to_a_tool_not_offered_is_refused(recorded, path, stream):
    answered = recorded("malformed_args", path, stream)
    renamed = json.loads(json.dumps(answered.body()).replace("get_weather", "get_time"))
    with pytest.raises(AssertionError, match="get_weather"):
        verdict(replace(answered, request=json.dumps(renamed).encode()))


def test_arguments_that_are_not_an_object_are_refused(recorded):
    answered = recorded("malformed_args", "/v1/chat/completions", False)
    listed = answered.response.replace(b'"arguments":"{', b'"arguments":"[{').replace(b'}"}', b'}]"}')
    assert listed != answered.response
    with pytest.raises(AssertionError):
        verdict(replace(answered, response=listed))


def test_a_server_error_is_refused(recorded):
    answered = recorded("surrender", "/v1/chat/completions", False, on_surrender="error")
    with pytest.raises(AssertionError):
        verdict(replace(answered, status=500))


def test_a_client_that_hangs_up_mid_stream_has_left(fake):
    fake[0].responder = lambda body: Step(chunks=content_chunks("Hello file " * 50, size=3), chunk_delay=0.05)
    recorder = Recorder(create_app(load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:"})))
    with ServerThread(recorder) as proxy, httpx.stream(
            "POST", proxy.url + "/v1/chat/completions", timeout=30,
            json={**BODIES["/v1/chat/completions"], "stream": True}) as streaming:
        next(streaming.iter_bytes())
        streaming.close()
        wait_until(lambda: recorder.exchanges[0].left, 10, "the proxy to see the client go")
    assert verdict(recorder.exchanges[0]) == "left"
