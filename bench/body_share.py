"""Local agents at once: K clients on one address (127.0.0.1, no keys), each on its own connection, post
streamed chat requests of S bytes together, R rounds; how many are refused because "bodies still arriving"
from that one client passed its share of `max_connections`.

    python bench/body_share.py [--before DIR] [--quick]

A proxy process per row (`python -m sanctum_proxy`, httptools), the scripted fake upstream (tests/fakes) in this
process. `--before DIR`: a tree holding another `sanctum_proxy` (`git archive COMMIT sanctum_proxy | tar -x -C
DIR`), measured in the same run. Writes bench/results/body_share.md (not with --quick).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import ServerThread  # noqa: E402
from tests.fakes.upstream import FakeUpstream, Step, completion, content_chunks  # noqa: E402

ROWS = [(64, 8, 500_000, 5), (64, 32, 500_000, 3), (512, 64, 500_000, 3), (512, 160, 50_000, 2),
        (512, 160, 500_000, 2), (512, 300, 50_000, 1)]  # max_connections, clients, body bytes, rounds
QUICK = [(64, 32, 100_000, 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one(url: str, size: int) -> int:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x" * size}]}
    async with httpx.AsyncClient(timeout=60) as client:
        return (await client.post(url + "/v1/chat/completions", json=body)).status_code


async def rounds(url: str, clients: int, size: int, count: int) -> list[int]:
    found: list[int] = []
    for _ in range(count):
        found += await asyncio.gather(*(one(url, size) for _ in range(clients)))
    return found


def measure(tree: Path, upstream: str, row: tuple[int, int, int, int]) -> tuple[int, int, float]:
    """(refused, sent, seconds) with the proxy from `tree`."""
    limit, clients, size, count = row
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree), "SANCTUM_MAX_CONNECTIONS": str(limit),
           "SANCTUM_TRACES_PATH": ":memory:", "SANCTUM_MAX_CONCURRENT_REQUESTS": "100000",
           "SANCTUM_PROBE_CAPABILITIES": "false"}
    proxy = subprocess.Popen([sys.executable, "-m", "sanctum_proxy", "--upstream", upstream, "--port", str(port),
                              "--log-level", "warning"], env=env, cwd=tree, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        start = time.perf_counter()
        found = asyncio.run(rounds(url, clients, size, count))
        return sum(1 for status in found if status == 503), len(found), time.perf_counter() - start
    finally:
        proxy.terminate()
        proxy.wait()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--before", type=Path, help="a tree with another sanctum_proxy, measured beside this one")
    args.add_argument("--quick", action="store_true")
    given = args.parse_args()
    trees = ([("before", given.before)] if given.before else []) + [("this tree", ROOT)]
    fake = FakeUpstream(responder=lambda body: Step(chunks=content_chunks("answer " * 20), chunk_delay=0.005)
                        if body.get("stream") else Step(body=completion("ok")))
    lines = ["| max_connections (share) | clients at once | body | rounds | "
             + " | ".join(f"refused, {name}" for name, _ in trees) + " |",
             "|---|---|---|---|" + "---|" * len(trees)]
    with ServerThread(fake.app()) as upstream:
        for row in QUICK if given.quick else ROWS:
            got = [measure(tree, upstream.url + "/v1", row) for _, tree in trees]
            cells = " | ".join(f"{refused} of {sent} ({seconds:.1f} s)" for refused, sent, seconds in got)
            lines.append(f"| {row[0]} ({max(2, row[0] // 4)}) | {row[1]} | {row[2] // 1000} KB | {row[3]} | {cells} |")
            print(lines[-1], flush=True)
    if not given.quick:
        (ROOT / "bench" / "results" / "body_share.md").write_text(
            "# Bodies still arriving from one local client\n\n`python bench/body_share.py --before DIR`: "
            + __doc__.split("\n\n")[0].replace("\n", " ") + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
