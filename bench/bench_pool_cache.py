"""How much of a correction round's prompt a pool of two llama-servers serves from its prompt cache, with every
round of a request on one backend (upstreams/affinity.py) and with the rounds rotated round robin (as before).

    flock /tmp/sanctum-llama.lock python bench/bench_pool_cache.py [--requests N] [--llama-server PATH] [--model GGUF]

Requests ask a small model (SmolLM2-135M by default) for a call with tool_choice "required" and a strict schema,
so most need correction rounds; `on_surrender = "content"` keeps the answer of the last round, whose llama.cpp
`timings` say how many prompt tokens came from the cache (`cache_n`) and how many were computed (`prompt_n`).
Every request is a conversation of its own (its own system text), in both modes. Writes
bench/results/pool_cache.md.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sanctum_proxy.app import create_app  # noqa: E402
from sanctum_proxy.config import load_settings  # noqa: E402
from sanctum_proxy.upstreams import affinity  # noqa: E402

CACHE = Path.home() / ".cache" / "sanctum-proxy"
RESULTS = Path(__file__).parent / "results" / "pool_cache.md"
TOOL = {"type": "function", "function": {"name": "book_flight", "description": "Book a flight", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["origin", "destination", "date", "seats"],
    "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                   "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                   "seats": {"type": "integer", "minimum": 1}}}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_servers(binary: str, model: str) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    ports = [free_port(), free_port()]
    children = [subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(p), "-c", "4096",
                                  "-t", "1", "-np", "1", "--jinja"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for p in ports]
    for port in ports:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    return children, [f"http://127.0.0.1:{p}/v1" for p in ports]


def proxy(urls: list[str]) -> str:
    settings = load_settings({"upstreams": [{"name": "pool", "urls": urls}], "traces_path": ":memory:",
                              "probe_capabilities": False, "log_level": "warning"})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def shares(url: str, mode: str, wanted: int) -> list[float]:
    """The cache share of the last round's prompt of `wanted` requests that took more than one round."""
    found: list[float] = []
    for i in range(wanted * 4):
        system = f"You are travel agent {mode}-{i}. " + "Always be polite and precise. " * 20
        body = {"model": "smollm2", "max_tokens": 60, "temperature": 0.8, "tools": [TOOL], "tool_choice": "required",
                "sanctum": {"constrain": "off", "on_surrender": "content"}, "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Book {i % 3 + 1} seats from Oslo to Rome on 2026-03-1{i % 9}."}]}
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
        timings = r.json().get("timings") if r.status_code == 200 else None
        if int(r.headers.get("x-sanctum-rounds") or 0) >= 2 and isinstance(timings, dict):
            found.append(timings["cache_n"] / max(1, timings["cache_n"] + timings["prompt_n"]))
        if len(found) >= wanted:
            break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--llama-server", default=str(CACHE / "llama-server-11434.0.0" / "llama-server"))
    parser.add_argument("--model", default=str(CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    children, urls = llama_servers(args.llama_server, args.model)
    try:
        url = proxy(urls)
        kept = shares(url, "affinity", args.requests)
        pin = affinity.pin
        affinity.pin = lambda *a, **k: None  # type: ignore[assignment]  # every round rotates, as before
        rotated = shares(url, "round-robin", args.requests)
        affinity.pin = pin
    finally:
        for child in children:
            child.terminate()
            child.wait(10)
    lines = ["# A correction round's prompt served from cache, pool of two llama-servers", "",
             f"`python bench/bench_pool_cache.py --requests {args.requests}` (SmolLM2-135M Q4_1, -np 1, 2 shared "
             "cores). The share is `cache_n / (cache_n + prompt_n)` of the last round of requests that took two "
             "rounds or more.", "", "| rounds go to | requests | mean share | each |", "|---|---:|---:|---|"]
    for name, found in (("one backend per request (affinity)", kept), ("round robin per round (before)", rotated)):
        mean = statistics.mean(found) if found else 0.0
        lines.append(f"| {name} | {len(found)} | {mean:.2f} | {' '.join(f'{s:.2f}' for s in found)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
