"""Upstream faults through the real proxy: every one ends with the contract's status (section 7) or, once the
stream has started, an in-stream `data: {"error": ...}` event, within its timeout, and leaves no task, no
busy upstream connection and no memory behind in the proxy.

The proxy runs as a real uvicorn server in a thread; after each case the test looks into that server's event
loop (task count) and into the app's httpx pool (connections in use, requests waiting).
"""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from tests.conftest import ServerThread
from tests.fakes.raw_upstream import RawUpstream, chunked, sse_head
from tests.fakes.upstream import Step, completion, content_chunks
from tests.polling import wait_until

MSG = [{"role": "user", "content": "hi"}]
CHUNK = content_chunks("hello")[1]  # one content delta, "hell"


class Proxy:
    """The proxy in a thread, with two looks inside it for the leak checks."""

    def __init__(self, **flags: Any) -> None:
        self.app = create_app(load_settings(flags))
        self.thread = ServerThread(self.app).__enter__()
        self.url = self.thread.url
        self.baseline = self.tasks()

    def _in_loop(self, probe: Any) -> Any:
        loop = self.thread.server.servers[0].get_loop()
        return asyncio.run_coroutine_threadsafe(probe(), loop).result(5)

    def tasks(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1  # not this probe

        return int(self._in_loop(count))

    def busy_connections(self) -> int:
        async def count() -> int:
            upstream = self.app.state.services.pools.default  # aiohttp keeps no public count of connections lent out
            return sum(len(s.connector._acquired) for s in (upstream._session, upstream._fresh_session)
                       if s is not None and s.connector is not None)

        return int(self._in_loop(count))

    def assert_nothing_left(self, within: float = 15.0) -> None:
        def left() -> str:
            return f"{self.tasks() - self.baseline} tasks, {self.busy_connections()} busy upstream connections"

        wait_until(lambda: self.tasks() <= self.baseline and self.busy_connections() == 0, within,
                   "nothing left behind", detail=left)

    def close(self) -> None:
        self.thread.__exit__()


@pytest.fixture
def start_proxy() -> Iterator[Any]:
    proxies: list[Proxy] = []

    def start(**flags: Any) -> Proxy:
        proxies.append(Proxy(**flags))
        return proxies[-1]

    yield start
    for p in proxies:
        p.close()


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


class Outcome:
    def __init__(self, status: int, events: list[Any], body: Any, seconds: float) -> None:
        self.status, self.events, self.body, self.seconds = status, events, body, seconds

    @property
    def error(self) -> dict[str, Any]:
        """The error the client got: the body's, or the stream's last event's (which must be the last)."""
        if self.body is not None:
            assert set(self.body["error"]) >= {"message", "type", "param", "code"}
            return dict(self.body["error"])
        last = self.events[-1] if self.events else None
        assert isinstance(last, dict) and "error" in last, self.events[-3:]
        return dict(self.events[-1]["error"])

    @property
    def content(self) -> str:
        if self.body is not None:
            return str(self.body["choices"][0]["message"]["content"])
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in self.events
                       if isinstance(e, dict) and e.get("choices"))


def ask(proxy: Proxy, stream: bool, timeout: float = 20.0, **extra: Any) -> Outcome:
    """One chat request; a streamed answer is read to its end and its `data:` events parsed."""
    body = {"model": "m", "messages": MSG, "stream": stream, **extra}
    start = time.monotonic()
    with httpx.Client(base_url=proxy.url, timeout=timeout) as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            raw = r.read()
    seconds = time.monotonic() - start
    if not r.headers.get("content-type", "").startswith("text/event-stream"):
        return Outcome(r.status_code, [], orjson.loads(raw), seconds)
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:]
                events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return Outcome(r.status_code, events, None, seconds)


def expect_error(out: Outcome, status: int, kind: str, streamed_after_headers: bool = False) -> None:
    """Before a stream's headers, the error is the HTTP status; after them, it is the stream's last event
    (and no [DONE]). `streamed_after_headers`: the headers must have gone (content was shown first)."""
    if out.body is not None:
        assert not streamed_after_headers
        assert out.status == status, out.body
    else:
        assert out.status == 200
        assert out.error["code"] == kind or out.error["type"] == kind
        assert "[DONE]" not in out.events
    assert out.error["type"] == kind, out.error


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BOTH = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


# --- the network below HTTP ---------------------------------------------------------------------------

