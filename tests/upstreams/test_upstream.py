"""Upstream connections as real servers treat them: a streamed answer spends its connection (llama-server),
or leaves it working (Ollama's Go net/http, vLLM's uvicorn: the scripted fake itself), a kept-alive connection
can be closed under the proxy (an expired keep-alive). Requests that need a second round must still end in a
call, streamed or not (tests/fakes/llama_connections.py relays like llama-server); streamed rounds reuse their
connections wherever the upstream keeps them, and never again after it has shown that it drops them."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from tests.conftest import ServerThread
from tests.fakes.llama_connections import StreamSpentRelay
from tests.fakes.upstream import FakeUpstream, Step, completion, llama_tool_chunks, native_call
from tests.stream_rules import read_stream
from tests.tools import WEATHER

ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
       "sanctum": {"constrain": "off"}}


@pytest.fixture
def relayed(fake: tuple[FakeUpstream, str]) -> Iterator[tuple[FakeUpstream, StreamSpentRelay, str, object]]:
    """The fake behind a llama-server-like relay, the proxy in front: (fake, relay, proxy url, proxy app)."""
    port = int(fake[1].rsplit(":", 1)[1])
    with StreamSpentRelay(port) as relay:
        app = create_app(load_settings({"upstream": relay.url + "/v1", "traces_path": ":memory:"}))
        with ServerThread(app) as proxy:
            yield fake[0], relay, proxy.url, app


def _upstream(app: object):  # type: ignore[no-untyped-def]
    return app.state.services.pools.default  # type: ignore[attr-defined]


LLAMA_PROPS = {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1,
               "chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}


def _correction_then_call() -> tuple[Step, Step]:
    return (Step(chunks=llama_tool_chunks("get_weather", "{}")),  # missing city: a correction round
            Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))


def _streamed_call(url: str) -> dict[str, str]:
    with httpx.stream("POST", url + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=30) as r:
        body = b"".join(r.iter_bytes())
    assert b'"error"' not in body, body
    calls = read_stream(body).calls
    assert len(calls) == 1, body
    return {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}


def test_streamed_request_with_a_correction_round_ends_in_the_call(relayed):
    upstream, relay, url, app = relayed
    upstream.props = LLAMA_PROPS  # /props says llama.cpp: streamed rounds get connections of their own at once
    upstream.push(Step(chunks=llama_tool_chunks("get_weather", "{}")),  # missing city: a correction round
                  Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))
    with httpx.stream("POST", url + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=30) as r:
        body = b"".join(r.iter_bytes())
    assert b'"error"' not in body, body
    stream = read_stream(body)
    assert [c["name"] for c in stream.calls] == ["get_weather"]
    assert orjson.loads(stream.calls[0]["arguments"]) == {"city": "Paris"}
    assert len(upstream.requests) == 2 and relay.refused == 0  # the spent connection was never offered again
    assert relay.streams == [1, 1] and _upstream(app).resent == 0
    assert "/props" in (_upstream(app).streams_spend or "")


def test_an_upstream_that_drops_streamed_connections_is_learned_from_the_first_drop(relayed):
    upstream, relay, url, app = relayed  # /props answers 404 (vLLM, LM Studio): nothing known beforehand
    for _ in range(3):
        upstream.push(*_correction_then_call())
        assert _streamed_call(url) == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert relay.refused == 1 and _upstream(app).resent == 1  # one round met the spent connection, sent again
    assert len(upstream.requests) == 6  # the dropped request never reached the model: nothing ran twice
    assert sorted(relay.streams) == [1] * 6  # from then on every streamed round had a connection of its own
    assert "closed under the next request" in (_upstream(app).streams_spend or "")
    assert _upstream(app).snapshot()["streamed_connections"].startswith("own: ")
    shown = httpx.get(url + "/sanctum/status", timeout=10).json()["upstreams"]  # the single `upstream` setting
    assert [(u["models"], u["streamed_connections"][:5]) for u in shown] == [(["*"], "own: ")]


def test_an_upstream_that_keeps_connections_after_a_stream_serves_every_round_on_one(relayed):
    upstream, relay, url, app = relayed
    relay.spend_streams = False  # Ollama (Go net/http) and vLLM (uvicorn) keep the connection after a stream
    for _ in range(2):
        upstream.push(*_correction_then_call())
        assert _streamed_call(url)["arguments"] == '{"city": "Paris"}'
    assert relay.refused == 0 and _upstream(app).resent == 0 and _upstream(app).streams_spend is None
    assert len(upstream.requests) == 4
    assert relay.streams == [4]  # all four streamed rounds on one connection
    assert _upstream(app).snapshot()["streamed_connections"] == "pooled"


def test_a_stream_cut_on_a_reused_connection_is_not_sent_again(relayed):
    upstream, relay, url, app = relayed
    relay.spend_streams = False
    upstream.push(*_correction_then_call())
    _streamed_call(url)  # the stream pool now holds a connection
    upstream.push(Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}'), die_after=2))
    with httpx.stream("POST", url + "/v1/chat/completions", json={**ASK, "stream": True}, timeout=30) as r:
        body = b"".join(r.iter_bytes())
    assert b'"error"' in body  # its answer had started: an in-band error, the round is not run again
    assert len(upstream.requests) == 3 and _upstream(app).resent == 0


def test_three_streamed_rounds_in_a_row_each_get_a_working_connection(relayed):
    upstream, relay, url, _ = relayed
    upstream.push(Step(chunks=llama_tool_chunks("get_weather", "{}")),
                  Step(chunks=llama_tool_chunks("get_wether", '{"city": "Paris"}')),
                  Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}')))
    with httpx.stream("POST", url + "/v1/chat/completions",
                      json={**ASK, "stream": True, "sanctum": {"constrain": "off", "max_repair_rounds": 2}},
                      timeout=30) as r:
        stream = read_stream(b"".join(r.iter_bytes()))
    assert [c["name"] for c in stream.calls] == ["get_weather"]
    assert len(upstream.requests) == 3


def test_a_connection_closed_before_the_answer_is_sent_again_fresh_once(relayed):
    upstream, relay, url, app = relayed
    relay.every_answer = True  # every answer spends its connection: the second round meets a dead one
    upstream.push(Step(body=completion(None, [native_call("get_weather", "{}")], "tool_calls")),
                  Step(body=completion(None, [native_call("get_weather", '{"city": "Paris"}')], "tool_calls")))
    r = httpx.post(url + "/v1/chat/completions", json=ASK, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert relay.refused >= 1 and _upstream(app).resent == relay.refused  # the probes meet dead ones too
    assert len(upstream.requests) == 2  # the dropped request never reached the model: nothing ran twice


def test_a_failed_round_is_recorded_in_the_trace_with_its_own_status(fake):
    upstream, fake_url = fake
    upstream.push(Step(chunks=llama_tool_chunks("get_weather", "{}")),
                  Step(chunks=llama_tool_chunks("get_weather", '{"city": "Paris"}'), die_after=2))
    app = create_app(load_settings({"upstream": fake_url + "/v1", "traces_path": ":memory:"}))
    with ServerThread(app) as proxy:
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json={**ASK, "stream": True},
                          timeout=30) as r:
            trace_id = r.headers["x-sanctum-trace-id"]
            body = b"".join(r.iter_bytes())
        assert b'"error"' in body  # the second round died: an in-band error, never a silent cut
        trace = httpx.get(f"{proxy.url}/sanctum/traces/{trace_id}").json()
    first, second = trace["rounds"]
    assert first["status"] == 200 and first["outcome"] == "rejected"
    assert second["status"] == 502 and second["outcome"] == "error"
    assert second["error"]["type"] == "upstream_unreachable" and second["latency_ms"] > 0
