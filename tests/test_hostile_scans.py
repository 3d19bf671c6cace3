"""Hostile input, round 3: validation and stream scans linear in their input. `uniqueItems` compared every pair
of items; the stream assembler re-read its whole pending text on every delta. Each test replays the attack at
the size the issue measured and watches /healthz (tests/test_hostile_budgets.Watch). Each fails without its fix."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.upstream import Step, completion, native_call
from tests.polling import wait_until
from tests.test_hostile_budgets import Watch, thread_cpu

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
UNIQUE = {"type": "object", "properties": {"rows": {"type": "array", "uniqueItems": True,
                                                    "items": {"type": "object"}}}, "required": ["rows"]}


def tool(parameters: dict[str, Any], name: str = "f") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def unique_rows(count: int) -> str:
    return orjson.dumps({"rows": [{"k": i} for i in range(count)]}).decode()



def streamed_weather(endpoint: str) -> tuple[str, dict[str, Any]]:
    """A streamed request offering get_weather, on the endpoint's own path and shape."""
    if endpoint == "chat":
        return "/v1/chat/completions", {**ASK, "stream": True, "tools": [tool(WEATHER, "get_weather")]}
    if endpoint == "responses":
        return "/v1/responses", {"model": "m", "input": "hi", "stream": True, "tools": [
            {"type": "function", "name": "get_weather", "parameters": WEATHER}]}
    return "/v1/messages", {"model": "m", "max_tokens": 64, "stream": True, "tools": [
        {"name": "get_weather", "input_schema": WEATHER}], "messages": [{"role": "user", "content": "hi"}]}

def test_four_35_kb_unique_items_calls_cost_milliseconds_and_block_no_other_client(make_proxy, fake):
    """A 35 KB call of distinct objects under uniqueItems cost 6 s of CPU in one validation step; four filled the
    CPU pool and another client's request waited 16 s."""
    proxy = make_proxy(spell_calling="native", max_repair_rounds=0)
    arguments = unique_rows(3500)
    assert 30_000 < len(arguments) < 40_000
    fake[0].responder = lambda body: Step(body=completion(None, [native_call("f", arguments)]) if body.get(
        "tools") else completion("plain"))
    body = {**ASK, "tools": [tool(UNIQUE)]}
    with Watch(proxy) as watch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        started = time.perf_counter()
        hostile = [pool.submit(httpx.post, proxy + "/v1/chat/completions", json=body, timeout=60) for _ in range(4)]
        time.sleep(0.2)
        other = httpx.post(proxy + "/v1/chat/completions", json=ASK, timeout=60)
        other_waited = time.perf_counter() - started
        answers = [f.result() for f in hostile]
        took = time.perf_counter() - started
    watch.check(requests=4)
    assert other.status_code == 200 and other_waited < 2, other_waited
    assert [a.status_code for a in answers] == [200] * 4, answers[0].text
    assert took < 5, took


def test_a_repeated_item_is_still_found_and_named(make_proxy, fake):
    proxy = make_proxy(spell_calling="native")
    rows = [{"k": i, "v": [1, 2]} for i in range(2000)] + [{"v": [1, 2.0], "k": 7}]
    fake[0].push(Step(body=completion(None, [native_call("f", orjson.dumps({"rows": rows}).decode())])),
                 Step(body=completion(None, [native_call("f", unique_rows(3))])))
    r = httpx.post(proxy + "/v1/chat/completions", json={**ASK, "tools": [tool(UNIQUE)]}, timeout=30)
    assert r.status_code == 200, r.text
    rejected = r.json()["sanctum"]["omens"][0]
    assert rejected["reason"] == "invalid_arguments", rejected
    assert any("items 7 and 2000 are equal" in d for d in rejected["details"]), rejected


@pytest.mark.parametrize(("items", "unique"), [([1, 1.0], False), ([1, True], True), ([0, False], True),
                                               ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
                                               ([[1, 2], [2, 1]], True), (["1", 1], True), ([None, None], False)])
def test_unique_items_keeps_json_schemas_equality(items, unique):
    from sanctum_proxy.repair.schemas import validator_for

    validator = validator_for({"type": "array", "uniqueItems": True})
    assert validator.is_valid(items) is unique


