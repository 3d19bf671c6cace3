"""What streaming through the proxy costs: time to first content byte and per-chunk cost, via the proxy vs
straight to the upstream, in the same run (requests of the two arms interleaved).

    python bench/bench_streaming.py [--quick]

The upstream is a minimal raw-asyncio SSE server in its own process (this file, `--serve-upstream`); the
proxy runs in its own process (`python -m sanctum_proxy`, default settings, a tools request so the stream
assembler is on the path); the client is a blocking socket that notes when the first content token and
`[DONE]` arrive. Prints a table and writes bench/results/streaming.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "streaming.md"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# --- the upstream --------------------------------------------------------------------------------------

def _event(payload: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            arrived = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the client's clock
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if not head.startswith(b"POST /v1/chat/completions"):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
                             b"content-length: 2\r\n\r\n{}")
                await writer.drain()
                continue
            opening = _event(_chunk({"role": "assistant", "content": ""}))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n" + opening)
            for i in range(int(body.get("bench_chunks", 1))):
                # The first token carries when the request arrived and when the token left, so the client
                # can split the time to first token into the way there and the way back.
                text = f" tok{i}" if i else f" tok0 {arrived:.7f} {time.perf_counter():.7f};"
                writer.write(_event(_chunk({"content": text})))
                await writer.drain()
            writer.write(_event(_chunk({}, "stop")) + _event({
                "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "bench",
                "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
            data = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_answer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


# --- the client ----------------------------------------------------------------------------------------

def _request(port: int, chunks: int) -> bytes:
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                       "stream": True, "bench_chunks": chunks}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (port, len(body), body))


@dataclass
class Timing:
    first: float  # seconds from the request's first byte to the first content token
    total: float  # ... to [DONE]
    there: float  # ... to the upstream having read the request head
    back: float  # from the upstream writing the first token to the client reading it


def timed(port: int, chunks: int) -> Timing:
    request = _request(port, chunks)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        received = bytearray()
        first = None
        start = time.perf_counter()
        sock.sendall(request)
        while True:
            piece = sock.recv(65536)
            if not piece:
                raise RuntimeError(f"stream ended without [DONE]: {bytes(received[-300:])!r}")
            received += piece
            if first is None and b"tok0" in received:
                first = time.perf_counter()
            if b"[DONE]" in received[-64:]:
                end = time.perf_counter()
                stamps = re.search(rb"tok0 ([0-9.]+) ([0-9.]+);", received)
                assert stamps is not None and first is not None
                arrived, left = float(stamps[1]), float(stamps[2])
                return Timing(first - start, end - start, arrived - start, first - left)


def _wait_port(port: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def measure(quick: bool) -> dict[str, Any]:
    up_port, proxy_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port)], env=env)
    proxy = subprocess.Popen([sys.executable, "-m", "sanctum_proxy", "--port", str(proxy_port), "--upstream",
                              f"http://127.0.0.1:{up_port}/v1", "--log-level", "warning"], env=env)
    arms = {"direct": up_port, "proxy": proxy_port}
    try:
        _wait_port(up_port)
        _wait_port(proxy_port)
        runs, long_runs, long_chunks = (40, 5, 500) if quick else (300, 20, 2000)
        for port in arms.values():  # warm up: connections, the auto-mode probe, imports
            for _ in range(10):
                timed(port, 5)
        short: dict[str, list[Timing]] = {arm: [] for arm in arms}
        cpu_start = _cpu_seconds(proxy.pid)
        for _ in range(runs):
            for arm, port in arms.items():
                short[arm].append(timed(port, 5))
        cpu_short = _cpu_seconds(proxy.pid) - cpu_start
        long: dict[str, list[Timing]] = {arm: [] for arm in arms}
        for _ in range(long_runs):
            for arm, port in arms.items():
                long[arm].append(timed(port, long_chunks))
        cpu_long = _cpu_seconds(proxy.pid) - cpu_start - cpu_short
    finally:
        for process in (proxy, upstream):
            process.terminate()
            process.wait(10)
    out: dict[str, Any] = {"runs": runs, "long_runs": long_runs, "long_chunks": long_chunks,
                           "cpu_request": cpu_short / runs,
                           "cpu_chunk": (cpu_long / long_runs - cpu_short / runs) / (long_chunks - 5)}
    for arm in arms:
        out[arm] = {"first": _stats([t.first for t in short[arm]]),
                    "there": _stats([t.there for t in short[arm]]),
                    "back": _stats([t.back for t in short[arm]]),
                    "per_chunk": _stats([t.total / long_chunks for t in long[arm]])}
    return out


NOTES = """## Where the time goes (cProfile of the proxy process, December 2026)

