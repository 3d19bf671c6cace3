"""Hostile input, round 2 (issue 32), all but the budgets: tenants kept apart, the upstream key never shown,
one error path, connection limits, and the low findings. The hostile upstream is a scripted raw HTTP server
(tests/fakes/raw_upstream.py) or the scripted fake; every test fails without its fix."""

from __future__ import annotations

import gzip
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sanctum_proxy.config import SettingsError, load_settings, redacted_url
from tests.conftest import ServerThread
from tests.fakes.raw_upstream import RawUpstream
from tests.fakes.upstream import OLLAMA_NO_TOOLS, Step, completion, content_chunks, llama_tool_chunks
from tests.polling import wait_until

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
KEY = "sk-up/5ecret-key-42"  # with a slash: JSON may write it `\/`


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def assert_openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["message"]
    return dict(error)


def assert_anthropic_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert body["type"] == "error" and body["error"]["message"], body
    return dict(body["error"])


# --- 1. tenants apart -------------------------------------------------------------------------------------

def test_a_client_key_reads_no_traces_status_or_metrics(make_proxy, fake):
    """With api_keys and no admin_key (the default), bob's key read alice's prompts in her traces."""
    open_ = make_proxy(api_keys=["alice", "bob"])
    guarded = make_proxy(api_keys=["alice", "bob"], admin_key="root")
    for proxy in (open_, guarded):
        r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "messages": [
            {"role": "user", "content": "alice's secret plan"}]}, headers=bearer("alice"), timeout=20)
        assert r.status_code == 200
        trace = r.headers["x-sanctum-trace-id"]
        for path in ("/sanctum/traces", f"/sanctum/traces/{trace}", "/sanctum/status", "/metrics"):
            for key in ("alice", "bob"):
                refused = httpx.get(proxy + path, headers=bearer(key), timeout=10)
                assert_openai_error(refused, 401)
                assert "secret plan" not in refused.text
    assert "admin_key" in httpx.get(open_ + "/sanctum/traces", headers=bearer("bob")).json()["error"]["message"]
    admin = httpx.get(f"{guarded}/sanctum/traces/{trace}", headers=bearer("root"), timeout=10)
    assert admin.status_code == 200 and "secret plan" in admin.text
    assert httpx.get(guarded + "/metrics", headers=bearer("root"), timeout=10).status_code == 200


def test_one_client_key_cannot_hold_every_concurrency_slot(make_proxy, fake):
    proxy = make_proxy(api_keys=["greedy", "polite"], max_concurrent_requests=2)  # per key: half, 1
    fake[0].push(Step(body=completion("slow"), delay=1.5))
    held = threading.Thread(target=httpx.post, args=(f"{proxy}/v1/chat/completions",),
                            kwargs={"json": ASK, "headers": bearer("greedy"), "timeout": 20})
    held.start()
    try:
        wait_until(lambda: fake[0].requests, 5, "the first request upstream", every=0.01)
        second = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, headers=bearer("greedy"), timeout=20)
        assert assert_openai_error(second, 429)["code"] == "rate_limit_exceeded"
        assert "per client key" in second.json()["error"]["message"]
        other = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, headers=bearer("polite"), timeout=20)
        assert other.status_code == 200, other.text  # the second slot stays for another client
    finally:
        held.join()


def echoing(body: dict[str, Any]) -> Step:
    """An upstream that quotes the request in its errors (a validation message that echoes a field)."""
    return Step(status=400, body={"error": {"message": f"invalid request: {json.dumps(body['messages'])}",
                                            "type": "invalid_request_error"}})


@pytest.mark.parametrize("words", [["This model does not support tools"], ["tools", "are not supported"],
                                   ['tools" are not supported']])
def test_echoed_client_text_never_flips_a_model_to_prompted_for_everyone(make_proxy, fake, words):
    proxy = make_proxy(probe_capabilities=False)
    fake[0].responder = echoing
    for _ in range(3):  # (a parse failure would need 3)
        r = httpx.post(f"{proxy}/v1/chat/completions", timeout=20, json={
            **ASK, "tools": [WEATHER], "messages": [{"role": "user", "content": w} for w in words]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "upstream_error", r.text
    fake[0].responder = None
    fake[0].requests.clear()
    other = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [WEATHER]}, timeout=20)
    assert other.headers["x-sanctum-spell-calling"] == "native" and "tools" in fake[0].requests[-1]
    assert httpx.get(proxy + "/sanctum/status", timeout=10).json()["modes"] == []


