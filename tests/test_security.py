"""Client and admin keys, a secret upstream key, CORS, and the limits: messages, tools, concurrency."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.conftest import ServerThread
from tests.fakes.upstream import Step, completion

ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
UPSTREAM_KEY = "sk-upstream-5ecret-do-not-echo"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_client_keys_guard_every_v1_path_but_not_health(make_proxy):
    proxy = make_proxy(api_keys=["k1", "k2"])
    with httpx.Client(base_url=proxy, timeout=10) as c:
        for headers in ({}, bearer("k3"), bearer("k1x"), {"authorization": "k1"}):
            r = c.post("/v1/chat/completions", json=ASK, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_api_key", headers
            assert c.get("/v1/models", headers=headers).status_code == 401
        assert c.post("/v1/chat/completions", json=ASK, headers=bearer("k2")).status_code == 200
        assert c.get("/v1/models", headers=bearer("k1")).status_code == 200
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{proxy}/v1", api_key="wrong", max_retries=0).chat.completions.create(**ASK)


def test_keys_file_is_read_and_reread_when_it_changes(make_proxy, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nalpha\n\n  beta  \n")
    proxy = make_proxy(api_keys_file=str(keys))
    ask = lambda key: httpx.post(f"{proxy}/v1/chat/completions", json=ASK, headers=bearer(key)).status_code  # noqa: E731
    assert (ask("alpha"), ask("beta"), ask("# team keys"), ask("gamma")) == (200, 200, 401, 401)
    keys.write_text("gamma\n")
    os.utime(keys, ns=(1, 10**18))  # a new mtime even where the clock is coarse
    assert (ask("alpha"), ask("gamma")) == (401, 200)


def test_admin_key_guards_sanctum_and_only_there(make_proxy):
    proxy = make_proxy(api_keys=["client"], admin_key="admin")
    with httpx.Client(base_url=proxy, timeout=10) as c:
        assert c.get("/sanctum/status").status_code == 401
        assert c.get("/sanctum/status", headers=bearer("client")).json()["error"]["code"] == "invalid_api_key"
        assert c.get("/sanctum/status", headers=bearer("admin")).status_code == 200
        assert c.post("/v1/chat/completions", json=ASK, headers=bearer("admin")).status_code == 401


def test_without_admin_key_sanctum_is_closed_to_the_client_keys(make_proxy):
    proxy = make_proxy(api_keys=["client"])
    assert httpx.get(f"{proxy}/sanctum/status").status_code == 401
    refused = httpx.get(f"{proxy}/sanctum/status", headers=bearer("client"))
    assert refused.status_code == 401 and "admin_key" in refused.json()["error"]["message"]


class KeyEchoingUpstream:
    """An upstream that rejects every key and quotes it back, as OpenAI's own 401 does."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/{path:path}", self.answer, methods=["GET", "POST"])])

    async def answer(self, request: Request) -> JSONResponse:
        given = request.headers.get("authorization", "")
        self.seen.append(given)
        error = {"message": f"Incorrect API key provided: {given}. You can find...",
                 "type": "invalid_request_error", "code": "invalid_api_key"}
        return JSONResponse({"error": error}, status_code=401)


@pytest.fixture
def echoing() -> Iterator[tuple[KeyEchoingUpstream, str]]:
    upstream = KeyEchoingUpstream()
    with ServerThread(upstream.app()) as server:
        yield upstream, server.url + "/v1"


def test_upstream_key_is_never_echoed_logged_or_shown(make_proxy, echoing, caplog):
    upstream, url = echoing
    caplog.set_level(logging.DEBUG)
    proxy = make_proxy(upstream=url, upstream_api_key=UPSTREAM_KEY, admin_key="admin")
    plain = httpx.post(f"{proxy}/v1/chat/completions", json=ASK, timeout=10)
    streamed = httpx.post(f"{proxy}/v1/chat/completions", json={**ASK, "stream": True}, timeout=10)
    passed = httpx.get(f"{proxy}/v1/models", timeout=10)
    status = httpx.get(f"{proxy}/sanctum/status", headers=bearer("admin"), timeout=10)
    assert upstream.seen == [f"Bearer {UPSTREAM_KEY}"] * 3  # it was sent, so it could have leaked
    assert plain.status_code == streamed.status_code == passed.status_code == 401
    assert "Incorrect API key provided: Bearer ***" in plain.json()["error"]["message"]
    for text in (plain.text, streamed.text, passed.text, status.text, caplog.text):
        assert UPSTREAM_KEY not in text
    assert status.json()["settings"]["upstream_api_key"] == "***"


