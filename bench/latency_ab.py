"""p50 latency of two or more trees of the proxy on one agent row, in the same rounds, with enough requests to hold
still on a shared machine (20-60 requests moved 0.5 ms between runs here; 5 rounds of 300 do not).

    python bench/latency_ab.py "opencode turn" stream DIR_A DIR_B [--requests 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

import servers
from agent_rows import rows_of
from loadgen import one_client, percentile


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("row", help="the row whose name contains this (bench/agent_rows.py)")
    p.add_argument("mode", choices=("plain", "stream"))
    p.add_argument("trees", nargs="+", type=Path)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    row = next(r for r in rows_of("agents") if args.row in r.body.name)
    stream = args.mode == "stream"
    p50: dict[str, list[float]] = {str(t): [] for t in args.trees}
    p50["direct"] = []
    with servers.canned_upstream() as upstream:
        started = [(str(t), servers.sanctum(upstream.url, "--spell-calling", "native", tree=t.resolve()).start())
                   for t in args.trees]
        try:
            for number in range(args.rounds):
                turn = started[number % len(started):] + started[:number % len(started)]
                targets = [(name, child.url, row.body) for name, child in turn]
                for name, url, body in [*targets, ("direct", upstream.url, row.direct_body)]:
                    raw = body.stream if stream else body.plain
                    asyncio.run(one_client(url, body.path, raw, 20, stream))  # its connection warm
                    replies = asyncio.run(one_client(url, body.path, raw, args.requests, stream))
                    p50[name].append(percentile([r.total_ms for r in replies], 0.5))
        finally:
            for _, child in started:
                child.stop()
    print(f"{row.body.name}, {args.mode}: p50 ms, median of {args.rounds} rounds of {args.requests} (each round)")
    for name, values in p50.items():
        print(f"{statistics.median(values):.3f}  {[round(v, 2) for v in values]}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
