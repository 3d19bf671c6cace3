"""CPU per request of the relay and the proxy (and other trees of the proxy) on the agents' rows, over enough
sequential requests that the clock tick does not matter: the figure 16-client throughput follows on two cores.

    python bench/cpu_per_request.py --requests 400 --rounds 3 [--before DIR ...] [--rows agents]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import agent_rows
import servers
from agent_rows import Row, cpu_ms, rows_of
from loadgen import one_client


async def measure(rows: list[Row], urls: dict[str, str], pids: dict[str, int], requests: int, number: int,
                  cpu: dict[tuple[str, str, str], list[float]]) -> None:
    names = list(urls)
    order = names[number % len(names):] + names[:number % len(names)]
    for row in rows:
        for mode in ("plain", "stream"):
            for name in order:
                body = row.direct_body if name.startswith("relay") else row.body
                raw = body.stream if mode == "stream" else body.plain
                await one_client(urls[name], body.path, raw, 5, mode == "stream")
                before = cpu_ms(pids[name])
                await one_client(urls[name], body.path, raw, requests, mode == "stream")
                cpu.setdefault((row.body.name, mode, name), []).append((cpu_ms(pids[name]) - before) / requests)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default="agents", help="agents | sizes | turns")
    p.add_argument("--only", default="", help="keep rows whose name contains this")
    p.add_argument("--before", type=Path, action="append", default=[], help="another tree of the proxy")
    p.add_argument("--variant", action="append", default=[],
                   help="this tree with settings in the environment: NAME=VALUE[,NAME=VALUE]")
    p.add_argument("--no-relay", action="store_true")
    p.add_argument("--parsing-relay", action="store_true",
                   help="also the relay that decodes and encodes again what passes (bench/relay.py --parse)")
    args = p.parse_args(argv)
    rows = [r for r in rows_of(args.rows) if args.only in r.body.name]
    started: list[servers.Child] = []
    cpu: dict[tuple[str, str, str], list[float]] = {}
    with servers.canned_upstream() as upstream:
        try:
            urls: dict[str, str] = {}
            pids: dict[str, int] = {}
            children = [] if args.no_relay else [("relay", servers.relay(upstream.url))]
            if args.parsing_relay:
                children.append(("relay parsing", servers.relay(upstream.url, parse=True)))
            children.append(("sanctum", servers.sanctum(upstream.url, "--spell-calling", "native")))
            for i, tree in enumerate(args.before):
                children.append((f"tree{i + 1}", servers.sanctum(upstream.url, "--spell-calling", "native",
                                                                 tree=tree.resolve())))
            for i, spec in enumerate(args.variant):
                env = dict(pair.split("=", 1) for pair in spec.split(","))
                children.append((f"var{i + 1}", servers.sanctum(upstream.url, "--spell-calling", "native", env=env)))
            for name, child in children:
                started.append(child.start())
                urls[name], pids[name] = child.url, child.pid
            agent_rows.check(rows, urls["sanctum"])
            for number in range(args.rounds):
                asyncio.run(measure(rows, urls, pids, args.requests, number, cpu))
                print(f"round {number + 1}/{args.rounds}", file=sys.stderr, flush=True)
        finally:
            for child in started:
                child.stop()
    names = list(urls)
    print(f"CPU ms per request, median of {args.rounds} rounds of {args.requests}; "
          + ", ".join([f"tree{i + 1} = {t}" for i, t in enumerate(args.before)]
                      + [f"var{i + 1} = {v}" for i, v in enumerate(args.variant)]))
    print("| request | mode | " + " | ".join(names) + (" | sanctum / relay |" if "relay" in names else " |"))
    print("|---|---|" + "---:|" * (len(names) + ("relay" in names)))
    for row in rows:
        for mode in ("plain", "stream"):
            med = {n: statistics.median(cpu[(row.body.name, mode, n)]) for n in names}
            ratio = f" {med['sanctum'] / med['relay']:.2f}x |" if "relay" in med else ""
            print(f"| {row.body.name} | {mode} | " + " | ".join(f"{med[n]:.3f}" for n in names) + f" |{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