@BOTH
def test_refused_connection_is_502_upstream_unreachable(start_proxy, stream):
    proxy = start_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1")
    out = ask(proxy, stream)
    expect_error(out, 502, "upstream_unreachable")
    assert out.seconds < 30  # no retry loop, no connect timeout waited out
    proxy.assert_nothing_left()


@BOTH
def test_reset_before_headers_is_502_upstream_unreachable(start_proxy, raw, stream):
    proxy = start_proxy(upstream=raw.url)
    raw.push([("reset",)])
    expect_error(ask(proxy, stream), 502, "upstream_unreachable")
    assert raw.requests == 2  # sent once more on a fresh connection (no answer byte came: nothing ran), then 502
    proxy.assert_nothing_left()


@BOTH
def test_close_before_headers_is_502_upstream_unreachable(start_proxy, raw, stream):
    proxy = start_proxy(upstream=raw.url)
    raw.push([("send", b"HTTP/1.1 20"), ("close",)])
    expect_error(ask(proxy, stream), 502, "upstream_unreachable")
    proxy.assert_nothing_left()


def test_reset_mid_stream_ends_the_stream_with_an_error_event(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url)
    raw.push([("send", sse_head() + chunked(b"data: " + orjson.dumps(CHUNK) + b"\n\n")), ("sleep", 0.1),
              ("reset",)])
    out = ask(proxy, True)
    expect_error(out, 502, "upstream_unreachable", streamed_after_headers=True)
    assert out.content == "hell"  # what was shown stays shown; the error says the rest is lost
    proxy.assert_nothing_left()


def test_reset_mid_body_of_a_plain_answer_is_502(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
    raw.push([("send", head + b'{"choices": [{"message": {"content": "hel'), ("sleep", 0.1), ("reset",)])
    expect_error(ask(proxy, False), 502, "upstream_unreachable")
    proxy.assert_nothing_left()


def test_stream_cut_cleanly_before_its_end_is_an_error_not_a_short_answer(start_proxy, raw):
    """A FIN where [DONE] and finish_reason should be: the client must not take half an answer for all."""
    proxy = start_proxy(upstream=raw.url)
    raw.push([("send", sse_head() + chunked(b"data: " + orjson.dumps(CHUNK) + b"\n\n") + b"0\r\n\r\n"),
              ("close",)])
    out = ask(proxy, True)
    expect_error(out, 502, "upstream_unreachable", streamed_after_headers=True)
    proxy.assert_nothing_left()


def test_upstream_dying_mid_stream_ends_the_stream_with_an_error_event(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=content_chunks("hello world"), die_after=2))
    out = ask(proxy, True)
    expect_error(out, 502, "upstream_unreachable", streamed_after_headers=True)
    proxy.assert_nothing_left()


# --- time --------------------------------------------------------------------------------------------

