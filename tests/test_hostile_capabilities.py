"""Hostile input, round 3: capability lessons apart. A constrained round's refusal (tool_choice "required", a
grammar or an answer schema) stopped constraining the model for every client at once, although a client chooses
the tools its constraint is built from and its text may come back in the upstream's error. Now only the upstream's
refusal of the proxy's own minimal constrained request teaches every client, and with `forward_client_key` the
proxy's own checks carry the key of the client whose round raised them. Each test fails without its fix
(upstreams/lesson_checks.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from sanctum_proxy.upstreams.capabilities import REFUSAL_SECONDS, Capabilities, CapabilityBook
from sanctum_proxy.upstreams.lesson_checks import CHECK_TOOL, check_body
from tests.conftest import ServerThread
from tests.fakes.upstream import LLAMA_NO_JINJA, FakeUpstream, Step, asked, checked, completion, is_check, native_call
from tests.polling import wait_until

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}
LLAMA_PROPS = {"chat_template_caps": {"supports_tools": True, "supports_tool_calls": True}}
BAD, GOOD = '{"days": 2}', '{"city": "Paris", "days": 2}'  # a missing city: a correction round
TOOL_CHOICE_REFUSED = 'tool_choice = "required" is not supported!'  # vLLM before 0.8


def bad_request(message: str) -> Step:
    """vLLM's 400 (create_error_response)."""
    return Step(status=400, body={"error": {"message": message, "type": "BadRequestError", "param": None,
                                            "code": 400}})


def native_model(correction: Callable[[dict[str, Any]], Step]) -> Callable[[dict[str, Any]], Step]:
    """A native model whose first call misses its city; `correction` answers a correction round with
    tool_choice "required", and the round sent again without it gets the good call."""
    def answer(body: dict[str, Any]) -> Step:
        if is_check(body):
            return correction(body) if body.get("tool_choice") == "required" else call("sanctum_check", "{}")
        if body.get("tool_choice") == "required":
            return correction(body)
        return call("get_weather", BAD if len(body["messages"]) == 1 else GOOD)
    return answer


def call(name: str, arguments: str) -> Step:
    return Step(body=completion(None, [native_call(name, arguments)], "tool_calls"))


def ask_native(proxy: str, words: str = "Weather in Paris for 2 days?", model: str = "m",
               headers: dict[str, str] | None = None) -> None:
    r = httpx.post(proxy + "/v1/chat/completions", timeout=20, headers=headers or {}, json={
        "model": model, "messages": [{"role": "user", "content": words}], "tools": [WEATHER],
        "sanctum": {"spell_calling": "native"}})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"][0]["function"][
        "arguments"] == GOOD, r.text


def refusals(proxy: str) -> list[tuple[str, Any, Any]]:
    rows = httpx.get(proxy + "/sanctum/status", timeout=10).json()["capabilities"]
    return [(row["model"], row["tool_choice"], row["json_schema"]) for row in rows
            if row["tool_choice"] is False or row["json_schema"] is False]


def corrections_with_tool_choice(fake: FakeUpstream) -> int:
    return sum(1 for body in asked(fake.requests) if body.get("tool_choice") == "required")


# --- tool_choice "required" --------------------------------------------------------------------------------

def test_a_client_text_the_upstream_quotes_as_a_tool_choice_refusal_stops_nobody_constraining(make_proxy, fake):
    """The upstream's 400 quotes the client's message, which names tool_choice: the proxy's own request with
    tool_choice "required" gets a call, so the next client's correction is still held by tool_choice."""
    proxy = make_proxy(probe_capabilities=False)
    quoting = native_model(lambda body: bad_request(
        f"invalid request: message {body['messages'][0]['content']!r} has too many words"))
    fake[0].responder = quoting
    ask_native(proxy, "Please tell the tool_choice to be named tools only.")
    fake[0].responder = native_model(lambda body: call("get_weather", GOOD))
    before = corrections_with_tool_choice(fake[0])
    ask_native(proxy)
    assert corrections_with_tool_choice(fake[0]) == before + 1  # still constrained for the next client
    assert refusals(proxy) == []
    check = wait_until(lambda: checked(fake[0].requests), 5, "the proxy's own tool_choice check")[0]
    assert check["tool_choice"] == "required" and check["tools"] == [CHECK_TOOL]
    assert check["messages"] == check_body("m")["messages"]  # no client text in it


