"""The bare relay against the relay that decodes and encodes what passes (bench/relay.py --parse), under 16 clients:
requests a second, and each process's CPU a request under that load (the client, the canned upstream, the relay).
On two cores throughput follows the sum, so this shows how much of it decoding the body alone takes.

    cd bench && python relay_floor.py [--rows agents] [--only qwen-code] [--cells 4] [--seconds 2] [--mode plain]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys

import servers
from agent_rows import cpu_ms, rows_of
from loadgen import many_clients, one_client


def own_cpu_ms() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return (used.ru_utime + used.ru_stime) * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="agents", help="agents | sizes | turns")
    p.add_argument("--only", default="qwen-code turn", help="rows whose name contains this")
    p.add_argument("--cells", type=int, default=4, help="throughput cells per relay, alternated")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--mode", choices=("plain", "stream"), default="plain")
    args = p.parse_args(argv)
    stream = args.mode == "stream"
    print("| request | cell | relay | requests/s | client ms | upstream ms | relay ms |")
    print("|---|---:|---|---:|---:|---:|---:|")
    with servers.canned_upstream() as upstream:
        relays = {"relay": servers.relay(upstream.url).start(),
                  "relay parsing": servers.relay(upstream.url, parse=True).start()}
        try:
            for row in [r for r in rows_of(args.rows) if args.only in r.body.name]:
                raw = row.direct_body.stream if stream else row.direct_body.plain
                path = row.direct_body.path
                for child in relays.values():
                    asyncio.run(one_client(child.url, path, raw, 20, stream))
                for cell in range(args.cells):
                    order = list(relays) if cell % 2 == 0 else list(reversed(relays))
                    for name in order:
                        child = relays[name]
                        mine, up, its = own_cpu_ms(), cpu_ms(upstream.pid), cpu_ms(child.pid)
                        rps, _ = asyncio.run(many_clients(child.url, path, raw, args.clients, args.seconds, stream))
                        n = max(rps * args.seconds, 1)
                        print(f"| {row.body.name} | {cell + 1} | {name} | {rps:.0f} | {(own_cpu_ms() - mine) / n:.3f} "
                              f"| {(cpu_ms(upstream.pid) - up) / n:.3f} | {(cpu_ms(child.pid) - its) / n:.3f} |",
                              flush=True)
        finally:
            for child in relays.values():
                child.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
