"""Soak: many concurrent clients against a real proxy process for a while; no answer may be lost, wrong or
corrupted, and the proxy's memory must stay flat.

    python bench/soak.py                      500 clients, 10 minutes
    python bench/soak.py --quick              50 clients, 20 seconds (what CI runs, via tests/test_soak.py)
    python bench/soak.py --clients 200 --duration 120 --json out.json

Three processes: a scripted upstream (this file with --upstream-only), `python -m sanctum_proxy` in front of
it, and the clients (asyncio + httpx, one event loop). Each request names a scenario and a seed in its last
user message ("soak <kind> <seed>"); the upstream answers from that alone, so the client knows the answer:

    text     plain content (streamed in pieces of seed-dependent sizes)
    call     a valid native call: the client must get it byte-identical (same id, same arguments text)
    mend     a native call with Python-style arguments ({'city': 'X', 'days': 3,}): repaired locally
    hermes   the call written as <tool_call> markup in content: parsed into tool_calls
    retry    an unknown tool name first, a valid call after the correction round (2 upstream rounds)
    error    the upstream answers 500: the client gets 500 upstream_error with the upstream's message
    bad      a request without `messages`: 400 invalid_request_error (the upstream never sees it)

each streamed and not (but `bad`). What "correct" means, exactly:
1. Semantics, from the scenario alone: status; content; each call's name and parsed arguments (and for
   `call` the id and arguments text byte for byte); finish_reason; rounds; error type and message. A stream
   must end with `data: [DONE]` and be accumulable the way the OpenAI SDK does it.
2. Bytes: seeds come from a small space, so every (kind, stream, seed) recurs. The first answer of each
   becomes the reference; every later one must equal it after the fields that are random by design are
   masked (ids the proxy makes: `call_` + 24 hex, `chatcmpl-` + 32 hex, 32-hex trace ids; `created`).
   A stream is compared as its list of `data:` events (comments such as keep-alives are skipped).
Lost = a request with no complete answer (transport error, cut stream, timeout). RSS of the proxy is sampled
every few seconds; flat = the last quarter's mean is within 15% + 25 MiB of the second quarter's.
Exit status 0 only when nothing was lost or wrong and RSS was flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("text", "call", "mend", "hermes", "retry", "error", "bad", "hostile")
# Hostile requests (issue 18), by seed: each must be a 400 naming its field, and nothing fetched or read.
HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}}}]}),
    ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "http://169.254.169.254/latest/meta-data"}}}}}]}),
    ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)(a+)+\\1"}}}}}]}),
    ("tool_choice", {"tool_choice": {"function": 5}}),
    ("stream_options", {"stream": True, "stream_options": "x"}),
]
SEEDS = 48
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu é ü 東京 🙂 \"quoted\" "
         "back\\slash "
         "<b> { } [ ] ,").split(" ")
CITIES = ("Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Quito", "São Paulo", "Zürich")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"], "additionalProperties": False}}}]
RANDOM = re.compile(r"^(call_[0-9a-f]{24}|chatcmpl-[0-9a-f]{32}|[0-9a-f]{32})$")


# --- what each scenario is (the upstream and the checker both read these) ------------------------------

def text_of(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 400)))


def args_of(seed: int) -> dict[str, Any]:
    rng = random.Random(seed * 7 + 1)
    return {"city": rng.choice(CITIES), "days": rng.randint(0, 14)}


def pieces(text: str, seed: int) -> list[str]:
    rng, out, i = random.Random(seed), [], 0
    while i < len(text):
        n = rng.randint(1, 12)
        out.append(text[i:i + n])
        i += n
    return out


def upstream_answer(kind: str, seed: int, round_no: int) -> tuple[int, dict[str, Any]]:
    """(status, message or error body) for one upstream round."""
    args = args_of(seed)
    if kind == "text":
        return 200, {"role": "assistant", "content": text_of(seed)}
    if kind == "error":
        return 500, {"error": {"code": 500, "message": f"boom {seed}", "type": "server_error"}}
    if kind == "hermes":
        call = json.dumps({"name": "get_weather", "arguments": args}, ensure_ascii=False)
        return 200, {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"}
    if kind == "mend":
        arguments = "{" + ", ".join(f"'{k}': {v!r}" for k, v in args.items()) + ",}"
    else:
        arguments = json.dumps(args, ensure_ascii=False)
    name = "lookup_weather_now" if kind == "retry" and round_no == 1 else "get_weather"
    call = {"id": f"call_up_{seed}", "type": "function", "function": {"name": name, "arguments": arguments}}
    return 200, {"role": "assistant", "content": None, "tool_calls": [call]}


# --- the scripted upstream ----------------------------------------------------------------------------

def upstream_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        first_user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
        _, kind, seed_text = first_user.split()
        seed = int(seed_text)
        # A correction round carries the rejected turn, or (constrained, the default) the answer schema.
        rounds = 1 + sum(1 for m in body["messages"] if m.get("role") in ("assistant", "tool")) \
            + ("response_format" in body)
        status, message = upstream_answer(kind, seed, min(rounds, 2))
        if status != 200:
            return JSONResponse(message, status_code=status)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 11, "completion_tokens": seed + 1, "total_tokens": seed + 12}
        base = {"id": f"chatcmpl-up{seed}", "created": 1700000000 + seed, "model": "soak-model"}
        if not body.get("stream"):
            return JSONResponse({**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]})
        return StreamingResponse(sse(base, message, finish, usage, seed), media_type="text/event-stream")

    async def sse(base: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, Any],
                  seed: int) -> Any:
        def event(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> bytes:
            chunk = {**base, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": reason}], **extra}
            return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"

        yield event({"role": "assistant", "content": None})
        for i, piece in enumerate(pieces(message.get("content") or "", seed)):
            if i % 16 == 15:
                await asyncio.sleep(0)
            yield event({"content": piece})
        for index, call in enumerate(message.get("tool_calls") or []):
            yield event({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            for piece in pieces(call["function"]["arguments"], seed):
                yield event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield event({}, finish)
        yield b"data: " + json.dumps({**base, "object": "chat.completion.chunk", "choices": [],
                                      "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def not_found(request: Request) -> Response:
        return JSONResponse({"error": {"message": "not found"}}, status_code=404)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "soak-model", "object": "model"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/models", models), Route("/props", not_found),
                             Route("/api/show", not_found, methods=["POST"])])


# --- checking answers -----------------------------------------------------------------------------------

class Wrong(Exception):
    pass


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise Wrong(what)


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: 0 if k == "created" else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str) and RANDOM.match(value):
        return "<random>"
    return value


def accumulate(events: list[Any]) -> dict[str, Any]:
    """What the OpenAI SDK's stream helper makes of the chunks: one message, finish_reason, usage."""
    content, calls, finish, usage, sanctum = "", {}, None, None, None
    once = bool(events) and events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    expect(once, "stream without one final [DONE]")
    for chunk in events[:-1]:
        expect(isinstance(chunk, dict) and "error" not in chunk, f"error event in stream: {chunk}")
        usage = chunk.get("usage") or usage
        sanctum = chunk.get("sanctum") or sanctum
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for d in delta.get("tool_calls") or []:
                call = calls.setdefault(d["index"], {"id": None, "name": None, "arguments": ""})
                if d.get("id"):
                    expect(call["id"] is None, "a call id sent twice")
                    call["id"], call["name"] = d["id"], d["function"]["name"]
                call["arguments"] += (d.get("function") or {}).get("arguments") or ""
    expect(sorted(calls) == list(range(len(calls))), "call indices with gaps")
    tool_calls = [{"id": c["id"], "type": "function",
                   "function": {"name": c["name"], "arguments": c["arguments"]}}
                  for _, c in sorted(calls.items())]
    return {"message": {"content": content or None, "tool_calls": tool_calls or None},
            "finish_reason": finish, "usage": usage, "sanctum": sanctum}