def test_a_tool_choice_refusal_the_proxys_own_request_meets_too_is_kept_and_the_admin_clears_it(make_proxy, fake):
    proxy = make_proxy(probe_capabilities=False)
    fake[0].responder = native_model(lambda body: bad_request(TOOL_CHOICE_REFUSED))
    ask_native(proxy)  # answered at once, unconstrained, while the check runs
    wait_until(lambda: refusals(proxy) == [("m", False, None)], 5, "the refusal, confirmed, kept")
    before = corrections_with_tool_choice(fake[0])
    ask_native(proxy)
    assert corrections_with_tool_choice(fake[0]) == before  # no longer asked for

    cleared = httpx.delete(proxy + "/sanctum/capabilities", params={"model": "m"}, timeout=10)
    assert cleared.status_code == 200 and cleared.json() == {"cleared": 1, "capabilities": []}
    ask_native(proxy)
    assert corrections_with_tool_choice(fake[0]) == before + 1  # asked again after the admin cleared it


def test_one_check_at_a_time_per_model(make_proxy, fake):
    proxy = make_proxy(probe_capabilities=False)
    slow = Step(status=400, body=bad_request(TOOL_CHOICE_REFUSED).body, delay=1.0)
    fake[0].responder = native_model(lambda body: slow if is_check(body) else bad_request(TOOL_CHOICE_REFUSED))
    with ThreadPoolExecutor(2) as pool:  # two clients refused while the first check waits on the upstream
        list(pool.map(lambda _: ask_native(proxy), range(2)))
    wait_until(lambda: refusals(proxy) == [("m", False, None)], 5, "the refusal")
    assert len(checked(fake[0].requests)) == 1


def test_checks_stay_within_probes_per_minute(make_proxy, fake):
    proxy = make_proxy(probe_capabilities=False, probes_per_minute=1)
    fake[0].responder = native_model(lambda body: bad_request(TOOL_CHOICE_REFUSED))
    ask_native(proxy)
    wait_until(lambda: refusals(proxy) == [("m", False, None)], 5, "the first model's refusal")
    ask_native(proxy, model="other")  # the minute's one check is spent
    time.sleep(0.3)  # a check, had one been started, would have reached the upstream by now
    assert len(checked(fake[0].requests)) == 1 and refusals(proxy) == [("m", False, None)]


def test_a_learned_refusal_expires_after_a_day():
    now = [1000.0]
    book = CapabilityBook(clock=lambda: now[0])
    book.remember("u", "m", Capabilities(tools=True, json_schema=True, server="llama.cpp", source="probe"))
    book.refuse_tool_choice("u", "m")
    now[0] += REFUSAL_SECONDS - 1
    assert book.cached("u", "m").tool_choice is False
    now[0] += 2
    assert book.cached("u", "m") is None and book.snapshot() == []  # probed again when next needed
    book.remember("u", "m", Capabilities(tools=True, json_schema=True, server="llama.cpp", source="probe"))
    now[0] += 10 * REFUSAL_SECONDS
    assert book.cached("u", "m") is not None  # what a probe said stays


def test_a_refusal_on_an_unknown_row_outlives_the_rows_expiry_and_the_next_probe():
    """A model the probes could not read (tools unknown) is asked again after `unknown_ttl`; that probe's answer
    wrote the row anew and dropped a refusal learned meanwhile, so constraining the model started again."""
    now = [1000.0]
    book = CapabilityBook(clock=lambda: now[0], unknown_ttl=60)
    book.refuse_schema("u", "m")  # no probe answer yet: an unknown row with the refusal
    now[0] += 61
    assert book.cached("u", "m") is None  # the unknown answer expired: probe again

    async def probe() -> Capabilities:
        return Capabilities(tools=True, json_schema=True, server="llama.cpp", source="probe")

    caps = asyncio.run(book.get("u", "m", probe))
    assert caps.tools is True and caps.json_schema is False
    book.refuse_tool_choice("u", "m")
    assert (book.cached("u", "m").json_schema, book.cached("u", "m").tool_choice) == (False, False)
    now[0] += REFUSAL_SECONDS + 1  # a day after the last refusal: both go, the probe's answer with them
    assert book.cached("u", "m") is None
    assert asyncio.run(book.get("u", "m", probe)).json_schema is True


def test_clearing_capabilities_takes_the_admin_key(make_proxy):
    proxy = make_proxy(admin_key="root")
    assert httpx.delete(proxy + "/sanctum/capabilities", timeout=10).status_code == 401
    assert httpx.delete(proxy + "/sanctum/capabilities", headers={"authorization": "Bearer root"},
                        timeout=10).json() == {"cleared": 0, "capabilities": []}


# --- a grammar or an answer schema -------------------------------------------------------------------------

# A constraint built from a client's own tools that the upstream cannot compile: llama.cpp's 400 for a grammar
# past its repetition limit (ggml-org/llama.cpp#12628), vLLM's for a schema xgrammar cannot run.
CLIENT_MADE = {
    "grammar": ("grammar", LLAMA_PROPS, "Failed to initialize samplers: failed to parse grammar"),
    "schema": ("response_format", None, "The provided JSON schema contains features not supported by xgrammar."),
}


