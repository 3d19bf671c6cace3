"""Hostile input, round 3: every connection has a deadline in every state (head, body, idle, answer written) and
its request head a size bound, with either HTTP parser. Each test fails without its fix."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from sanctum_proxy.config import load_settings
from tests.conftest import ServerThread

PARSERS = ["h11", "httptools"]


def serve(fake: Any, parser: str, **flags: Any) -> ServerThread:
    """The proxy with `parser` and the protocol deadlines from `flags`, as the CLI sets them."""
    from sanctum_proxy.app import create_app
    from sanctum_proxy.cli import http_protocol
    from sanctum_proxy.web.header_timeout import protocol

    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", **flags})
    http_protocol(settings)
    server = ServerThread(create_app(settings))
    server.server.config.http = protocol(parser)
    server.server.config.timeout_keep_alive = 1
    return server


@pytest.fixture(params=PARSERS)
def quick(request: Any, fake: Any) -> Iterator[ServerThread]:
    """A proxy whose head and body deadlines are half a second."""
    with serve(fake, request.param, header_read_timeout=0.5, body_read_timeout=0.5) as server:
        yield server


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_answer(sock: socket.socket) -> bytes:
    """One answer with a content-length: its head and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"closed before an answer: {data[:200]!r}"
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
        b"content-length")))
    while len(body) < length:
        piece = sock.recv(65536)
        assert piece, "closed inside an answer"
        body += piece
    return head


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the proxy closed `sock` (None: still open after `seconds`); what it sent is skipped."""
    start = time.perf_counter()
    sock.settimeout(0.2)
    while time.perf_counter() - start < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.perf_counter() - start
        except TimeoutError:
            continue
        except OSError:
            return time.perf_counter() - start
    return None


def healthz_latency(port: int) -> float:
    start = time.perf_counter()
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    return time.perf_counter() - start


HEALTHZ_WITH_BODY = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000000\r\n\r\n"


def test_one_unread_body_byte_after_the_answer_does_not_hold_the_connection(quick):
    """The answer is read, then one byte of the declared body is sent: that cancelled uvicorn's keep-alive timer
    and nothing bounded the connection again (httptools)."""
    socks = [connect(quick.port) for _ in range(20)]
    for sock in socks:
        sock.sendall(HEALTHZ_WITH_BODY)
        assert read_answer(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"x")
    end = time.perf_counter() + 5
    waited = [closed_within(sock, max(0.2, end - time.perf_counter())) for sock in socks]
    for sock in socks:
        sock.close()
    assert all(w is not None for w in waited), waited


def test_a_body_trickled_after_the_answer_is_cut_at_the_body_deadline(quick):
    sock = connect(quick.port)
    sock.sendall(HEALTHZ_WITH_BODY)
    read_answer(sock)
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < 6:
            sock.sendall(b"x")
            if closed_within(sock, 0.1) is not None:
                break
    except OSError:
        pass
    sock.close()
    assert time.perf_counter() - start < 4


def test_blank_lines_between_requests_do_not_hold_an_idle_connection(quick):
    sock = connect(quick.port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    read_answer(sock)
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < 6:
            sock.sendall(b"\r\n")
            if closed_within(sock, 0.1) is not None:
                break
    except OSError:
        pass
    sock.close()
    assert time.perf_counter() - start < 4


def test_a_kept_alive_connection_still_serves_requests_in_turn(quick):
    with httpx.Client(base_url=quick.url, timeout=5) as client:
        for _ in range(3):
            assert client.get("/healthz").status_code == 200
            time.sleep(0.3)
        r = client.post("/v1/chat/completions", content=b"{}", headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text


@pytest.mark.parametrize("parser", PARSERS)
def test_a_64_mb_request_head_is_refused_at_its_bound_without_blocking(fake, parser):
    """httptools had no bound on a head: a 64 MB header cost seconds of CPU (its value grows by concatenation)."""
    with serve(fake, parser, header_read_timeout=30) as server:
        sock = connect(server.port)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ")
        start = time.perf_counter()
        sent, latency, answer = 0, 0.0, b""
        try:
            while sent < 64 * 1024 * 1024:
                sock.sendall(b"a" * 65536)
                sent += 65536
                if sent % (4 * 1024 * 1024) == 0:
                    latency = max(latency, healthz_latency(server.port))
        except OSError:
            pass
        sock.settimeout(5)
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
        sock.close()
        elapsed = time.perf_counter() - start
    assert sent < 16 * 1024 * 1024, sent  # cut near its bound (and the kernel buffers), not read whole
    assert answer.startswith(b"HTTP/1.1 431") or answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert elapsed < 5 and latency < 0.5, (elapsed, latency)


@pytest.mark.parametrize("parser", PARSERS)
def test_an_answer_nobody_reads_is_dropped_at_the_write_deadline(fake, parser):
    """A client that reads nothing of a large answer held its connection (and its request) for ever."""
    body = b"a" * (7 * 1024 * 1024)
    with serve(fake, parser, answer_write_timeout=1) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/big HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % len(body) + body)
        time.sleep(4)
        sock.settimeout(10)
        got = 0
        try:
            while chunk := sock.recv(1 << 20):
                got += len(chunk)
        except OSError:
            pass
        sock.close()
    assert got < len(body), got  # cut before the whole answer was written


@pytest.mark.parametrize("parser", PARSERS)
def test_slow_bodies_past_max_connections_leave_room_for_other_clients(fake, parser):
    """Bodies trickled by one client held `max_connections` for everyone (no key to share by)."""
    from tests.fakes.upstream import Step, completion

    with serve(fake, parser, max_connections=8, body_read_timeout=60) as server:
        server.server.config.limit_concurrency = 8
        slow = []
        for _ in range(30):
            sock = connect(server.port)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json"
                         b"\r\ncontent-length: 1000\r\n\r\n{")
            slow.append(sock)
        try:
            fake[0].push(Step(body=completion("hello")))
            latency = healthz_latency(server.port)
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:  # another client
                r = other.post(server.url + "/v1/chat/completions", timeout=10,
                               json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        finally:
            for sock in slow:
                sock.close()
    assert r.status_code == 200, r.text  # a 503 (every connection slot held) before
    assert latency < 0.5, latency


@pytest.mark.parametrize("parser", PARSERS)
def test_a_client_that_pipelined_a_second_request_and_left_still_cancels_the_upstream_call(fake, parser):
    """A pipelined request paused reading, so the client's leaving went unseen and the upstream call ran on."""
    import orjson

    from tests.fakes.upstream import Step
    from tests.polling import wait_until

    fake[0].push(Step(chunks=[b'{"choices": [{"message": {"content": "'], endless=b"a", chunk_delay=0.05))
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    with serve(fake, parser) as server:
        sock = connect(server.port)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body)
                     + b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        wait_until(lambda: fake[0].requests, 5, "the upstream call")
        time.sleep(0.3)
        sock.close()
        wait_until(lambda: fake[0].disconnected, 5, "the upstream call to be cancelled")


