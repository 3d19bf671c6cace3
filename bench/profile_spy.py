"""py-spy over a real proxy process (sanctum-proxy or the bare relay) while one client sends tool-call requests to
it over the canned upstream: a flame graph, or raw stacks and a table of where the time goes per request.

    python bench/profile_spy.py plain|stream [--target sanctum|relay] [--seconds 6] [--format flamegraph|raw]
                                             [--agent qwen-code] --out FILE

py-spy (bench/requirements.txt) samples the process from outside at 500 Hz without slowing it much (unlike
cProfile: bench/profile_paths.py), threads included (the trace writer's). With `--format raw` it also prints, per
request, the sampled µs of each part of the path (`PARTS`: the first part a stack falls in counts it), so a
sanctum-proxy run and a relay run can be set side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import subprocess
import sys
import time
from pathlib import Path

import servers
from agent_bodies import chat_turn, encode
from bench_overhead import CALL, PATH, STREAM
from loadgen import one_client

RATE = 500  # samples per second
PARTS = [  # (part, a frame that puts a stack in it); the first that matches counts
    ("trace writer thread (SQLite, metrics, access line)", "Recorder._drain"),
    ("logging in the event loop (uvicorn's access line)", "Logger.info"),
    ("writing to the client (uvicorn send: headers, socket)", "RequestResponseCycle.send"),
    ("writing the upstream request (aiohttp, socket)", "ClientRequest.write_bytes"),
    ("upstream round: connection, request (Upstream._request)", "Upstream._request"),
    ("upstream answer read and parsed (upstreams/chat_rounds.py)", "upstreams/chat_rounds.py"),
    ("upstream answer read and parsed (upstreams/chat_rounds.py)", "Upstream."),
    ("stream: SSE assembly and rendering (routes/sse.py, protocols/chat_events.py)", "routes/sse.py"),
    ("stream: SSE assembly and rendering (routes/sse.py, protocols/chat_events.py)", "protocols/chat_events.py"),
    ("judging the answer (loop.judge: mend, validate)", "judge ("),
    ("trace recording on the loop (Recorder.begin/watch)", "Recorder."),
    ("round loop plumbing (routes/rounds.py, loop.run)", "routes/rounds.py"),
    ("round loop plumbing (routes/rounds.py, loop.run)", "repair/loop.py"),
    ("reading the request (chat_request)", "chat_request"),
    ("planning (make_plan)", "make_plan"),
    ("routing, trace id (start_rounds)", "start_rounds"),
    ("the chat route's own lines", "chat_completions"),
    ("body first (ConcurrencyLimit)", "_body_first"),
    ("FastAPI/Starlette layers", "fastapi/"),
    ("FastAPI/Starlette layers", "starlette/"),
    ("uvicorn protocol (parsing)", "uvicorn/protocols"),
    ("aiohttp, the rest", "aiohttp/"),
    ("event loop itself (uvloop: epoll, socket reads, callbacks)", "Runner.run"),
]


def parts(raw: Path, requests: int) -> dict[str, float]:
    """Sampled µs per request of each part (collapsed stacks: `frame;frame;... count` per line)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        part = next((name for name, frame in PARTS if frame in stack), "other")
        counts[part] += int(n)
    return {name: n * 1e6 / RATE / requests for name, n in counts.most_common()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=("plain", "stream"))
    p.add_argument("--target", choices=("sanctum", "relay"), default="sanctum")
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--format", choices=("flamegraph", "raw"), default="flamegraph")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--agent", help="send this agent's captured turn (bench/agent_bodies.py), not the small body")
    args = p.parse_args(argv)
    body, stream = (CALL, False) if args.kind == "plain" else (STREAM, True)
    if args.agent:
        body = encode(chat_turn(args.agent), stream)
    with servers.canned_upstream() as upstream:
        proxy = (servers.relay(upstream.url) if args.target == "relay" else
                 servers.sanctum(upstream.url, "--spell-calling=native")).start()
        try:
            asyncio.run(one_client(proxy.url, PATH, body, 200, stream=stream))  # warm
            spy = subprocess.Popen(["py-spy", "record", "-p", str(proxy.pid), "-r", str(RATE), "-o", str(args.out),
                                    "-f", args.format, "--nonblocking"])
            time.sleep(1.0)  # py-spy attached
            sent = 0

            async def load() -> None:
                nonlocal sent
                end = time.perf_counter() + args.seconds
                while time.perf_counter() < end:
                    await one_client(proxy.url, PATH, body, 100, stream=stream)
                    sent += 100

            began = time.perf_counter()
            asyncio.run(load())
            elapsed = time.perf_counter() - began
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        finally:
            proxy.stop()
    print(f"{args.target} {args.kind}: {sent} requests, {elapsed / sent * 1000:.2f} ms each at the client")
    if args.format == "raw":  # the samples also cover the second before the load: a little idle, no requests
        for name, us in parts(args.out, sent).items():
            print(f"{us:7.0f} µs  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
