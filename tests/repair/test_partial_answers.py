"""A partly bad answer (docs/contract.md section 5): its valid calls are kept and only its bad calls corrected; when
the rounds run out (or the request takes one call) the kept calls are the answer and each bad call is left out
with a SpellCallsDropped omen (reason "unrepaired"), unless the request's tool_choice names a tool no kept call
is. Through the real proxy and the scripted fake upstream, streamed and not."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.upstream import Step, completion, native_call
from tests.stream_rules import read_stream
from tests.tools import WEATHER

TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
QUESTION = [{"role": "user", "content": "Weather in Paris and in London, and the time?"}]
PARIS, LONDON = ("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "London"}')
BAD_TIME, GOOD_TIME = ("get_time", '{"city": "Paris"}'), ("get_time", "{}")


def calls_chunks(*calls: tuple[str, str]) -> list[dict[str, Any]]:
    """llama.cpp's stream of several native calls: each call's name (with its id), then its arguments."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": None})]
    for i, (name, arguments) in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": f"c{i}", "type": "function", "function": {"name": name}}]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments}}]}))
    out.append(chunk({}, "tool_calls"))
    return out


def answer(stream: bool, *calls: tuple[str, str]) -> Step:
    if stream:
        return Step(chunks=calls_chunks(*calls))
    return Step(body=completion(None, [native_call(n, a, f"c{i}") for i, (n, a) in enumerate(calls)], "tool_calls"))


def ask(client: httpx.Client, stream: bool, **extra: Any) -> tuple[int, list[tuple[str, Any]], list[dict[str, Any]]]:
    """Status, the answer's calls (name, arguments) and omens."""
    body = {"model": "m", "messages": QUESTION, "tools": TOOLS, "stream": stream,
            "sanctum": {"spell_calling": "native"}, **extra}
    if stream:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            got = read_stream(r.read())
        return r.status_code, [(c["name"], orjson.loads(c["arguments"])) for c in got.calls], got.omens
    r = client.post("/v1/chat/completions", json=body)
    if r.status_code != 200:
        return r.status_code, [], []
    message = r.json()["choices"][0]["message"]
    calls = [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in message["tool_calls"] or []]
    return 200, calls, r.json()["sanctum"]["omens"]


STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
ALL_THREE = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"}), ("get_time", {})]


@STREAMS
def test_the_valid_calls_are_kept_and_only_the_bad_one_is_corrected(client, fake, stream):
    fake[0].push(answer(stream, PARIS, LONDON, BAD_TIME), answer(stream, GOOD_TIME))
    status, calls, omens = ask(client, stream)
    assert status == 200 and calls == ALL_THREE
    first, second = fake[0].requests
    rejected, correction = second["messages"][len(first["messages"]):]
    assert '"London"' in rejected["content"] and '"get_time"' in rejected["content"]  # the whole answer
    said = correction["content"]
    assert "(get_weather) are kept" in said and "unexpected argument 'city'" in said and "get_time" in said
    assert [o["spell"] for o in omens if o["type"] == "SpellCallRejected"] == ["get_time"]


@STREAMS
def test_valid_calls_the_correction_round_repeats_are_not_doubled(client, fake, stream):
    fake[0].push(answer(stream, PARIS, LONDON, BAD_TIME), answer(stream, PARIS, LONDON, GOOD_TIME))
    status, calls, _ = ask(client, stream)
    assert status == 200 and calls == ALL_THREE


@STREAMS
def test_when_the_rounds_run_out_the_kept_calls_are_the_answer_and_the_bad_one_is_dropped(client, fake, stream):
    fake[0].push(answer(stream, PARIS, LONDON, BAD_TIME), answer(stream, ("get_time", '{"zone": "CET"}')))
    status, calls, omens = ask(client, stream, sanctum={"spell_calling": "native", "max_repair_rounds": 1})
    assert status == 200 and calls == ALL_THREE[:2]
    dropped = [o for o in omens if o["type"] == "SpellCallsDropped"]
    assert [(o["spell"], o["reason"]) for o in dropped] == [("get_time", "unrepaired")] and "zone" in dropped[0]["raw"]
    assert len(fake[0].requests) == 2


@STREAMS
def test_a_named_tool_choice_the_kept_calls_do_not_answer_still_surrenders(client, fake, stream):
    # the client asks for get_time; the (odd) upstream answers get_weather beside a bad get_time, twice
    fake[0].push(answer(stream, PARIS, BAD_TIME), answer(stream, PARIS, BAD_TIME))
    body = {"model": "m", "messages": QUESTION, "tools": TOOLS, "stream": stream,
            "sanctum": {"spell_calling": "native", "on_surrender": "error"},
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    if stream:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            got = read_stream(r.read())
        error = got.error
        assert not got.calls
    else:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 422
        error = r.json()["error"]
    assert error is not None and error["type"] == "spell_call_parse_error" and len(fake[0].requests) == 2


@STREAMS
def test_where_the_request_takes_one_call_a_valid_one_is_the_answer_at_once(client, fake, stream):
    fake[0].push(answer(stream, BAD_TIME, PARIS))
    status, calls, omens = ask(client, stream, parallel_tool_calls=False)
    assert status == 200 and calls == [("get_weather", {"city": "Paris"})] and len(fake[0].requests) == 1
    assert [(o["spell"], o["reason"]) for o in omens if o["type"] == "SpellCallsDropped"] == [
        ("get_time", "unrepaired")]