def test_pipelined_requests_are_still_answered_in_order(quick):
    sock = connect(quick.port)
    sock.sendall(b"".join(b"GET /%s HTTP/1.1\r\nhost: 127.0.0.1\r\n%s\r\n" % (p, c) for p, c in (
        (b"healthz", b""), (b"nope", b""), (b"healthz", b"connection: close\r\n"))))
    data = b""
    while piece := sock.recv(65536):
        data += piece
    sock.close()
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"404", b"200"], data


SLOW_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
             b"content-length: %d\r\n%s\r\n")
ASK_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def slow_body(port: int, source: str = "127.0.0.1", key: bytes = b"") -> socket.socket:
    """A connection from `source` whose request body has begun and stops after its first byte."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    auth = b"authorization: Bearer %s\r\n" % key if key else b""
    sock.sendall(SLOW_HEAD % (len(ASK_BODY), auth) + ASK_BODY[:1])
    return sock


def statuses(socks: list[socket.socket]) -> list[int]:
    """The status each connection was answered with (0: none within a second, or closed without one)."""
    found = []
    for sock in socks:
        sock.settimeout(1)
        try:
            head = sock.recv(65536)
        except (TimeoutError, OSError):
            head = b""
        match = re.match(rb"HTTP/1\.1 (\d{3})", head)
        found.append(int(match.group(1)) if match else 0)
    return found


@pytest.mark.parametrize(("parser", "by"), [("h11", "key"), ("httptools", "key"), ("httptools", "address")])
def test_one_clients_slow_bodies_take_only_its_share_and_never_another_clients_upload(fake, parser, by):
    """Another client's slow upload, begun first, was the connection closed to make room for the flood."""
    from tests.fakes.upstream import Step, completion

    flags = {"api_keys": ["greedy", "polite"]} if by == "key" else {}
    polite: dict[str, Any] = {"key": b"polite"} if by == "key" else {"source": "127.0.0.2"}
    greedy: dict[str, Any] = {"key": b"greedy"} if by == "key" else {"source": "127.0.0.3"}
    with serve(fake, parser, max_connections=8, body_read_timeout=60, **flags) as server:
        server.server.config.limit_concurrency = 8
        upload = slow_body(server.port, **polite)
        time.sleep(0.2)
        flood = []
        for _ in range(30):
            flood.append(slow_body(server.port, **greedy))
            time.sleep(0.01)
        try:
            latency = healthz_latency(server.port)
            fake[0].push(Step(body=completion("hello")), Step(body=completion("again")))
            upload.sendall(ASK_BODY[1:])
            upload.settimeout(10)
            answered = read_answer(upload)
            refused = statuses(flood)
            other = httpx.post(server.url + "/v1/chat/completions", content=ASK_BODY, timeout=10, headers={
                "content-type": "application/json", **({"authorization": "Bearer polite"} if by == "key" else {})})
        finally:
            upload.close()
            for sock in flood:
                sock.close()
    assert answered.startswith(b"HTTP/1.1 200"), answered  # the upload begun first was closed before
    assert other.status_code == 200, other.text
    assert refused.count(503) >= 20, refused  # past its share (2 of 8) at once, in the protocol's shape
    assert latency < 0.5, latency