def test_the_upstreams_own_tool_refusal_still_flips_the_model(make_proxy, fake):
    """The other side of the echo rule: Ollama's own 'does not support tools' (with the model name in it)."""
    proxy = make_proxy(probe_capabilities=False)
    refused = Step(status=OLLAMA_NO_TOOLS[0], body=OLLAMA_NO_TOOLS[1])
    fake[0].push(refused)
    fake[0].checks.append(refused)  # the proxy's own check
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "model": "gemma:2b", "tools": [WEATHER]}, timeout=20)
    assert r.status_code == 200 and r.headers["x-sanctum-spell-calling"] == "prompted"
    modes = wait_until(lambda: httpx.get(proxy + "/sanctum/status", timeout=10).json()["modes"], 5, "the flip")
    assert modes[0]["mode"] == "prompted"


# --- 2. the upstream key never shown ----------------------------------------------------------------------

def escaped(key: str) -> str:
    """The key as a JSON string may hold it: every other character \\u-escaped (mixed case), `/` as `\\/`."""
    out = []
    for i, char in enumerate(key):
        if char == "/":
            out.append("\\/")
        elif i % 2:
            out.append(f"\\u{ord(char):04X}" if i % 4 == 1 else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def test_a_json_escaped_key_is_masked_after_decoding(make_proxy, fake):
    proxy = make_proxy(upstream_api_key=KEY)
    assert orjson.loads(f'"{escaped(KEY)}"') == KEY
    body = (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0, '
            b'"message": {"role": "assistant", "content": "key=' + escaped(KEY).encode() + b'"}, '
            b'"finish_reason": "stop"}]}')
    refusal = f'{{"error": {{"message": "bad key {escaped(KEY)}"}}}}'.encode()
    fake[0].push(Step(body=body), Step(status=401, body=refusal))
    answer = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20)
    error = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20)
    assert answer.json()["choices"][0]["message"]["content"] == "key=***"
    assert error.status_code == 401 and "***" in error.json()["error"]["message"]
    for r in (answer, error):
        assert KEY not in json.dumps(r.json()), r.text


def split_key_chunks() -> list[dict[str, Any]]:
    """A stream whose content carries the key cut between two events (and cut again, one character per event)."""
    cut = KEY.index("5")
    pieces = ["Your key is ", KEY[:cut], KEY[cut:] + " and ", *KEY, " again."]
    chunks = content_chunks("x", size=1)
    base = chunks[1]
    return [chunks[0], *({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                         for p in pieces), chunks[-1]]


def deltas(path: str, text: str) -> str:
    """The text a stream showed, joined across its events."""
    out = []
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = orjson.loads(line[6:])
        if path == "/v1/chat/completions":
            for choice in event.get("choices") or ():
                out.append(choice["delta"].get("content") or "")
        elif path == "/v1/responses" and event.get("type") == "response.output_text.delta":
            out.append(event["delta"])
        elif path == "/v1/messages" and event.get("type") == "content_block_delta":
            out.append(event["delta"].get("text") or "")
    return "".join(out)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {**ASK, "stream": True}),
    ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
    ("/v1/messages", {**ASK, "max_tokens": 50, "stream": True}),
])
def test_a_key_split_between_two_stream_events_is_masked_live_and_in_the_trace(make_proxy, fake, path, body):
    proxy = make_proxy(upstream_api_key=KEY)
    fake[0].push(Step(chunks=split_key_chunks()))
    r = httpx.post(proxy + path, json=body, timeout=20)
    assert r.status_code == 200, r.text
    shown = deltas(path, r.text)
    assert shown == "Your key is *** and *** again.", shown
    trace = httpx.get(f"{proxy}/sanctum/traces/{r.headers['x-sanctum-trace-id']}", timeout=10)
    assert trace.status_code == 200 and "***" in trace.text
    for text in (r.text, trace.text, json.dumps(trace.json())):
        assert KEY not in text and KEY[:KEY.index("5")] + KEY[KEY.index("5"):] not in text


