"""Hostile input, round 3: tenants apart in auto mode. Any client can make its model fail to parse; those
failures flipped the model to prompted for every client for good (the count never decayed). Each test fails
without its fix (upstreams/auto_mode.py)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from sanctum_proxy.upstreams.auto_mode import ModeBook
from tests.fakes.upstream import Step, completion, llama_error

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
PARSE_FAILURE = llama_error("Failed to parse input at pos 12: <tool_call>{bad")


def test_parse_failures_spread_over_time_never_reach_the_threshold():
    now = [1000.0]
    book = ModeBook(parse_failure_threshold=3, clock=lambda: now[0], failure_window=600)
    for _ in range(10):  # one failure every 5 minutes: never 3 within 10
        assert book.parse_failure("u", "m") is False
        now[0] += 301
    decision = book.get("u", "m")
    assert decision is not None and decision.mode == "native" and decision.parse_failures <= 2


def test_a_flip_by_parse_failures_ends_after_parse_failure_flip_seconds():
    now = [1000.0]
    book = ModeBook(parse_failure_threshold=2, clock=lambda: now[0], failure_flip=3600)
    book.parse_failure("u", "m")
    assert book.parse_failure("u", "m") is True and book.get("u", "m").mode == "prompted"
    now[0] += 3601
    assert book.get("u", "m") is None  # native again: the flip was not for good
    book.settle("u", "t", "prompted", "tools_rejected")
    assert book.get("u", "t").mode == "prompted"  # the upstream's own refusal of tools stays


def test_one_clients_induced_parse_failures_flip_nobody_for_good(make_proxy, fake):
    proxy = make_proxy(parse_failure_threshold=2, parse_failure_flip_seconds=1, probe_capabilities=False)
    with httpx.Client(base_url=proxy, timeout=10) as c:
        for _ in range(2):
            fake[0].push(Step(status=PARSE_FAILURE[0], body=PARSE_FAILURE[1]), Step(body=completion("ok")))
            assert c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]}).status_code == 200
        fake[0].push(Step(body=completion("ok")))
        assert c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]}).headers[
            "x-sanctum-spell-calling"] == "prompted"
        time.sleep(1.2)
        fake[0].push(Step(body=completion("ok")))
        other = c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]})
    assert other.headers["x-sanctum-spell-calling"] == "native" and "tools" in fake[0].requests[-1]


def quoting_the_start(body: dict[str, Any]) -> Any:
    """An upstream whose validation error quotes the first 60 characters of the last message (cut, not whole)."""
    text = body["messages"][-1]["content"][:60]
    return Step(status=400, body={"error": {"message": f"invalid message starting {text!r}",
                                            "type": "invalid_request_error"}})


def test_a_client_phrase_the_upstream_quotes_only_in_part_flips_nobody(make_proxy, fake):
    """The echo rule cut out only whole strings: an upstream quoting the start of a long one let a client's
    "does not support tools" flip the model for everyone."""
    proxy = make_proxy(probe_capabilities=False)
    fake[0].responder = quoting_the_start
    words = "This model does not support tools. " + "x" * 200
    for _ in range(3):
        r = httpx.post(proxy + "/v1/chat/completions", timeout=20, json={
            **ASK, "tools": [WEATHER], "messages": [{"role": "user", "content": words}]})
        assert r.status_code == 400, r.text
    fake[0].responder = None
    fake[0].push(Step(body=completion("ok")))
    other = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20)
    assert other.headers["x-sanctum-spell-calling"] == "native" and "tools" in fake[0].requests[-1]
    assert httpx.get(proxy + "/sanctum/status", timeout=10).json()["modes"] == []