@pytest.mark.parametrize("parser", PARSERS)
def test_local_agents_uploading_at_once_from_one_address_all_get_answers(fake, parser):
    """With no keys every local agent is one client (127.0.0.1): past its share of bodies arriving at once (2 of
    8 connections) the others were refused, although each body took only a fifth of a second."""
    from tests.fakes.upstream import Step, completion

    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 200_000}]})
    fake[0].responder = lambda _: Step(body=completion("hello"))
    with serve(fake, parser, max_connections=8) as server:
        agents = [connect(server.port) for _ in range(4)]
        for sock in agents:
            sock.sendall(asked(body)[:-1000])
        time.sleep(0.2)
        heads = [answer_to_rest(sock, asked(body)[-1000:]) for sock in agents]
        for sock in agents:
            sock.close()
    assert heads == [b"HTTP/1.1 200"] * 4, heads


def answer_to_rest(sock: socket.socket, rest: bytes) -> bytes:
    """The status line answering a request once `rest` of it is sent (the error, if refused and reset)."""
    try:
        sock.sendall(rest)
        return read_answer(sock)[:12]
    except OSError as error:
        return repr(error).encode()


def endless_answer() -> Any:
    from tests.fakes.upstream import Step

    return Step(chunks=[b'{"choices": [{"message": {"content": "'], endless=b"a", chunk_delay=0.05)


def asked(body: bytes) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("queued", [8, 64])
def test_a_client_that_pipelined_many_requests_in_pieces_and_left_still_cancels_the_upstream_call(
        fake, parser, queued):
    """Past 4 queued requests reading paused again (and with h11 after the first piece): the leaving went unseen."""
    from tests.polling import wait_until

    fake[0].push(endless_answer())
    with serve(fake, parser) as server:
        sock = connect(server.port)
        sock.sendall(asked(ASK_BODY))
        wait_until(lambda: fake[0].requests, 5, "the upstream call")
        for _ in range(queued):  # one at a time, each after the answer is being made
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            time.sleep(0.01)
        time.sleep(0.2)
        sock.close()
        wait_until(lambda: fake[0].disconnected, 5, "the upstream call to be cancelled")


