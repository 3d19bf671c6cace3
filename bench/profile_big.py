"""cProfile of sanctum-proxy on an agent's big request (bench/agent_bodies.py) over the canned upstream: where
the time of one request goes, by the proxy's functions and by kind of work (decode, checks, re-encode, trace).

    python bench/profile_big.py [--agent qwen-code] [--rounds 0] [--requests N] [--top K] [--out FILE]

The proxy runs in this process (uvicorn in a thread, `--spell-calling native`, traces in memory); one client
sends N requests plain and N streamed after a warm-up. cProfile inflates every call: read shares, not latencies.
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
from agent_bodies import chat_turn, encode, grown
from profile_paths import server_loop

from sanctum_proxy.app import create_app
from sanctum_proxy.config import load_settings

KINDS = {  # kind of work -> substrings of "file:function" that belong to it (first match wins)
    "trace copy / recorder": ("state/", "traces", "recorder"),
    "decode (JSON in)": ("orjson.loads", "json.loads", "decoder.py", "msgspec", "json_body", "read_json"),
    "re-encode (JSON out)": ("orjson.dumps", "json.dumps", "encoder.py", "upstream_body", "Fragment"),
    "checks (request, tools)": ("chat_request", "toolbox", "validate", "jsonschema", "repair/", "protocols/"),
    "HTTP (uvicorn, starlette, aiohttp)": ("uvicorn", "starlette", "aiohttp", "h11", "httptools", "fastapi"),
}


def serve(upstream: str) -> tuple[uvicorn.Server, threading.Thread, str]:
    app = create_app(load_settings({"upstream": upstream, "traces_path": ":memory:", "spell_calling": "native"}))
    config = uvicorn.Config(app, host="127.0.0.1", port=servers.free_port(), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{config.port}/v1/chat/completions"


def profile(server: uvicorn.Server, url: str, body: bytes, requests: int) -> tuple[cProfile.Profile, float]:
    profiler = cProfile.Profile()
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as client:

        def one() -> None:
            with client.stream("POST", url, content=body) as answer:
                for _ in answer.iter_bytes():
                    pass
                assert answer.status_code == 200

        for _ in range(20):
            one()
        loop, on = server_loop(server), threading.Event()
        loop.call_soon_threadsafe(lambda: (profiler.enable(), on.set()))
        on.wait(10)
        started = time.perf_counter()
        for _ in range(requests):
            one()
        elapsed = time.perf_counter() - started
        off = threading.Event()
        loop.call_soon_threadsafe(lambda: (profiler.disable(), off.set()))
        off.wait(10)
    return profiler, elapsed / requests * 1000


def by_kind(stats: pstats.Stats, requests: int) -> list[str]:
    """Own time (tottime) per request summed by kind of work."""
    totals: dict[str, float] = {}
    for (file, _, function), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{file}:{function}"
        kind = next((k for k, marks in KINDS.items() if any(m in where for m in marks)), "other (event loop, ...)")
        totals[kind] = totals.get(kind, 0.0) + tottime
    every = sum(totals.values())
    return [f"| {k} | {v / requests * 1000:.3f} | {v / every * 100:.0f}% |"
            for k, v in sorted(totals.items(), key=lambda kv: -kv[1])]


def report(name: str, profiler: cProfile.Profile, ms: float, requests: int, top: int) -> str:
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    listing = text.getvalue().split("\n", 6)[-1]
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats("sanctum_proxy", top)
    mine = text.getvalue().split("\n", 6)[-1]
    return "\n".join([f"## {name}: {ms:.2f} ms a request at the client (profiled)", "",
                      "| kind of work | own ms a request | share |", "|---|---:|---:|", *by_kind(stats, requests),
                      "", f"Top {top} by own time:", "", "```", listing.strip(), "```", "",
                      f"sanctum_proxy by cumulative time (top {top}):", "", "```", mine.strip(), "```", ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", default="qwen-code")
    p.add_argument("--rounds", type=int, default=0, help="tool rounds appended to the agent's turn")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, help="write the report here (markdown)")
    args = p.parse_args(argv)
    body: dict[str, Any] = grown(chat_turn(args.agent), args.rounds) if args.rounds else chat_turn(args.agent)
    parts = [f"# Where the time goes: {args.agent}'s turn, {len(encode(body, False)) / 1000:.0f} KB, "
             f"{len(body['tools'])} tools", "", f"`python bench/profile_big.py {' '.join(sys.argv[1:])}`", ""]
    with servers.canned_upstream() as upstream:
        server, thread, url = serve(upstream.url)
        try:
            for name, stream in (("plain", False), ("streamed", True)):
                profiler, ms = profile(server, url, encode(body, stream), args.requests)
                parts.append(report(name, profiler, ms, args.requests, args.top))
        finally:
            server.should_exit = True
            thread.join(10)
    text = "\n".join(parts)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