@BOTH
def test_stall_before_the_answer_is_504_upstream_timeout(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1", read_timeout=0.5)
    upstream.push(Step(body=completion("late"), chunks=content_chunks("late") if stream else None, delay=60))
    out = ask(proxy, stream)
    expect_error(out, 504, "upstream_timeout")
    assert out.seconds < 30  # the timeout fired, long before the stall would have ended (generous: loaded CI)
    proxy.assert_nothing_left()


def test_stall_mid_stream_ends_the_stream_with_504_event(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url, read_timeout=0.5)
    raw.push([("send", sse_head() + chunked(b"data: " + orjson.dumps(CHUNK) + b"\n\n")), ("sleep", 60)])
    out = ask(proxy, True)
    expect_error(out, 504, "upstream_timeout", streamed_after_headers=True)
    assert out.content == "hell" and out.seconds < 30
    proxy.assert_nothing_left()


def test_plain_answer_whose_body_stalls_after_the_headers_is_504(start_proxy, raw):
    """A non-streamed round has one deadline for headers and body (upstreams/chat_rounds.py `chat`)."""
    proxy = start_proxy(upstream=raw.url, read_timeout=0.5)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n"
    raw.push([("send", head + b'{"choices": [{"message": {"content": "hel'), ("sleep", 60)])
    out = ask(proxy, False)
    expect_error(out, 504, "upstream_timeout")
    assert out.seconds < 30
    proxy.assert_nothing_left()


@BOTH
def test_stream_of_keepalives_that_never_answers_is_504(start_proxy, fake, stream):
    """Comments keep the socket busy but carry nothing: the read timeout counts from the last event."""
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1", read_timeout=0.6)
    upstream.push(Step(chunks=[], endless=b": keep-alive\n\n", chunk_delay=0.05))
    out = ask(proxy, stream)
    expect_error(out, 504, "upstream_timeout")
    assert out.seconds < 30  # the stream never ends by itself
    proxy.assert_nothing_left()


@BOTH
def test_answer_that_never_ends_is_cut_at_max_answer_bytes(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1", max_answer_bytes=200_000)
    if stream:
        upstream.push(Step(chunks=content_chunks("go")[:1], endless=CHUNK))
    else:  # a JSON body that never closes
        upstream.push(Step(chunks=[b'{"choices": [{"message": {"content": "'], endless=b"a" * 1000))
    out = ask(proxy, stream)
    expect_error(out, 502, "upstream_error", streamed_after_headers=stream)
    assert "200000 bytes" in out.error["message"]
    assert out.seconds < 10
    proxy.assert_nothing_left()


@BOTH
def test_client_that_leaves_cancels_the_upstream_call(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    if stream:
        upstream.push(Step(chunks=content_chunks("go")[:2], endless=CHUNK, chunk_delay=0.02))
    else:
        opening = b'{"choices": [{"message": {"content": "'
        upstream.push(Step(chunks=[opening], endless=b"a", chunk_delay=0.05))
    body = {"model": "m", "messages": MSG, "stream": stream}
    with httpx.Client(base_url=proxy.url, timeout=5) as client:
        if stream:
            with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert next(r.iter_bytes()).startswith(b"data: ")
        else:
            with pytest.raises(httpx.ReadTimeout):
                client.post("/v1/chat/completions", json=body, timeout=0.5)
    wait_until(lambda: upstream.disconnected, 5, "the upstream call to be cancelled")
    assert upstream.disconnected == 1
    proxy.assert_nothing_left()


def test_client_that_leaves_a_passed_through_stream_closes_the_upstream_response(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=[{"choices": [{"text": "go"}]}], endless={"choices": [{"text": "on"}]},
                       chunk_delay=0.02))
    body = {"model": "m", "prompt": "count forever", "stream": True}
    with httpx.Client(base_url=proxy.url, timeout=5) as client:
        with client.stream("POST", "/v1/completions", json=body) as r:
            # Keep the iterator: a discarded one is closed at once, and httpcore closes the connection with it
            # (the client leaving early, which under load the proxy saw before the check below).
            body = r.iter_bytes()
            assert r.status_code == 200 and next(body).startswith(b"data: ")
            wait_until(lambda: proxy.busy_connections() == 1, what="the relay's connection")  # still relaying
    wait_until(lambda: upstream.disconnected == 1, what="the upstream call to be cancelled")
    proxy.assert_nothing_left()


# --- bytes that are not what they should be -----------------------------------------------------------

@BOTH
def test_garbage_instead_of_sse_is_502_upstream_error(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    garbage = b"\x00\x9f\xffgarbage <html>\r\n\r\n\x1b[0m not an event stream\n\n"
    upstream.push(Step(chunks=[garbage]) if stream else Step(body=garbage))
    out = ask(proxy, stream)
    expect_error(out, 502, "upstream_error")
    proxy.assert_nothing_left()


def test_data_event_that_is_not_json_is_502_upstream_error(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=[b"data: {truncated json\n\n"]))
    expect_error(ask(proxy, True), 502, "upstream_error")
    proxy.assert_nothing_left()


@BOTH
def test_200_with_a_non_json_body_is_502_upstream_error(start_proxy, fake, stream):
    """A plain request with an HTML 200; a streamed one answered with a JSON body instead of SSE."""
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(body=b'{"status": "ok"}' if stream else b"<html>It works!</html>"))
    out = ask(proxy, stream)
    expect_error(out, 502, "upstream_error")
    proxy.assert_nothing_left()


@BOTH
def test_invalid_utf8_is_replaced_not_fatal(start_proxy, fake, stream):
    """Bytes that are not UTF-8 (a token split inside a character) become U+FFFD, as a browser would show."""
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    bad = orjson.dumps(CHUNK).replace(b"hell", b"ok \xf0\x9f")
    if stream:
        upstream.push(Step(chunks=[b"data: " + bad + b"\n\n", content_chunks("x")[-1]]))
    else:
        upstream.push(Step(body=orjson.dumps(completion("ok XX")).replace(b"XX", b"\xf0\x9f")))
    out = ask(proxy, stream)
    assert out.status == 200 and out.content == "ok \ufffd"
    proxy.assert_nothing_left()


@BOTH
def test_upstream_error_status_keeps_status_and_message(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(status=503, body=b"<html>Service Unavailable: loading model</html>"))
    out = ask(proxy, stream)
    expect_error(out, 503, "upstream_error")
    assert "loading model" in out.error["message"]
    proxy.assert_nothing_left()


# --- size ----------------------------------------------------------------------------------------------

def traced(fn: Any) -> int:
    """Bytes still allocated (by anything in this process) after `fn` ran and garbage was collected."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    fn()
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


@BOTH
def test_sse_line_of_10_mb_is_delivered_and_freed(start_proxy, fake, stream):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    big = "x" * 10_000_000

    def once() -> None:
        step = Step(chunks=content_chunks(big, size=len(big))) if stream else Step(body=completion(big))
        upstream.push(step)
        out = ask(proxy, stream)
        assert out.status == 200 and out.content == big
        assert out.seconds < 20

    once()  # warms caches and pools; the trace writer is flushed, as it holds answers until written
    tracemalloc.start()
    try:
        left = traced(lambda: [once() for _ in range(2)] and proxy.app.state.services.recorder.flush())
    finally:
        tracemalloc.stop()
    assert left < 1_000_000, f"{left} bytes left allocated after two 10 MB answers"
    proxy.assert_nothing_left()


def test_sse_line_of_10_mb_garbage_is_502(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=[b"data: " + b"\x01" * 10_000_000 + b"\n\n"]))
    expect_error(ask(proxy, True), 502, "upstream_error")
    proxy.assert_nothing_left()


def test_sse_line_over_the_line_cap_is_502_without_buffering_it_all(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1", max_answer_bytes=1_000_000)
    upstream.push(Step(chunks=[b"data: "], endless=b"y" * 65536))
    out = ask(proxy, True)
    expect_error(out, 502, "upstream_error")
    assert out.seconds < 10
    proxy.assert_nothing_left()


def test_client_that_leaves_before_the_stream_starts_cancels_the_upstream_call(start_proxy, fake):
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=content_chunks("late"), delay=60))
    with httpx.Client(base_url=proxy.url, timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json={"model": "m", "messages": MSG, "stream": True})
    proxy.assert_nothing_left()


def test_client_gone_just_as_the_stream_starts_leaves_no_producer(start_proxy, fake):
    """The window between the first event and the first body byte: the ASGI server reports the disconnect to
    the response, which may cancel its body before the body ever ran (so no `finally` in it runs)."""
    upstream, url = fake
    proxy = start_proxy(upstream=url + "/v1")
    upstream.push(Step(chunks=content_chunks("go")[:2], endless=CHUNK, chunk_delay=0.01))
    body = orjson.dumps({"model": "m", "messages": MSG, "stream": True})
    calls = 0
    started = asyncio.Event()  # made in the proxy's loop on first use (below)

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await started.wait()  # before the headers the client is still there (a watch then may wait, or not yet)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.set()

    async def call() -> None:
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 1),
                 "client": ("127.0.0.1", 2), "headers": [(b"content-type", b"application/json")],
                 "state": {}}
        await proxy.app(scope, receive, send)

    proxy._in_loop(call)
    wait_until(lambda: upstream.disconnected, 3, "the upstream call to be cancelled")
    assert upstream.disconnected == 1
    proxy.assert_nothing_left()


# --- hostile requests ------------------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("calls", [True, 5, [{"function": 3}], [7], "x", [{"function": {"arguments": "{}"}}]])
@pytest.mark.parametrize("mode", ["prompted", "native"])
def test_malformed_calls_in_the_history_are_400_not_a_crash(start_proxy, fake, calls, mode):
    """Found by fuzzing prompted rewriting: `tool_calls: true` in an earlier assistant turn was a bare 500."""
    proxy = start_proxy(upstream=fake[1] + "/v1", spell_calling=mode, probe_capabilities=False)
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": calls}]
    out = ask(proxy, False, tools=TOOLS, messages=history)
    expect_error(out, 400, "invalid_request_error")
    assert out.error["param"] == "messages[1].tool_calls"
