"""A client that retries errors never multiplies hidden rounds: the same request sent again within the memo's TTL
after its surrender error gets one upstream round, then the surrender at once, saying so. The client here resends
as goose does when a surrender error ends its stream (goose 1.52 measured in tests/clients/test_coding_agents.py:
the whole request again, 3 more times; crates/goose/src/providers/retry.rs DEFAULT_MAX_RETRIES = 3)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.upstream import Step, completion, content_chunks
from tests.stream_rules import read_stream
from tests.tools import WEATHER

# A model that never writes a call the request offers: no usable last call, so on_surrender "last_call" is the
# surrender error too.
UNKNOWN = '<tool_call>{"name": "write_file", "arguments": {"path": "notes.md"}}</tool_call>'
GOOD = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
RETRIES = 3


def ask(stream: bool, question: str = "Weather in Paris?") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}], "tools": [WEATHER], "stream": stream}


def attempt(proxy: str, raw: bytes, stream: bool, key: str = "") -> dict[str, Any] | None:
    """One send of the request's bytes: its error object, or None when it was answered."""
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
    if not stream:
        r = httpx.post(proxy + "/v1/chat/completions", content=raw, headers=headers, timeout=20)
        return r.json()["error"] if r.status_code >= 400 else None
    with httpx.stream("POST", proxy + "/v1/chat/completions", content=raw, headers=headers, timeout=20) as r:
        body = r.read()
    return orjson.loads(body)["error"] if r.status_code >= 400 else read_stream(body).error


def like_goose(proxy: str, body: dict[str, Any], key: str = "") -> list[dict[str, Any] | None]:
    """The outcome of each attempt: the same bytes again after an error, at most RETRIES more times."""
    raw = orjson.dumps(body)
    outcomes = [attempt(proxy, raw, body["stream"], key)]
    while outcomes[-1] is not None and len(outcomes) <= RETRIES:
        outcomes.append(attempt(proxy, raw, body["stream"], key))
    return outcomes


def never_right(stream: bool) -> Any:
    return lambda _body: Step(chunks=content_chunks(UNKNOWN)) if stream else Step(body=completion(UNKNOWN))


@pytest.mark.parametrize("stream", [False, True])
def test_a_resent_surrendered_request_gets_one_round_each_time(proxy, fake, stream):
    fake[0].responder = never_right(stream)
    outcomes = like_goose(proxy, ask(stream))
    assert len(outcomes) == 1 + RETRIES and all(o is not None for o in outcomes)
    # 2 rounds the first time (the repeated answer ends them early), then one per resend: not 4 x 2.
    assert len(fake[0].requests) == 2 + RETRIES
    assert all(o is not None and o["type"] == "spell_call_parse_error" for o in outcomes)
    assert "one round" not in outcomes[0]["message"]  # type: ignore[index]
    for again in outcomes[1:]:
        assert again is not None and again["message"].endswith("surrendered 0 s before, so it had one round")
        assert again["rounds"] == 1


def test_a_resent_request_the_model_now_answers_is_answered(proxy, fake):
    fake[0].responder = never_right(False)
    raw = orjson.dumps(ask(False))
    assert attempt(proxy, raw, False) is not None and len(fake[0].requests) == 2
    fake[0].responder = None
    fake[0].push(Step(body=completion(GOOD)))
    got = httpx.post(proxy + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"},
                     timeout=20).json()
    assert got["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert len(fake[0].requests) == 3


def test_another_request_or_another_client_key_gets_every_round(make_proxy, fake):
    proxy = make_proxy(api_keys=["k1", "k2"])
    fake[0].responder = never_right(False)
    like_goose(proxy, ask(False), key="k1")
    counted = len(fake[0].requests)
    assert attempt(proxy, orjson.dumps(ask(False, "Weather in Rome?")), False, "k1") is not None
    assert attempt(proxy, orjson.dumps(ask(False)), False, "k2") is not None
    assert len(fake[0].requests) == counted + 2 + 2


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages", {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "Weather?"}],
                      "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}),
    ("/v1/responses", {"model": "m", "input": "Weather?", "tools": [
        {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]}),
])
def test_every_door_remembers_a_surrender(proxy, fake, path, body):
    fake[0].responder = never_right(False)
    raw = orjson.dumps(body)
    statuses = [httpx.post(proxy + path, content=raw, headers={"content-type": "application/json"},
                           timeout=20).status_code for _ in range(1 + RETRIES)]
    assert statuses == [422] * (1 + RETRIES) and len(fake[0].requests) == 2 + RETRIES