def test_a_key_split_between_streamed_call_arguments_is_masked(make_proxy, fake):
    proxy = make_proxy(upstream_api_key=KEY, spell_calling="native")
    fake[0].push(Step(chunks=llama_tool_chunks("get_weather", json.dumps({"city": KEY}), size=3)))
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [WEATHER], "stream": True}, timeout=20)
    arguments = "".join(call["function"].get("arguments") or "" for line in r.text.splitlines()
                        if line.startswith("data: {") for choice in orjson.loads(line[6:]).get("choices") or ()
                        for call in choice["delta"].get("tool_calls") or ())
    assert orjson.loads(arguments) == {"city": "***"}, arguments


@pytest.mark.parametrize("form", ["plain", "escaped", "percent", "slash"])
def test_the_key_in_any_form_cut_anywhere_is_masked(form):
    """redaction.ByteStream: the body cut at every place gives the same masked bytes as the whole."""
    from sanctum_proxy.upstreams.redaction import ByteStream, KeyMask

    written = {"plain": KEY, "escaped": escaped(KEY), "percent": "".join(f"%{ord(c):02X}" for c in KEY),
               "slash": KEY.replace("/", "\\/")}[form].encode()
    body = b'{"a": "\\u003c s' + written + b' \\/ ' + written[:5] + b'", "b": "' + written + b'"}'
    mask = KeyMask(KEY)
    whole = mask.masked(body)
    assert whole.count(b"***") == 2 and written not in whole
    for cut in range(1, len(body)):
        stream = ByteStream(mask)
        assert stream.feed(body[:cut]) + stream.feed(body[cut:]) + stream.end() == whole, cut


def raw_answer(status: str, headers: list[tuple[str, str]], body: bytes = b"") -> list[tuple[Any, ...]]:
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return [("send", head.encode() + body), ("close",)]


def test_pass_through_headers_and_location_never_carry_the_key(make_proxy):
    with RawUpstream() as up:
        proxy = make_proxy(upstream=up.url, upstream_api_key=KEY)
        up.push(raw_answer("302 Found", [("location", f"http://10.0.0.7/x?k={KEY}"), ("x-echo", f"key {KEY}")]),
                raw_answer("200 OK", [("content-type", "application/json"),
                                      ("link", f"</x?k={KEY.replace('-', '%2D').replace('/', '%2f')}>")], b"{}"))
        moved = httpx.get(f"{proxy}/v1/files/a", timeout=20, follow_redirects=False)
        linked = httpx.get(f"{proxy}/v1/files/b", timeout=20)
    assert moved.status_code == 302 and moved.headers["location"] == "http://10.0.0.7/x?k=***"
    assert moved.headers["x-echo"] == "key ***" and linked.headers["link"] == "</x?k=***>"
    assert up.requests == 2  # the redirect was relayed, not followed


def test_a_gzip_pass_through_answer_is_inflated_and_masked(make_proxy):
    payload = f'{{"echo": "the key is {KEY}", "again": "{escaped(KEY)}"}}'.encode() * 50
    with RawUpstream() as up:
        proxy = make_proxy(upstream=up.url, upstream_api_key=KEY)
        # asked for identity, the hostile upstream compresses anyway
        up.push(raw_answer("200 OK", [("content-type", "application/json"), ("content-encoding", "gzip")],
                           gzip.compress(payload)),
                raw_answer("200 OK", [("content-encoding", "br")], b"\x1b\x00"))
        r = httpx.post(f"{proxy}/v1/files", content=b"{}", headers={"accept-encoding": "gzip, br"}, timeout=20)
        refused = httpx.post(f"{proxy}/v1/files", content=b"{}", timeout=20)
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.content.count(b"***") == 100 and KEY.encode() not in r.content and b"\\u" not in r.content
    assert b"accept-encoding: identity" in up.heads[0].lower()
    assert assert_openai_error(refused, 502)["code"] == "upstream_error"


