"""cProfile of sanctum-proxy's streamed and non-streamed chat path over the canned upstream (bench/canned_upstream.py).

    python bench/profile_paths.py [--requests N] [--top K] [--out DIR]

The proxy runs in this process (uvicorn in a thread, default settings, traces in memory) so the profiler sees
its event loop; one client sends N tool-call requests of each kind, one at a time, after a warm-up. Prints, per
path, sanctum_proxy's functions by cumulative time per request, and writes the raw profiles
(`plain.prof`, `stream.prof`, for snakeviz or flameprof) to --out. Profiled times are inflated by cProfile
itself: read them as shares of the path, not as latencies (bench/bench_overhead.py measures those).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import servers
import uvicorn
from canned_upstream import MODEL, TOOLS

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def profile(upstream: str, stream: bool, requests: int) -> tuple[cProfile.Profile, float]:
    app = create_app(load_settings({"upstream": upstream, "traces_path": ":memory:"}))
    config = uvicorn.Config(app, host="127.0.0.1", port=servers.free_port(), log_level="warning")
    server = uvicorn.Server(config)
    profiler = cProfile.Profile()
    warm = threading.Event()

    def serve() -> None:
        server.run()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{config.port}/v1/chat/completions"
    body: dict[str, Any] = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "stream": stream}
    with httpx.Client(timeout=30) as client:

        def one() -> None:
            with client.stream("POST", url, json=body) as answer:
                for _ in answer.iter_bytes():
                    pass
                assert answer.status_code == 200

        for _ in range(20):
            one()
        # The server's thread is the one to profile: sys.setprofile reaches it through threading's hook
        # only for threads started later, so the profiler is switched on from inside its event loop.
        loop = server_loop(server)
        loop.call_soon_threadsafe(lambda: (profiler.enable(), warm.set()))
        warm.wait(10)
        started = time.perf_counter()
        for _ in range(requests):
            one()
        elapsed = time.perf_counter() - started
        done = threading.Event()
        loop.call_soon_threadsafe(lambda: (profiler.disable(), done.set()))
        done.wait(10)
    server.should_exit = True
    thread.join(10)
    return profiler, elapsed / requests * 1000


def server_loop(server: uvicorn.Server) -> Any:
    """The event loop uvicorn serves on (its listening socket's)."""
    return server.servers[0].get_loop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, default=Path("/tmp"))
    args = p.parse_args(argv)
    with servers.canned_upstream() as upstream:
        for name, stream in (("plain", False), ("stream", True)):
            profiler, ms = profile(upstream.url, stream, args.requests)
            profiler.dump_stats(args.out / f"{name}.prof")
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            total = stats.total_tt  # type: ignore[attr-defined]
            print(f"## {name}: {args.requests} requests, {ms:.2f} ms each at the client (profiled), "
                  f"{total / args.requests * 1000:.2f} ms of server-thread time each (idle in select included)")
            stats.sort_stats("cumulative").print_stats("sanctum_proxy", args.top)
            print(text.getvalue().split("\n", 6)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
