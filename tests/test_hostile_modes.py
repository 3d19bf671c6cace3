"""Hostile input, round 3: tenants apart in auto mode. Any client can make its model fail to parse; those
failures flipped the model to prompted for every client for good (the count never decayed). A client's text
quoted by the upstream, or an answer the client led its model to give, flipped it too: a flip now follows only
the upstream's answer to the proxy's own request, expires, and is revoked by a native success or the admin.
Each test fails without its fix (upstreams/auto_mode.py, upstreams/lesson_checks.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from sanctum_proxy.upstreams.auto_mode import FLIP_SECONDS, PARSE_FAILURES, ModeBook
from sanctum_proxy.upstreams.lesson_checks import check_body
from tests.fakes.upstream import LLAMA_NO_JINJA, Step, checked, completion, llama_error, native_call
from tests.polling import wait_until
from tests.state.test_replicated import needs_redis, redis_url, replicas  # noqa: F401 (fixtures)

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
    assert book.parse_failure("u", "m") is True
    book.settle("u", "m", "prompted", PARSE_FAILURES)  # as upstreams/lesson_checks.py does once confirmed
    assert book.get("u", "m").mode == "prompted"
    now[0] += 3601
    assert book.get("u", "m") is None  # native again: the flip was not for good
    book.settle("u", "t", "prompted", "tools_rejected")
    assert book.get("u", "t").mode == "prompted"  # the upstream's own refusal of tools stays


def test_one_clients_induced_parse_failures_flip_nobody_for_good(make_proxy, fake):
    proxy = make_proxy(parse_failure_threshold=2, parse_failure_flip_seconds=1, probe_capabilities=False)
    with httpx.Client(base_url=proxy, timeout=10) as c:
        failed = Step(status=PARSE_FAILURE[0], body=PARSE_FAILURE[1])
        fake[0].checks.append(failed)  # at the threshold the proxy's own request fails too
        for _ in range(2):
            fake[0].push(failed, Step(body=completion("ok")))
            assert c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]}).status_code == 200
        wait_until(lambda: shared_modes(proxy) == ["prompted"], 5, "the flip the check confirms")
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


# --- a flip only from the upstream's answer to the proxy's own request --------------------------------------

def echoing_escaped(body: dict[str, Any]) -> Step:
    """An upstream whose validation error quotes the messages as Python's json.dumps writes them (non-ASCII as
    \\uXXXX): a client string holding an é is quoted in a form the request never held, so it is not cut out."""
    return Step(status=400, body={"error": {"message": f"invalid request: {json.dumps(body['messages'])}",
                                            "type": "invalid_request_error"}})


def test_client_text_the_upstream_quotes_in_another_form_flips_nobody(make_proxy, fake):
    """Two strings, each with an é, quoted \\u00e9-escaped: 'tools ...' and 'are not supported' joined into the
    upstream's message, a phrase no single string of the request held."""
    proxy = make_proxy(probe_capabilities=False)
    fake[0].responder = echoing_escaped
    words = ["tools \u00e9", "are not supported \u00e9"]
    for _ in range(3):
        r = httpx.post(proxy + "/v1/chat/completions", timeout=20, json={
            **ASK, "tools": [WEATHER], "messages": [{"role": "user", "content": w} for w in words]})
        assert r.status_code in (200, 400), r.text
    fake[0].responder = None
    fake[0].requests.clear()
    other = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20)
    assert other.headers["x-sanctum-spell-calling"] == "native" and "tools" in fake[0].requests[-1]
    assert httpx.get(proxy + "/sanctum/status", timeout=10).json()["modes"] == []


def test_answers_a_client_made_empty_flip_nobody_while_the_proxys_own_request_gets_a_call(make_proxy, fake):
    """A client can lead its model to answer nothing (read as Ollama's dropped call): the proxy's own request,
    answered with a proper call, shows the model's tools work."""
    proxy = make_proxy(parse_failure_threshold=2, probe_capabilities=False)
    fake[0].checks.append(Step(body=completion(None, [native_call("sanctum_check", "{}")])))
    with httpx.Client(base_url=proxy, timeout=10) as c:
        for _ in range(2):
            fake[0].push(Step(body=completion("")), Step(body=completion("nothing to do")))
            r = c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]})
            assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted", r.text
        assert shared_modes(proxy) in (["native"], [])  # two failures counted, unless the check already forgave them
        wait_until(lambda: shared_modes(proxy) == [], 5, "the count the check's call starts again")
        fake[0].push(Step(body=completion("ok")))
        again = c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]})
        assert again.headers["x-sanctum-spell-calling"] == "native" and "tools" in fake[0].requests[-1]
    (check,) = checked(fake[0].requests)
    assert check["tools"][0]["function"]["name"] == "sanctum_check"
    assert check["messages"] == check_body("m")["messages"]  # no client text in it