class Redirecting:
    """An upstream whose every answer is a redirect: to its own /api/pull (which would run with the upstream
    key) or to an internal service (whose first bytes once reached the client inside the 502)."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    def app(self) -> Starlette:
        async def away(request: Request) -> Response:
            target = "/api/pull" if request.url.path.endswith("completions") else "/internal"
            return Response(b"INTERNAL-BODY-SECRET", 307 if target == "/api/pull" else 302,
                            headers={"location": target})

        async def reached(request: Request) -> Response:
            self.reached.append(request.url.path)
            return Response(b'{"choices": [{"message": {"content": "INTERNAL-BODY-SECRET"}}]}',
                            media_type="application/json")

        return Starlette(routes=[
            Route("/api/pull", reached, methods=["GET", "POST"]), Route("/internal", reached, methods=["GET", "POST"]),
            Route("/{path:path}", away, methods=["GET", "POST"])])


def test_redirects_are_never_followed_on_chat_stream_probe_and_health(make_proxy):
    upstream = Redirecting()
    with ServerThread(upstream.app()) as server:
        proxy = make_proxy(upstream=server.url + "/v1", upstream_api_key=KEY)
        with httpx.Client(base_url=proxy, timeout=20) as c:
            plain = c.post("/v1/chat/completions", json={**ASK, "tools": [WEATHER]})  # auto mode: probes first
            streamed = c.post("/v1/chat/completions", json={**ASK, "stream": True})
            c.get("/readyz")
    assert upstream.reached == []
    for r in (plain, streamed):
        error = assert_openai_error(r, 502)
        assert "redirect" in error["message"] and "INTERNAL" not in r.text and "/api/pull" not in r.text


def test_upstream_error_text_is_masked_and_clipped(make_proxy, fake):
    proxy = make_proxy(upstream_api_key=KEY)
    fake[0].push(Step(status=400, body={"error": {"message": f"{KEY} " + "blah " * 40_000, "code": "bad",
                                                  "nested": {"deep": [1, 2, 3], "key": KEY}, "n_ctx": 4096}}))
    r = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20)
    error = assert_openai_error(r, 400)
    assert error["message"].startswith("*** blah") and len(error["message"]) < 2100
    assert KEY not in r.text and "nested" not in error and error["n_ctx"] == 4096 and len(r.content) < 4000


def test_a_502_never_names_the_upstreams_host_and_port(make_proxy):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    proxy = make_proxy(upstream=f"http://127.0.0.1:{port}/v1", connect_timeout=2)
    for body in (ASK, {**ASK, "stream": True}):
        r = httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=20)
        assert assert_openai_error(r, 502)["code"] == "upstream_unreachable"
        assert str(port) not in r.text and "127.0.0.1" not in r.text, r.text
    passed = httpx.get(f"{proxy}/v1/files", timeout=20)
    assert passed.status_code == 502 and str(port) not in passed.text


@pytest.mark.parametrize("key", [None, KEY])
def test_url_credentials_are_sent_as_basic_auth_and_a_key_wins(make_proxy, key):
    seen: list[str] = []

    async def chat(request: Request) -> Response:
        seen.append(request.headers.get("authorization", ""))
        return Response(orjson.dumps(completion("ok")), media_type="application/json")

    with ServerThread(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as server:
        proxy = make_proxy(upstream=server.url.replace("://", "://alice:pa55@") + "/v1", upstream_api_key=key)
        r = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=20)  # was a text/plain 500 with a key
        passed = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "stream": False}, timeout=20)
    assert r.status_code == 200 and passed.status_code == 200, r.text
    assert seen[0] == (f"Bearer {key}" if key else "Basic YWxpY2U6cGE1NQ==")  # base64("alice:pa55")


# --- 3. one error path --------------------------------------------------------------------------------------

def deep_list(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


ODD: dict[str, Any] = {"list1000": deep_list(1000), "dict1000": deep_dict(1000), "list300": deep_list(300),
                       "none": None, "negative": -1, "empty": "", "typed": {"type": 1},
                       "typed_deep": {"type": "message", "content": deep_list(900)}}
RESPONSES_FIELDS = ["model", "input", "instructions", "tools", "tool_choice", "text", "reasoning", "metadata",
                    "max_output_tokens", "temperature", "top_p", "top_logprobs", "parallel_tool_calls", "store",
                    "user", "include", "truncation", "service_tier", "previous_response_id", "sanctum"]
MESSAGES_FIELDS = ["model", "messages", "system", "max_tokens", "tools", "tool_choice", "stop_sequences",
                   "temperature", "top_p", "top_k", "metadata", "thinking", "service_tier", "sanctum"]


def responses_nested(v: Any) -> list[dict[str, Any]]:
    return [{"input": [{"type": "message", "role": "user", "content": v}]},
            {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": v}]}]},
            {"input": [{"type": "function_call", "call_id": v, "name": "f", "arguments": v}]},
            {"input": [{"type": "function_call_output", "call_id": "c", "output": v}]}, {"input": [v]},
            {"tools": [{"type": "function", "name": "f", "parameters": v}]},
            {"tools": [{"type": "function", "name": v}]},
            {"text": {"format": v}}, {"text": {"format": {"type": "json_schema", "name": "x", "schema": v}}},
            {"reasoning": {"effort": v}}, {"tool_choice": {"type": "function", "name": v}}]


def messages_nested(v: Any) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": v}]},
            {"messages": [{"role": "user", "content": [{"type": "text", "text": v}]}]},
            {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": v, "name": "f", "input": v}]}]},
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": v}]}]},
            {"messages": [v]}, {"messages": [{"role": v, "content": "x"}]},
            {"tools": [{"name": "f", "input_schema": v}]}, {"tools": [{"name": v, "input_schema": {"type": "object"}}]},
            {"system": [{"type": "text", "text": v}]}, {"tool_choice": {"type": "tool", "name": v}},
            {"thinking": {"type": "enabled", "budget_tokens": v}}]


def deep_json(value: Any) -> bytes:
    """orjson will not write 1000 levels; the json module will, given the recursion room."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        return json.dumps(value).encode()
    finally:
        sys.setrecursionlimit(old)