def check(kind: str, seed: int, status: int, answer: dict[str, Any]) -> None:
    """Semantic check of one answer (a chat.completion, or a stream accumulated) against the scenario."""
    if kind == "bad":
        expect(status == 400 and answer["error"]["type"] == "invalid_request_error",
               f"bad: {status} {answer}")
        return
    if kind == "hostile":
        field = HOSTILE[seed % len(HOSTILE)][0]
        expect(status == 400 and answer["error"]["param"] == field, f"hostile: {status} {answer}")
        expect("root:" not in json.dumps(answer), "a file's content came back")
        return
    if kind == "error":
        expect(status == 500 and answer["error"]["type"] == "upstream_error", f"error: {status} {answer}")
        expect(f"boom {seed}" in answer["error"]["message"], "upstream message lost")
        return
    expect(status == 200, f"status {status}: {str(answer)[:300]}")
    choice = answer if "message" in answer else answer["choices"][0]
    message, finish = choice["message"], choice["finish_reason"]
    rounds = answer["sanctum"]["rounds"]
    calls = message.get("tool_calls") or []
    if kind == "text":
        expect(message.get("content") == text_of(seed) and not calls and finish == "stop", "text differs")
        expect(rounds == 1, "text took more than one round")
        return
    expect(len(calls) == 1 and finish == "tool_calls" and not message.get("content"), f"calls: {message}")
    fn = calls[0]["function"]
    same = fn["name"] == "get_weather" and json.loads(fn["arguments"]) == args_of(seed)
    expect(same, f"call differs: {fn}")
    if kind == "call":
        expect(calls[0]["id"] == f"call_up_{seed}", "native call id changed")
        expect(fn["arguments"] == json.dumps(args_of(seed), ensure_ascii=False), "native arguments changed")
    expect(rounds == (2 if kind == "retry" else 1), f"{rounds} rounds for {kind}")


