"""CPU a streamed content chunk, the relay's and the proxy's: the small tools request streamed with 4 and with
`--chunks` content deltas before the call; the difference over the extra deltas is the cost of one. Back to back
(the canned upstream writes every event at once, so reads carry several) and spaced (`--delay`, each event read
alone, as a model's tokens come).

    cd bench && python stream_chunks.py [--chunks 404] [--delay 0.001] [--requests 100] [--spaced-requests 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

import servers
from agent_rows import SMALL, cpu_ms
from loadgen import one_client


def cpu_a_request(child: servers.Child, requests: int, rounds: int = 3) -> float:
    """Median over `rounds` of the server's CPU ms a streamed request."""
    asyncio.run(one_client(child.url, SMALL.path, SMALL.stream, 5, True))
    each = []
    for _ in range(rounds):
        before = cpu_ms(child.pid)
        asyncio.run(one_client(child.url, SMALL.path, SMALL.stream, requests, True))
        each.append((cpu_ms(child.pid) - before) / requests)
    return statistics.median(each)


def per_chunk(chunks: int, delay: float, requests: int) -> dict[str, float]:
    """µs of CPU a content delta for the relay and the proxy."""
    cost: dict[tuple[str, int], float] = {}
    for pieces in (4, chunks):
        with servers.canned_upstream(chunk_delay=delay, chunks=pieces) as upstream:
            children = {"relay": servers.relay(upstream.url).start(),
                        "sanctum": servers.sanctum(upstream.url, "--spell-calling", "native").start()}
            try:
                for name, child in children.items():
                    cost[(name, pieces)] = cpu_a_request(child, requests)
            finally:
                for child in children.values():
                    child.stop()
    return {name: (cost[(name, chunks)] - cost[(name, 4)]) / (chunks - 4) * 1000 for name in ("relay", "sanctum")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=404)
    p.add_argument("--delay", type=float, default=0.001, help="seconds between events, spaced")
    p.add_argument("--requests", type=int, default=100, help="streams a round, back to back")
    p.add_argument("--spaced-requests", type=int, default=15, help="streams a round, spaced")
    args = p.parse_args(argv)
    print("| events | relay µs a delta | sanctum µs a delta | sanctum / relay |")
    print("|---|---:|---:|---:|")
    for label, delay, requests in (("back to back", 0.0, args.requests),
                                   (f"{args.delay * 1000:g} ms apart", args.delay, args.spaced_requests)):
        us = per_chunk(args.chunks, delay, requests)
        print(f"| {label} | {us['relay']:.1f} | {us['sanctum']:.1f} | {us['sanctum'] / us['relay']:.1f}x |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