def streaming_responder(body: dict[str, Any]) -> Step:
    return Step(chunks=content_chunks("hello there")) if body.get("stream") else Step(body=completion("hello"))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_deep_and_odd_values_in_every_field_get_the_protocols_error_shape(make_proxy, fake, path, stream):
    """Deep values were caught only after translation (13 text/plain 500s), and a streamed Responses request
    was answered 200 with zero bytes: each field gets each odd value; the answer is the protocol's JSON error
    or a real answer, never text/plain, a cut connection or an empty stream."""
    proxy = make_proxy()
    fake[0].responder = streaming_responder
    base = {"model": "m", "input": "hi"} if path == "/v1/responses" else {**ASK, "max_tokens": 10}
    fields, nested = ((RESPONSES_FIELDS, responses_nested) if path == "/v1/responses"
                      else (MESSAGES_FIELDS, messages_nested))
    cases = [(f"{f}={name}", {**base, f: v}) for f in fields for name, v in ODD.items()]
    cases += [(f"{name} in {list(change)[0]} #{i}", {**base, **change})
              for name, v in ODD.items() for i, change in enumerate(nested(v))]
    bad = []
    with httpx.Client(base_url=proxy, timeout=30) as c:
        for label, body in cases:
            try:
                r = c.post(path, content=deep_json({**body, "stream": stream}),
                           headers={"content-type": "application/json"})
            except httpx.HTTPError as exc:
                bad.append((label, repr(exc)))
                continue
            kind = r.headers.get("content-type", "")
            if r.status_code == 200 and kind.startswith("text/event-stream"):
                if not r.content or b"internal error" in r.content:
                    bad.append((label, r.status_code, r.text[:200]))
                continue
            if not kind.startswith("application/json") or r.status_code >= 500:
                bad.append((label, r.status_code, r.text[:200]))
                continue
            if r.status_code >= 400:
                body_ = r.json()
                shaped = (body_.get("type") == "error" and body_["error"].get("message") if path == "/v1/messages"
                          else body_.get("error", {}).get("message"))
                if not shaped:
                    bad.append((label, r.status_code, r.text[:200]))
        assert c.get("/healthz").status_code == 200
    assert bad == [], f"{len(bad)} of {len(cases)}: {bad[:10]}"


