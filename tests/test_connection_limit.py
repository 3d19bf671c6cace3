"""The connection limit `max_connections` (web/connection_limit.py): past it a request gets the protocol's own
JSON error, 503 with Retry-After, never uvicorn's plain-text `503 Service Unavailable`; /healthz still answers;
a stream holds its place until it ends. Real servers on loopback, the upstream a slow scripted fake."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.cli import http_protocol
from sanctum_proxy.config import load_settings
from sanctum_proxy.web.header_timeout import protocol
from tests.conftest import ServerThread
from tests.fakes.upstream import Step, completion, content_chunks
from tests.polling import wait_until

LIMIT = 8  # the smallest max_connections the settings take
ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
TICK = content_chunks(" .")[1]  # one more content piece, sent for as long as the client reads


def held_step() -> Step:
    """A stream that has begun and goes on until its client leaves (a long answer from a slow model)."""
    return Step(chunks=content_chunks("held")[:-1], chunk_delay=0.05, endless=TICK)


@contextlib.contextmanager
def held_streams(proxy: str, fake: Any, count: int) -> Iterator[None]:
    """`count` streamed chat requests in flight, each on its own connection, until the block ends."""
    fake.push(*(held_step() for _ in range(count)))
    readers = []  # kept: a reader let go closes its stream
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            client = stack.enter_context(httpx.Client(base_url=proxy, timeout=20))
            r = stack.enter_context(client.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True}))
            assert r.status_code == 200
            readers.append(r.iter_bytes())
            next(readers[-1])  # the stream is under way
        yield


def refused(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"


def check_the_limit(proxy: str, fake: Any) -> None:
    with held_streams(proxy, fake, LIMIT):
        r = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20)
        refused(r)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert error["type"] == "server_error" and error["code"] == "server_overloaded"
        assert f"limit {LIMIT}" in error["message"] and "max_connections" in error["message"]
        r = httpx.post(proxy + "/v1/messages", json=MESSAGES, timeout=20)
        refused(r)
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "api_error", body
        assert "max_connections" in body["error"]["message"]
        refused(httpx.get(proxy + "/sanctum/status", timeout=20))
        assert httpx.get(proxy + "/healthz", timeout=20).status_code == 200  # always answered
        assert httpx.get(proxy + "/metrics", timeout=20).status_code == 200
        with openai.OpenAI(base_url=proxy + "/v1", api_key="k", max_retries=0) as sdk:
            with pytest.raises(openai.InternalServerError) as caught:
                sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 503 and caught.value.code == "server_overloaded"
        assert len(fake.requests) == LIMIT  # nothing refused went upstream
    # the streams ended (their clients left): their places come back
    fake.push(Step(body=completion("back")))
    wait_until(lambda: httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20).status_code == 200,
               10, "a place to free up", every=0.05)


def test_past_the_limit_a_request_gets_the_protocols_json_error(make_proxy, fake):
    check_the_limit(make_proxy(max_connections=LIMIT), fake[0])


@pytest.mark.parametrize("parser", ["h11", "httptools"])
def test_uvicorns_plain_text_503_is_replaced_with_either_parser(fake, parser):
    """Served as the CLI serves it (uvicorn's limit_concurrency set, the head-deadline protocols): uvicorn
    answered `Service Unavailable` in text/plain here, and shut out /healthz too."""
    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", "max_connections": LIMIT})
    options = http_protocol(settings)
    assert options["limit_concurrency"] == LIMIT
    server = ServerThread(create_app(settings))
    server.server.config.http = protocol(parser)
    server.server.config.limit_concurrency = options["limit_concurrency"]
    with server:
        check_the_limit(server.url, fake[0])


def test_requests_under_the_limit_are_not_refused(make_proxy, fake):
    proxy = make_proxy(max_connections=LIMIT)
    with held_streams(proxy, fake[0], LIMIT - 1):
        fake[0].push(Step(body=completion("room")))
        r = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=20)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "room"
