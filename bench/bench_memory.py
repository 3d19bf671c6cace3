"""Resident memory of the sanctum-proxy process with many slow streams held open at once.

    python bench/bench_memory.py [--quick] [--streams 500]

The canned upstream (bench/canned_upstream.py) sends one SSE event every --chunk-delay seconds, so every
stream stays open for the whole measurement. The baseline is the same process idle after a warm-up, in the
same run; the report gives RSS idle, RSS at the peak with N streams open, and the cost per stream.
Writes bench/results/memory.{md,png}. Target: <= 150 MB with 500 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

import servers
from canned_upstream import MODEL, TOOLS
from loadgen import Connection

RESULTS = Path(__file__).parent / "results"
BODY = json.dumps({"model": MODEL, "stream": True, "tools": TOOLS,
                   "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}).encode()


async def hold_streams(url: str, pid: int, streams: int,
                       ramp: float) -> tuple[list[tuple[float, int, float]], int]:
    """Open `streams` streams over `ramp` seconds; sample (seconds, streams open, RSS MiB) until all end."""
    opened = 0
    ok = 0
    samples: list[tuple[float, int, float]] = []
    start = time.perf_counter()

    async def one(delay: float) -> None:
        nonlocal opened, ok
        await asyncio.sleep(delay)
        conn = Connection(url)
        opened += 1
        try:
            reply = await conn.post(conn.request_bytes("/chat/completions", BODY), stream=True)
            ok += reply.status == 200 and reply.body.rstrip().endswith(b"[DONE]")
        finally:
            opened -= 1
            conn.close()

    tasks = [asyncio.create_task(one(ramp * i / streams)) for i in range(streams)]
    while not all(t.done() for t in tasks):
        samples.append((time.perf_counter() - start, opened, servers.rss_mb(pid)))
        await asyncio.sleep(0.25)
    await asyncio.gather(*tasks)
    return samples, ok


def main(argv: list[str] | None = None) -> int:
    servers.exit_on_sigterm()
    p = argparse.ArgumentParser(description="proxy RSS with many slow streams open")
    p.add_argument("--quick", action="store_true", help="50 streams, a few seconds (CI); results not written")
    p.add_argument("--streams", type=int, help="concurrent streams (default 500; quick 50)")
    p.add_argument("--chunk-delay", type=float,
                   help="seconds between upstream events (default 1.0; quick 0.2)")
    args = p.parse_args(argv)
    streams = args.streams or (50 if args.quick else 500)
    delay = args.chunk_delay or (0.2 if args.quick else 1.0)
    ramp = 1.0 if args.quick else 5.0
    # The proxy answers 429 past max_concurrent_requests (default 256): raise it to hold every stream.
    limit = {"SANCTUM_MAX_CONCURRENT_REQUESTS": str(streams + 16)}
    with servers.canned_upstream(chunk_delay=delay, chunks=8) as upstream, \
            servers.sanctum(upstream.url, env=limit) as proxy:
        asyncio.run(warm(proxy.url))
        idle = servers.rss_mb(proxy.pid)
        samples, ok = asyncio.run(hold_streams(proxy.url, proxy.pid, streams, ramp))
        after = servers.rss_mb(proxy.pid)
    peak_open = max(s[1] for s in samples)
    peak = max(s[2] for s in samples)
    events = 8 + 6  # the canned stream's events: role, 8 content pieces, the call in 3 pieces, finish, usage
    text = "\n".join([
        "# Proxy memory with slow streams held open",
        "",
        f"`python bench/bench_memory.py{' --quick' if args.quick else ''}` — "
        f"Python {platform.python_version()}; "
        f"{streams} streaming requests with tools opened over {ramp:g} s; the upstream sends an event every "
        f"{delay:g} s (~{events * delay:.0f} s per stream). RSS of the proxy process from /proc; "
        f"default settings except max_concurrent_requests={streams + 16}.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| RSS idle after warm-up (baseline) | {idle:.1f} MiB |",
        f"| most streams open at once | {peak_open} |",
        f"| RSS peak | {peak:.1f} MiB ({peak / idle:.2f}× idle) |",
        f"| added per open stream | {(peak - idle) * 1024 / max(peak_open, 1):.0f} KiB |",
        f"| RSS after all ended | {after:.1f} MiB |",
        f"| streams that ended with [DONE] | {ok}/{streams} |",
        "",
        "Target: peak <= 150 MB with 500 streams open.",
    ]) + "\n"
    print(text)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "memory.md").write_text(text, encoding="utf-8")
        plot(samples, idle, RESULTS / "memory.png")
    return 0 if ok == streams else 1


async def warm(url: str) -> None:
    conn = Connection(url)
    try:
        for _ in range(3):
            await conn.post(conn.request_bytes("/chat/completions", BODY), stream=True)
    finally:
        conn.close()


def plot(samples: list[tuple[float, int, float]], idle: float, path: Path) -> None:
    plt = servers.pyplot()
    if plt is None:
        return

    fig, left = plt.subplots(figsize=(8, 4))
    left.plot([s[0] for s in samples], [s[2] for s in samples], color="tab:blue", label="RSS MiB")
    left.axhline(idle, color="tab:blue", linestyle=":", linewidth=1, label="idle RSS")
    left.axhline(150, color="grey", linestyle="--", linewidth=1, label="target 150 MB")
    left.set_xlabel("seconds")
    left.set_ylabel("RSS MiB")
    right = left.twinx()
    right.plot([s[0] for s in samples], [s[1] for s in samples], color="tab:orange", label="streams open")
    right.set_ylabel("streams open")
    left.legend(loc="upper left")
    right.legend(loc="upper right")
    fig.suptitle("sanctum-proxy RSS with slow streams held open")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