def test_a_bug_in_a_stream_writer_ends_the_stream_with_an_error_not_zero_bytes(make_proxy, fake, monkeypatch):
    from sanctum_proxy.protocols import responses_events

    def broken(self: Any) -> bytes:
        raise RuntimeError("a writer bug")

    monkeypatch.setattr(responses_events.ResponsesWriter, "opening", broken)
    proxy = make_proxy()
    fake[0].push(Step(chunks=content_chunks("hello")))
    r = httpx.post(f"{proxy}/v1/responses", json={"model": "m", "input": "hi", "stream": True}, timeout=20)
    assert r.status_code == 200 and r.content, r.headers  # headers were out: the error comes in the stream
    assert "event: error" in r.text and "a writer bug" in r.text and "response.failed" in r.text


@pytest.mark.parametrize(("path", "target", "body"), [
    ("/v1/chat/completions", "sanctum_proxy.routes.chat.completion", ASK),
    ("/v1/responses", "sanctum_proxy.protocols.responses_output.output_items", {"model": "m", "input": "hi"}),
    ("/v1/messages", "sanctum_proxy.protocols.messages_api.message", {**ASK, "max_tokens": 10}),
])
def test_an_unexpected_exception_is_the_protocols_500_with_the_trace_id(make_proxy, fake, monkeypatch, path,
                                                                          target, body):
    module, name = target.rsplit(".", 1)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("x" * 5000)

    monkeypatch.setattr(sys.modules[module], name, broken)
    proxy = make_proxy()
    r = httpx.post(proxy + path, json=body, timeout=20)
    error = assert_anthropic_error(r, 500) if path == "/v1/messages" else assert_openai_error(r, 500)
    assert error["message"].startswith("internal error: KeyError") and len(error["message"]) < 400
    assert len(r.headers["x-sanctum-trace-id"]) == 32


def test_unknown_paths_outside_v1_get_an_openai_shaped_404(proxy):
    r = httpx.get(proxy + "/nope", timeout=10)
    assert assert_openai_error(r, 404)["code"] == "not_found" and "detail" not in r.json()
    assert assert_openai_error(httpx.post(proxy + "/healthz", timeout=10), 405)["type"] == "invalid_request_error"


# --- 4. connection limits --------------------------------------------------------------------------------

def slow_heads(port: int, count: int) -> list[socket.socket]:
    """`count` connections that each send half a request head and go quiet (slowloris)."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: a")
        socks.append(sock)
    return socks


def healthz_latency(port: int) -> float:
    start = time.perf_counter()
    r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    assert r.status_code == 200, r.text
    return time.perf_counter() - start


@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_slow_heads_at_the_connection_limit_leave_room_for_healthz(fake, parser):
    from sanctum_proxy.app import create_app
    from sanctum_proxy.web.header_timeout import protocol

    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", "max_connections": 64})
    server = ServerThread(create_app(settings))
    server.server.config.http = protocol(parser)
    server.server.config.limit_concurrency = settings.max_connections
    with server:
        socks = slow_heads(server.port, 300)
        try:
            latency = healthz_latency(server.port)  # a 503 (limit reached) before the fix
            closed = sum(1 for s in socks[:200] if _closed(s))
        finally:
            for sock in socks:
                sock.close()
    assert latency < 0.5, latency
    assert closed >= 150  # the oldest slow heads made room


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_the_head_deadline_holds_with_either_parser(fake, parser):
    from sanctum_proxy.app import create_app
    from sanctum_proxy.cli import http_protocol
    from sanctum_proxy.web.header_timeout import protocol

    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", "header_read_timeout": 0.3})
    http_protocol(settings)  # the deadline from the settings
    server = ServerThread(create_app(settings))
    server.server.config.http = protocol(parser)
    with server:
        assert healthz_latency(server.port) < 5
        slow = slow_heads(server.port, 1)[0]
        try:
            start = time.perf_counter()
            assert slow.recv(1024) == b""  # closed by the proxy (h11 used to wait for ever)
            assert time.perf_counter() - start < 3
        finally:
            slow.close()
        with httpx.Client(base_url=server.url, timeout=5) as c:  # a kept-alive connection is not cut
            assert [c.get("/healthz").status_code for _ in range(2)] == [200, 200]
            time.sleep(0.5)
            assert c.get("/healthz").status_code == 200


@pytest.fixture
def cli_proxy(fake: Any) -> Iterator[int]:
    """The CLI in a process whose open-file limit is 256 (as a container's may be 1,024)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "SANCTUM_TRACES_PATH": ":memory:", "SANCTUM_HEADER_READ_TIMEOUT": "60",
           "SANCTUM_LOG_LEVEL": "error"}
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # noqa: E731
    process = subprocess.Popen([sys.executable, "-m", "sanctum_proxy", "--upstream", fake[1] + "/v1", "--port",
                                str(port)], env=env, preexec_fn=limit, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code, 20,
                   "the proxy to listen", every=0.1, ignoring=(httpx.HTTPError,))
        yield port
    finally:
        process.terminate()
        process.wait(10)