@pytest.mark.parametrize("parser", PARSERS)
def test_pipelined_requests_past_the_bound_are_refused_and_the_connection_closes(fake, parser):
    """What waits behind an answer is bounded: a flood of pipelined requests or bytes is not read."""
    from tests.fakes.upstream import Step, completion

    fake[0].push(Step(body=completion("slow"), delay=0.5))
    with serve(fake, parser) as server:
        sock = connect(server.port)
        sock.sendall(asked(ASK_BODY))
        time.sleep(0.2)
        flood = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" * 50 + asked(b"x" * (4 * 1024 * 1024))
        try:
            sock.sendall(flood)
        except OSError:
            pass  # closed once the answers owed were written
        data = b""
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            while piece := sock.recv(65536):
                data += piece
        sock.close()
        latency = healthz_latency(server.port)
    answers = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    assert answers[0] == b"200" and 1 <= len(answers) <= 5, answers  # the first, and at most 4 queued
    assert latency < 0.5, latency


def expecting(path: bytes, body: bytes, key: bytes = b"") -> bytes:
    auth = b"authorization: Bearer %s\r\n" % key if key else b""
    return (b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nexpect: 100-continue\r\n"
            b"%scontent-length: %d\r\n\r\n" % (path, auth, len(body)))


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("path", [b"/v1/files", b"/v1/chat/completions"])
def test_expect_100_continue_is_answered_here_and_never_forwarded(fake, parser, path):
    """`Expect: 100-continue` went on to the upstream with a body the proxy had already read."""
    with serve(fake, parser) as server:
        sock = connect(server.port)
        sock.sendall(expecting(path, ASK_BODY))
        sock.settimeout(5)
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n"), interim
        sock.sendall(ASK_BODY)
        head = b""
        while b"\r\n\r\n" not in head and (piece := sock.recv(65536)):
            head += piece
        sock.close()
    assert re.match(rb"HTTP/1\.1 20[01] ", head), head
    headers = fake[0].other_headers[-1] if path == b"/v1/files" else fake[0].chat_headers[-1]
    assert "expect" not in headers, headers


@pytest.mark.parametrize("parser", PARSERS)
def test_expect_100_continue_refused_before_the_body_gets_the_final_answer_only(fake, parser):
    with serve(fake, parser, api_keys=["right"]) as server:
        sock = connect(server.port)
        sock.sendall(expecting(b"/v1/chat/completions", ASK_BODY, key=b"wrong"))
        sock.settimeout(5)
        head = read_answer(sock)
        sock.close()
    assert head.startswith(b"HTTP/1.1 401 "), head  # no 100 Continue first: the body is never asked for
    assert not fake[0].requests


GARBAGE = b"\x16\x03\x01 not http\r\n\r\n"  # a TLS hello's first bytes: no parser reads it as a request


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("when", ["with the request", "during the answer"])
def test_garbage_pipelined_behind_a_stream_never_cuts_into_its_answer(fake, parser, when):
    """httptools' parser error on the bytes behind a request made uvicorn write its 400 at once, inside the
    streamed answer (or in place of it), and close: the client got a cut stream with a 400 in the middle."""
    from tests.fakes.upstream import Step, content_chunks

    fake[0].push(Step(chunks=content_chunks("one two three four five six", size=3), chunk_delay=0.05))
    body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    with serve(fake, parser) as server:
        sock = connect(server.port)
        sock.sendall(asked(body) + (GARBAGE if when == "with the request" else b""))
        data = sock.recv(65536)
        if when == "during the answer":
            sock.sendall(GARBAGE)
        data += read_until_closed(sock, 10)
        sock.close()
    answer, _, after = data.partition(b"\r\n0\r\n\r\n")  # the stream's last chunk
    assert answer.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in answer, data
    assert b"HTTP/1.1 400" not in answer, data  # nothing written inside the answer
    assert after == b"" or after.startswith(b"HTTP/1.1 400 "), data  # then the 400, or nothing


def read_until_closed(sock: socket.socket, seconds: float) -> bytes:
    """All the proxy sends until it closes the connection (an AssertionError if it is still open)."""
    sock.settimeout(seconds)
    data = b""
    while piece := sock.recv(65536):
        data += piece
    return data