def parse_sse(raw: bytes) -> list[Any]:
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:]
                events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


@dataclass
class Tally:
    ok: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    references: dict[tuple[str, bool, int], Any] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def note(self, bucket: Counter[str], key: str, why: str) -> None:
        bucket[key] += 1
        if len(self.samples) < 20:
            self.samples.append(f"{key}: {why}")


async def one(client: Any, tally: Tally, kind: str, stream: bool, seed: int) -> None:
    import httpx

    key = f"{kind}/{'stream' if stream else 'plain'}"
    body: dict[str, Any] = {"model": "soak-model", "stream": stream, "tools": TOOLS,
                            "messages": [{"role": "user", "content": f"soak {kind} {seed}"}]}
    if kind == "bad":
        del body["messages"]
    if kind == "hostile":
        body.update(HOSTILE[seed % len(HOSTILE)][1])
    start = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            raw = await response.aread()
            is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
    except httpx.HTTPError as exc:
        tally.note(tally.lost, key, f"{type(exc).__name__}: {exc}")
        return
    tally.latencies.append(time.perf_counter() - start)
    try:
        document = parse_sse(raw) if is_sse else json.loads(raw)
        answer = accumulate(document) if is_sse else document
        check(kind, seed, response.status_code, answer)
    except (Wrong, ValueError, KeyError, TypeError, IndexError) as exc:
        bucket = tally.lost if is_sse and b"[DONE]" not in raw and b'"error"' not in raw else tally.wrong
        tally.note(bucket, key, f"seed {seed}: {exc}")
        return
    shape = (response.status_code, masked(document))
    reference = tally.references.setdefault((kind, stream, seed), shape)
    if reference != shape:
        tally.note(tally.wrong, key, f"seed {seed}: differs from the first answer of the same request")
        return
    tally.ok[key] += 1