def test_slow_heads_past_the_open_file_limit_do_not_take_healthz_down(cli_proxy):
    socks = slow_heads(cli_proxy, 300)  # more than the process has file descriptors
    try:
        latencies = [healthz_latency(cli_proxy) for _ in range(3)]
    finally:
        for sock in socks:
            sock.close()
    assert max(latencies) < 0.5, latencies


# --- 5. low ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "shown"), [
    ("http://alice:pa55w0rd@h:1/v1", "http://***@h:1/v1"),
    ("http://h/v1?api_key=pa55w0rd", "http://h/v1?***"),
    ("http://h/v1#pa55w0rd", "http://h/v1#***"),
    ("htp:/alice:pa55w0rd@h/v1", "***@h/v1"),
    ("http://alice:pa/55w0rd@h/v1", "http://***@h/v1"),
    ("http://alice:p@55w0rd@h/v1", "http://***@h/v1"),
])
def test_url_passwords_are_never_shown_even_in_malformed_urls(url, shown):
    assert redacted_url(url) == shown


@pytest.mark.parametrize("flags", [{"upstream": "htp:/alice:pa55w0rd@h/v1"},
                                   {"upstream": "http//alice:pa55w0rd@h/v1"},
                                   {"upstreams": [{"name": "a", "urls": ["ftp://alice:pa55w0rd@h/v1"]}]}])
def test_the_settings_error_never_shows_a_url_password(flags, capsys):
    from sanctum_proxy import cli

    with pytest.raises(SettingsError) as caught:
        load_settings(flags)
    assert "pa55w0rd" not in str(caught.value) and "alice" not in str(caught.value)
    if "upstream" in flags:
        assert cli.main(["--upstream", flags["upstream"]]) == 2
        assert "pa55w0rd" not in capsys.readouterr().err


def test_a_tool_name_with_a_trailing_newline_is_refused(proxy, fake):
    bad = {"type": "function", "function": {"name": "get_weather\n", "parameters": {"type": "object"}}}
    r = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "tools": [bad]}, timeout=10)
    assert assert_openai_error(r, 400)["param"] == "tools" and fake[0].requests == []


def test_pass_through_answers_are_sandboxed_on_the_proxys_origin(make_proxy):
    page = b"<html><script>fetch('/sanctum/traces')</script></html>"
    with RawUpstream() as up:
        proxy = make_proxy(upstream=up.url)
        up.push(raw_answer("200 OK", [("content-type", "text/html"),
                                      ("content-security-policy", "script-src *")], page))
        r = httpx.get(f"{proxy}/v1/ui", timeout=20)
    assert r.status_code == 200 and r.content == page
    assert "sandbox" in r.headers["content-security-policy"] and r.headers["x-content-type-options"] == "nosniff"
    assert "script-src *" not in r.headers["content-security-policy"]