def test_a_refusal_the_proxys_own_request_also_gets_flips_the_model(make_proxy, fake):
    proxy = make_proxy(probe_capabilities=False)
    refused = Step(status=LLAMA_NO_JINJA[0], body=LLAMA_NO_JINJA[1])
    fake[0].push(refused, Step(body=completion("ok")))
    fake[0].checks.append(refused)
    r = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20)
    assert r.headers["x-sanctum-spell-calling"] == "prompted"
    wait_until(lambda: [row["reason"] for row in httpx.get(proxy + "/sanctum/status").json()["modes"]]
               == ["tools_rejected"], 5, "the flip the check confirms")


def test_the_clients_round_does_not_wait_for_the_proxys_own_check(make_proxy, fake):
    """The mode check was awaited inside the client's round: a slow model made that client wait up to
    probe_timeout for an answer its own round had already given up on."""
    proxy = make_proxy(probe_capabilities=False, probe_timeout=60)
    refused = Step(*LLAMA_NO_JINJA)
    fake[0].push(refused, Step(body=completion("ok")))
    fake[0].checks.append(Step(*LLAMA_NO_JINJA, delay=3))  # the model answers the check late
    r = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=15)
    assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted", r.text
    assert shared_modes(proxy) == []  # answered before the check was: waiting for it, this was ["prompted"]
    wait_until(lambda: checked(fake[0].requests), 5, "the proxy's own check")
    wait_until(lambda: shared_modes(proxy) == ["prompted"], 10, "the flip once the check is answered")


def test_every_flip_expires():
    now = [1000.0]
    book = ModeBook(clock=lambda: now[0])
    book.settle("u", "m", "prompted", "tools_rejected")
    now[0] += FLIP_SECONDS - 1
    assert book.get("u", "m").mode == "prompted"
    now[0] += 2
    assert book.get("u", "m") is None


@needs_redis
def test_a_shared_flip_is_revoked_by_a_native_success_and_by_the_admin(fake, redis_url, replicas):  # noqa: F811
    upstream, url = fake
    first, second = replicas(redis_url=redis_url), replicas(redis_url=redis_url)
    refused = Step(*LLAMA_NO_JINJA)
    upstream.push(refused, Step(body=completion("ok")))
    upstream.checks.append(refused)
    assert httpx.post(f"{first}/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20).json()[
        "sanctum"]["mode"] == "prompted"
    wait_until(lambda: shared_modes(second) == ["prompted"], 5, "the second replica to see the flip")

    # A client that asks natively on the second replica and gets the upstream's own call: the flip ends everywhere.
    upstream.push(Step(body=completion(None, [native_call("get_weather", '{"city": "Oslo"}')])))
    r = httpx.post(f"{second}/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20,
                   headers={"x-sanctum-spell-calling": "native"})
    assert r.json()["choices"][0]["message"]["tool_calls"], r.text
    wait_until(lambda: shared_modes(first) == [], 5, "the first replica to see the flip revoked")

    upstream.push(refused, Step(body=completion("ok")))
    upstream.checks.append(refused)
    httpx.post(f"{first}/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20)
    wait_until(lambda: shared_modes(second) == ["prompted"], 5, "the flip again")
    cleared = httpx.delete(f"{second}/sanctum/modes", params={"model": "m"}, timeout=10)
    assert cleared.status_code == 200 and cleared.json()["cleared"] == 1
    wait_until(lambda: shared_modes(first) == [], 5, "the first replica to see the flip cleared")


def shared_modes(proxy: str) -> list[str]:
    return [row["mode"] for row in httpx.get(f"{proxy}/sanctum/status", timeout=5).json()["modes"]]



def test_clearing_modes_takes_the_admin_key(make_proxy):
    proxy = make_proxy(admin_key="root")
    assert httpx.delete(proxy + "/sanctum/modes", timeout=10).status_code == 401
    assert httpx.delete(proxy + "/sanctum/modes", headers={"authorization": "Bearer root"},
                        timeout=10).json() == {"cleared": 0, "modes": []}