def test_keys_of_upstreams_and_redis_password_are_masked_in_status(make_proxy, fake):
    proxy = make_proxy(redis_url="redis://user:hunter2@127.0.0.1:1/0", upstreams=[
        {"name": "a", "url": fake[1] + "/v1", "api_key": UPSTREAM_KEY}])
    text = httpx.get(f"{proxy}/sanctum/status", timeout=10).text
    assert UPSTREAM_KEY not in text and "hunter2" not in text
    assert '"api_key":"***"' in text and "redis://user:***@127.0.0.1:1/0" in text


def test_cors_is_off_by_default_and_on_for_listed_origins(make_proxy):
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization,content-type"}
    closed = make_proxy()
    r = httpx.options(f"{closed}/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in httpx.post(f"{closed}/v1/chat/completions", json=ASK,
                                                           headers={"origin": "https://app.example"}).headers
    opened = make_proxy(cors_origins=["https://app.example"])
    r = httpx.options(f"{opened}/v1/chat/completions", headers=preflight)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    r = httpx.post(f"{opened}/v1/chat/completions", json=ASK, headers={"origin": "https://app.example"})
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.options(f"{opened}/v1/chat/completions", headers={**preflight, "origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def tools(n: int) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}}
            for i in range(n)]


def test_too_many_messages_or_tools_is_400_naming_the_field(make_proxy, fake):
    proxy = make_proxy(max_messages=3, max_tools=2)
    many = [{"role": "user", "content": "hi"}] * 4
    with httpx.Client(base_url=proxy, timeout=10) as c:
        r = c.post("/v1/chat/completions", json={"model": "m", "messages": many})
        assert r.status_code == 400
        assert r.json()["error"] == {
            "message": "'messages': array too long. Expected an array with maximum length 3, but got an "
                       "array with length 4 instead.", "type": "invalid_request_error", "param": "messages",
            "code": "array_above_max_length"}
        r = c.post("/v1/chat/completions", json={**ASK, "tools": tools(3)})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "tools")
        legacy = [t["function"] for t in tools(3)]
        assert c.post("/v1/chat/completions", json={**ASK, "functions": legacy}).json()["error"]["param"] \
            == "functions"
        assert c.post("/v1/chat/completions", json={**ASK, "messages": many[:3], "tools": tools(2)}) \
            .status_code == 200
    assert len(fake[0].requests) == 1


def test_requests_over_the_concurrency_limit_get_429_with_retry_after(make_proxy, fake):
    upstream, _ = fake
    proxy = make_proxy(max_concurrent_requests=1)
    upstream.push(Step(body=completion("slow"), delay=1.0))
    first: list[httpx.Response] = []
    slow = threading.Thread(target=lambda: first.append(httpx.post(f"{proxy}/v1/chat/completions", json=ASK)))
    slow.start()
    while not upstream.requests:
        threading.Event().wait(0.01)
    r = httpx.post(f"{proxy}/v1/chat/completions", json=ASK)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "rate_limit_exceeded" and "limit 1" in r.json()["error"]["message"]
    assert httpx.get(f"{proxy}/v1/models").status_code == 429
    assert httpx.get(f"{proxy}/healthz").status_code == 200  # health and admin are not counted
    with pytest.raises(openai.RateLimitError):
        openai.OpenAI(base_url=f"{proxy}/v1", api_key="x", max_retries=0).chat.completions.create(**ASK)
    slow.join(10)
    assert first[0].status_code == 200
    assert httpx.post(f"{proxy}/v1/chat/completions", json=ASK).status_code == 200
