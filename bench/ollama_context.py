"""A Claude Code sized request toward Ollama: its estimated size, the context the proxy gives it, and what speaking
Ollama's own /api/chat costs per request against its /v1, in front of the scripted fake Ollama.

    PYTHONPATH=. python bench/ollama_context.py [--requests N]

The request: 12 tools and a long system prompt (tests/routes/test_context.py `claude_code_sized`), sent
to /v1/messages with `max_tokens` 32000 as Claude Code sends it. Prints the body's size and estimated tokens,
the microseconds of the translation, and per setting (`ollama_native` on / off) the median wall time of a
request through the proxy and the options Ollama received.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx
import orjson

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings
from sanctum_proxy.upstreams import tokens
from sanctum_proxy.upstreams.ollama_native import native_request
from tests.conftest import ServerThread
from tests.fakes.ollama import FakeOllama, call
from tests.routes.test_context import claude_code_sized


def per_call_us(work: Any, body: dict[str, Any], times: int = 2000) -> float:
    start = time.perf_counter()
    for _ in range(times):
        work(body)
    return (time.perf_counter() - start) / times * 1e6


def through_proxy(body: dict[str, Any], native: bool, requests: int) -> tuple[float, Any]:
    fake = FakeOllama(responder=lambda _: call("Write", {"path": "hello.txt", "content": "hi"}))
    with ServerThread(fake.app()) as up:
        settings = load_settings({"upstream": up.url + "/v1", "traces_path": ":memory:", "ollama_native": native})
        with ServerThread(create_app(settings)) as proxy, httpx.Client(timeout=20) as client:
            times = []
            for _ in range(requests):
                start = time.perf_counter()
                got = client.post(proxy.url + "/v1/messages", json=body)
                times.append((time.perf_counter() - start) * 1000)
                assert got.status_code == 200, got.text
    sent = (fake.requests or fake.v1_requests)[-1]
    return statistics.median(times[5:]), sent.get("options")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    system, tools = claude_code_sized()
    chat = {"model": "qwen3:0.6b", "max_tokens": 32000,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Create hello.txt"}],
            "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                        "parameters": t["input_schema"]}} for t in tools]}
    print(f"chat body {len(orjson.dumps(chat))} bytes, estimated {tokens.estimate(chat)} tokens")
    translation, estimate = per_call_us(native_request, chat), per_call_us(tokens.estimate, chat)
    print(f"native_request {translation:.1f} us, estimate {estimate:.1f} us")
    body = {"model": "qwen3:0.6b", "max_tokens": 32000, "system": system, "tools": tools, "stream": False,
            "messages": [{"role": "user", "content": "Create a file named hello.txt containing: hi"}]}
    for native in (True, False):
        median, options = through_proxy(body, native, args.requests)
        print(f"ollama_native={native}: median {median:.2f} ms a request, options sent {options}")


if __name__ == "__main__":
    main()