def space_chunks(lead: str, count: int) -> list[bytes]:
    """A stream opening with `lead` (a tool's name) and then `count` one-space deltas, in llama.cpp's framing."""
    def chunk(text: str) -> bytes:
        return b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,' \
               b'"delta":{"content":' + orjson.dumps(text) + b'},"finish_reason":null}]}\n\n'
    return [chunk(lead)] + [chunk(" ")] * count + [chunk("done")]


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.mark.parametrize("lead", ["get_weather", "get_weather\n", "  "])
@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
def test_a_tool_name_and_60000_one_space_deltas_never_block(fake, endpoint, lead):
    """The bare-name hold re-matched the whole pending text on every delta: 60,000 one-space deltas after a tool
    name blocked /healthz 3 s (8 s of CPU), on chat, Responses and Messages."""
    from sanctum_proxy.app import create_app
    from sanctum_proxy.config import load_settings
    from tests.conftest import ServerThread

    fake[0].push(Step(chunks=space_chunks(lead, 60_000)))
    path, body = streamed_weather(endpoint)
    settings = load_settings({"upstream": fake[1] + "/v1", "traces_path": ":memory:", "spell_calling": "native",
                              "max_repair_rounds": 0})
    with ServerThread(create_app(settings)) as server:
        before = thread_cpu(server.thread)
        with Watch(server.url) as watch, httpx.Client(timeout=120) as client:
            with client.stream("POST", server.url + path, json=body) as r:
                received = b"".join(r.iter_bytes())
        used = thread_cpu(server.thread) - before
    watch.check()
    assert r.status_code == 200 and b"done" in received, received[-500:]
    assert used < 6, f"the proxy's thread used {used:.1f} s of CPU"


def test_a_grammar_over_its_budget_stops_being_built_at_the_budget():
    """The GBNF grammar was built whole (megabytes, seconds for many large tools), then found too large."""
    from sanctum_proxy.repair.grammar import GrammarTooLarge, gbnf
    from sanctum_proxy.repair.toolbox import Toolbox

    def wide(n: int) -> dict[str, Any]:
        return {"type": "object", "properties": {f"p{i}": {"type": "string", "enum": [
            f"v{n}-{i}-{j}" for j in range(20)]} for i in range(400)}}

    book = Toolbox.from_tools([tool(wide(n), f"t{n}") for n in range(64)])
    started = time.perf_counter()
    with pytest.raises(GrammarTooLarge):
        gbnf(book, "hermes", text=False, parallel=False, limit=64 * 1024)
    limited = time.perf_counter() - started
    started = time.perf_counter()
    whole = gbnf(book, "hermes", text=False, parallel=False)
    unlimited = time.perf_counter() - started
    assert whole is not None and len(whole) > 1024 * 1024
    assert limited < unlimited / 5, (limited, unlimited)
    small = gbnf(Toolbox.from_tools([tool(WEATHER, "get_weather")]), "hermes", text=False, parallel=False,
                 limit=64 * 1024)
    assert small is not None and "get_weather" in small


def process_cpu(pid: int) -> float:
    """Seconds of CPU a process has used (Linux: /proc/<pid>/stat utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def proxy_process(fake: Any) -> Iterator[tuple[str, int]]:
    """The CLI in a process of its own (native spell calling): its event loop is not this process's threads'."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "SANCTUM_TRACES_PATH": ":memory:", "SANCTUM_LOG_LEVEL": "error",
           "SANCTUM_SPELL_CALLING": "native"}
    process = subprocess.Popen([sys.executable, "-m", "sanctum_proxy", "--upstream", fake[1] + "/v1", "--port",
                                str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(url + "/healthz", timeout=1).status_code, 20, "the proxy to listen",
                   every=0.1, ignoring=(httpx.HTTPError,))
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
def test_a_long_legal_stream_of_one_held_call_costs_linear_cpu_and_never_blocks(fake, proxy_process, endpoint):
    """A native call's 500 KB of arguments in 100,000 deltas: held until whole, its deltas wrote nothing, so the
    chunks already buffered were read in one go. The bound on a long legitimate stream is the proxy's own work per
    delta (linear, a few microseconds), with the loop let go every few milliseconds."""
    from tests.fakes.upstream import llama_tool_chunks

    url, pid = proxy_process
    deltas = 100_000
    events = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in llama_tool_chunks(
        "get_weather", '{"city": "' + "a" * (5 * deltas) + '"}', size=5)]
    # sent 2,000 events a write: the proxy finds many buffered at once, and this process stays quiet for /healthz
    fake[0].push(Step(chunks=[b"".join(events[i:i + 2000]) for i in range(0, len(events), 2000)]))
    path, body = streamed_weather(endpoint)
    before = process_cpu(pid)
    with Watch(url) as watch, httpx.Client(timeout=120) as client:
        with client.stream("POST", url + path, json=body) as r:
            received = b"".join(r.iter_bytes())
    used = process_cpu(pid) - before
    watch.check()
    assert watch.worst < 0.12, f"/healthz waited {watch.worst:.2f} s (0.13-0.27 s while buffered chunks held the loop)"
    assert r.status_code == 200 and b"get_weather" in received and len(received) > 5 * deltas, received[-300:]
    assert used < deltas * 50e-6, f"the proxy used {used:.1f} s of CPU ({used / deltas * 1e6:.0f} us a delta)"
