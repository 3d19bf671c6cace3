"""The access log: one JSON line per request on stderr, from sanctum-proxy itself (uvicorn's access log is off):
chat requests get theirs from the trace writer, every other endpoint from web/access_log.AccessLog."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.trace_scenarios import ASK, ask, repaired
from tests.fakes.upstream import Step, completion
from tests.polling import wait_until


@pytest.fixture
def cli_proxy(fake: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The CLI at its default log level (info), its stderr in a file."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    log = tmp_path / "stderr.log"
    env = {**os.environ, "SANCTUM_TRACES_PATH": ":memory:"}
    env.pop("SANCTUM_LOG_LEVEL", None)
    with log.open("wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "sanctum_proxy", "--upstream", fake[1] + "/v1",
                                    "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(url + "/healthz", timeout=1).status_code == 200, 20, "the proxy to listen",
                   every=0.1, ignoring=(httpx.HTTPError,), detail=log.read_text)
        yield url, log
    finally:
        process.terminate()
        process.wait(10)


def at_least(count: int, lines: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return lines if len(lines) >= count else None


def json_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def ours(log: Path) -> list[dict[str, Any]]:
    """The lines of the test's requests: less the readiness polls' /healthz lines (one may land late)."""
    return [x for x in json_lines(log) if x.get("path") != "/healthz" or x.get("request_id") == "hz-1"]


def test_every_endpoint_gets_one_json_line_and_uvicorn_none(cli_proxy, fake):
    url, log = cli_proxy
    assert httpx.get(url + "/healthz", headers={"X-Request-Id": "hz-1"}).status_code == 200
    assert httpx.get(url + "/v1/models").status_code == 200
    chat = repaired(fake[0], url, **{"X-Request-Id": "chat-1"})
    assert chat.status_code == 200
    assert httpx.get(url + "/no/such/path").status_code == 404
    lines = wait_until(lambda: at_least(4, ours(log)), 10, "four access lines", detail=log.read_text)
    time.sleep(0.3)
    assert len(ours(log)) == 4, log.read_text()  # one line each, nothing more
    plain = [(x["method"], x["path"], x["status"]) for x in lines if x["event"] == "http_request"]
    assert sorted(plain) == [("GET", "/healthz", 200), ("GET", "/no/such/path", 404), ("GET", "/v1/models", 200)]
    assert next(x["request_id"] for x in lines if x.get("path") == "/healthz") == "hz-1"
    [traced] = [x for x in lines if x["event"] == "chat_request"]
    assert traced["request_id"] == "chat-1" and traced["trace_id"] == chat.headers["x-sanctum-trace-id"]
    assert all(x["latency_ms"] >= 0 for x in lines)
    text = log.read_text()
    assert '"GET /healthz HTTP/1.1"' not in text and '"POST /v1/chat/completions' not in text  # uvicorn's line


def test_a_chat_request_turned_away_by_the_limit_gets_one_line(make_proxy, fake, caplog):
    caplog.set_level(logging.INFO, logger="sanctum_proxy.access")
    url = make_proxy(max_concurrent_requests=1)
    fake[0].push(Step(body=completion("slow"), delay=1.0))
    held = threading.Thread(target=ask, args=(url, {}, ASK))
    held.start()
    try:
        wait_until(lambda: fake[0].requests, 5, "the first request upstream", every=0.01)
        assert ask(url, {"X-Request-Id": "full-1"}).status_code == 429  # no trace, no refused(): AccessLog's line
    finally:
        held.join()
    lines = wait_until(lambda: at_least(2, access_lines(caplog)), 10, "two access lines")
    assert [(x["event"], x["status"]) for x in lines] == [("http_request", 429), ("chat_request", 200)]
    assert (lines[0]["path"], lines[0]["request_id"]) == ("/v1/chat/completions", "full-1")


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "sanctum_proxy.access"]