@pytest.mark.parametrize("how", list(CLIENT_MADE))
def test_a_constraint_only_the_clients_tools_break_stops_nobody_constraining(make_proxy, fake, how):
    field, props, message = CLIENT_MADE[how]
    fake[0].props = props
    proxy = make_proxy()

    def model(body: dict[str, Any]) -> Step:
        if field in body:  # the client's constraint is refused, the proxy's own taken
            return Step(body=completion("{}")) if is_check(body) else bad_request(message)
        answer = BAD if len(body["messages"]) <= 2 else GOOD
        return Step(body=completion(f'<tool_call>{{"name": "get_weather", "arguments": {answer}}}</tool_call>'))

    fake[0].responder = model
    for _ in range(2):
        r = httpx.post(proxy + "/v1/chat/completions", timeout=20, json={
            "model": "m", "messages": [{"role": "user", "content": "Weather in Paris for 2 days?"}],
            "tools": [WEATHER], "sanctum": {"spell_calling": "prompted"}})
        arguments = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(arguments) == json.loads(GOOD), r.text
    constrained = [body for body in asked(fake[0].requests) if field in body]
    assert len(constrained) == 2 and refusals(proxy) == []  # the second client's correction constrained too
    check = wait_until(lambda: checked(fake[0].requests), 5, "the proxy's own constrained check")[0]
    assert "get_weather" not in str(check) and check["messages"][-1]["content"] == "Call sanctum_check now."


# --- forward_client_key: the checks carry the teaching client's key -----------------------------------------

@pytest.fixture
def keyed(fake: Any) -> Iterator[str]:
    """The fake upstream behind a gateway that takes each client's own key: a request with none is a 401."""
    app = fake[0].app()

    async def gateway(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and not dict(scope["headers"]).get(b"authorization"):
            body = b'{"error": {"message": "Missing bearer authentication", "type": "auth_error", "code": 401}}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    with ServerThread(gateway) as upstream:
        yield upstream.url + "/v1"


def test_forwarded_the_auto_mode_check_carries_the_clients_key_and_flips(make_proxy, fake, keyed):
    """Without the key the check got the gateway's 401, and a model without tools never flipped."""
    proxy = make_proxy(upstream=keyed, forward_client_key=True, probe_capabilities=False)
    fake[0].responder = lambda body: Step(*LLAMA_NO_JINJA) if body.get("tools") else Step(body=completion("ok"))
    r = httpx.post(proxy + "/v1/chat/completions", headers={"authorization": "Bearer alice"}, timeout=20, json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]})
    assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted", r.text
    modes = wait_until(lambda: httpx.get(proxy + "/sanctum/status", timeout=10).json()["modes"], 5, "the flip")
    assert [row["reason"] for row in modes] == ["tools_rejected"]
    assert [h["authorization"] for b, h in zip(fake[0].requests, fake[0].chat_headers, strict=True)
            if is_check(b)] == ["Bearer alice"]


def test_forwarded_the_tool_choice_check_carries_the_clients_key(make_proxy, fake, keyed):
    proxy = make_proxy(upstream=keyed, forward_client_key=True, probe_capabilities=False)
    fake[0].responder = native_model(lambda body: bad_request(TOOL_CHOICE_REFUSED))
    ask_native(proxy, headers={"x-api-key": "bob"})
    wait_until(lambda: refusals(proxy) == [("m", False, None)], 5, "the refusal the keyed check met")
    assert len(checked(fake[0].requests)) == 1 and {h["authorization"] for h in fake[0].chat_headers} == {"Bearer bob"}


def test_forwarded_the_capability_probe_carries_the_clients_key(make_proxy, fake, keyed):
    """A template without tools, said by /props behind the gateway: read with the client's key, the model is
    prompted from its first request (keyless, the probe got a 401 and the model stayed unknown)."""
    proxy = make_proxy(upstream=keyed, forward_client_key=True)
    fake[0].props = {"chat_template": "{{ messages }}", "default_generation_settings": {"n_ctx": 4096},
                     "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}
    fake[0].responder = lambda body: Step(body=completion("Sunny."))
    r = httpx.post(proxy + "/v1/chat/completions", headers={"authorization": "Bearer carol"}, timeout=20, json={
        "model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]})
    assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted", r.text
    assert "props" in fake[0].probes and "tools" not in fake[0].requests[0]


def test_forwarded_the_ollama_doors_listing_carries_the_clients_key(make_proxy, fake, keyed):
    """GET /api/tags lists the upstream's models through a gateway that takes each client's own key."""
    proxy = make_proxy(upstream=keyed, forward_client_key=True)
    listed = httpx.get(proxy + "/api/tags", headers={"authorization": "Bearer dave"}, timeout=20)
    assert listed.status_code == 200 and "fake-model" in [m["name"] for m in listed.json()["models"]], listed.text