- The proxy's own streaming code is a small share: assembler, round loop and SSE writer together are about
  0.1 ms per request and 5-10 µs per chunk. Events already queued are written together.
- Fixed: every streamed request used to open a new upstream TCP connection (the body's end after `[DONE]`
  was never read, so httpx dropped the connection); the end is now read (50 ms bound) and the connection
  pooled (`tests/test_streaming_proxy.py::test_streamed_requests_reuse_one_upstream_connection`). That took
  about 1.1 ms off the time to first token and about 70 µs off each chunk here.
- What is left on the request path is mostly httpx (0.5 ms from `send` to response headers against this
  upstream, where a raw socket takes about 0.15 ms) and the ASGI stack (FastAPI routing, the middleware of
  request ids, limits, metrics and the access log, each chunk passing every layer on its way out). On the
  way back, most of the time is the response start (Starlette's StreamingResponse with its disconnect
  listener, headers written) that must wait for the upstream's headers, because an error before them is a
  plain HTTP status (contract section 7).
- This machine has 2 cores shared by other jobs (load average 3-7 during these runs): each wake-up of the
  proxy can wait for a core, so wall-clock numbers here are upper bounds; the CPU line above does not
  depend on the load.
"""


def _row(name: str, direct: float, proxy: float, unit: str) -> str:
    scale, fmt = (1000.0, "{:.2f} ms") if unit == "ms" else (1e6, "{:.1f} µs")
    d, p = direct * scale, proxy * scale
    return f"| {name} | {fmt.format(d)} | {fmt.format(p)} | {fmt.format(p - d)} | {p / d:.1f}x |"


def report(r: dict[str, Any], quick: bool) -> str:
    d, p = r["direct"], r["proxy"]
    added = (p["first"][0] - d["first"][0]) * 1000
    return "\n".join([
        "# Streaming cost: via the proxy vs direct",
        "",
        f"`python bench/bench_streaming.py{' --quick' if quick else ''}` on Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs); "
        "upstream, proxy and client in separate processes on loopback; a tools request with `stream: true` "
        "(the stream assembler and the repair loop on the path); the two arms interleaved in the same run.",
        "",
        "| measure | direct | via proxy | added | ratio |",
        "|---|---:|---:|---:|---:|",
        _row(f"time to first content byte, median of {r['runs']}", d["first"][0], p["first"][0], "ms"),
        _row("time to first content byte, p90", d["first"][1], p["first"][1], "ms"),
        _row("  of it: request to the upstream (median)", d["there"][0], p["there"][0], "ms"),
        _row("  of it: first token back to the client (median)", d["back"][0], p["back"][0], "ms"),
        _row(f"per content chunk, median of {r['long_runs']} streams of {r['long_chunks']}",
             d["per_chunk"][0], p["per_chunk"][0], "µs"),
        "",
        f"CPU the proxy process spends (load-independent, from /proc): {r['cpu_request'] * 1000:.2f} ms per "
        f"streamed request of 5 chunks, {r['cpu_chunk'] * 1e6:.1f} µs per further chunk.",
        "",
        f"Target: streaming adds under 1 ms to the time to first token: {added:.2f} ms at the median "
        f"({'met' if added < 1.0 else 'NOT met'}). \"Request to the upstream\" is the proxy's request path "
        "(ASGI middleware, body checks, mode, the upstream request over a pooled connection); \"first token "
        "back\" is the answer path (SSE parse, assembler, round loop, re-framing, one more socket write).",
        "",
        NOTES,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests (about 10 s)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve(args.serve_upstream))
        return
    text = report(measure(args.quick), args.quick)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