async def client_loop(n: int, url: str, deadline: float, tally: Tally) -> None:
    import httpx

    rng = random.Random(n)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120, connect=30)) as client:
        while time.monotonic() < deadline:
            kind = rng.choice(KINDS)
            stream = kind not in ("bad", "hostile") and rng.random() < 0.5
            await one(client, tally, kind, stream, rng.randrange(SEEDS))


# --- processes and RSS ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready in {seconds} s")


async def sample_rss(pid: int, deadline: float, every: float, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    while time.monotonic() < deadline:
        samples.append((time.monotonic() - start, rss_mib(pid)))
        await asyncio.sleep(every)
    samples.append((time.monotonic() - start, rss_mib(pid)))


def flat(samples: list[tuple[float, float]]) -> tuple[bool, float, float]:
    values = [v for _, v in samples]
    quarter = max(1, len(values) // 4)
    warm = values[quarter:2 * quarter] or values[:1]
    last = values[-quarter:]
    warm_mean, last_mean = sum(warm) / len(warm), sum(last) / len(last)
    return last_mean <= warm_mean * 1.15 + 25, warm_mean, last_mean


async def drive(clients: int, duration: float, url: str,
                proxy_pid: int) -> tuple[Tally, list[tuple[float, float]]]:
    tally, samples = Tally(), []
    deadline = time.monotonic() + duration
    every = max(0.5, duration / 60)
    await asyncio.gather(sample_rss(proxy_pid, deadline, every, samples),
                         *(client_loop(n, url, deadline, tally) for n in range(clients)))
    return tally, samples


def run(clients: int, duration: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    up_port, proxy_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        upstream = subprocess.Popen([sys.executable, __file__, "--upstream-only", str(up_port)], env=env)
        proxy = subprocess.Popen(
            [sys.executable, "-m", "sanctum_proxy", "--upstream", f"http://127.0.0.1:{up_port}/v1",
             "--port", str(proxy_port), "--spell-calling", "native", "--log-level", "warning"],
            env={**env, "SANCTUM_MAX_CONCURRENT_REQUESTS": str(clients * 2),
                 "SANCTUM_TRACES_PATH": str(Path(tmp) / "traces.db")})
        try:
            wait_ready(f"http://127.0.0.1:{up_port}/v1/models", upstream)
            wait_ready(f"http://127.0.0.1:{proxy_port}/healthz", proxy)
            url = f"http://127.0.0.1:{proxy_port}"
            tally, samples = asyncio.run(drive(clients, duration, url, proxy.pid))
            alive = proxy.poll() is None
        finally:
            for proc in (proxy, upstream):
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    is_flat, warm, last = flat(samples)
    lat = sorted(tally.latencies) or [0.0]
    return {"clients": clients, "duration_s": duration, "requests": sum(tally.ok.values()),
            "lost": sum(tally.lost.values()), "wrong": sum(tally.wrong.values()),
            "ok_by_kind": dict(tally.ok),
            "lost_by_kind": dict(tally.lost), "wrong_by_kind": dict(tally.wrong), "samples": tally.samples,
            "rss_mib": {"second_quarter": round(warm, 1), "last_quarter": round(last, 1),
                        "max": round(max(v for _, v in samples), 1), "flat": is_flat},
            "latency_s": {"p50": round(lat[len(lat) // 2], 3), "p99": round(lat[int(len(lat) * 0.99)], 3)},
            "proxy_alive": alive,
            "passed": alive and is_flat and not tally.lost and not tally.wrong and sum(tally.ok.values()) > 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds")
    parser.add_argument("--quick", action="store_true", help="50 clients for 20 s (CI)")
    parser.add_argument("--json", help="write the result here too")
    parser.add_argument("--upstream-only", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_only:
        import uvicorn

        uvicorn.run(upstream_app(), host="127.0.0.1", port=args.upstream_only, log_level="warning",
                    backlog=4096)
        return 0
    clients, duration = (50, 20.0) if args.quick else (args.clients, args.duration)
    result = run(clients, duration)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
