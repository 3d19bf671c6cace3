"""What sanctum-proxy adds in front of a fast upstream, against the same upstream reached directly and through
a LiteLLM proxy (default settings), in interleaved rounds.

    python bench/bench_overhead.py [--quick] [--rounds R] [--no-litellm] [--litellm PATH] [--workers N]
    flock /tmp/sanctum-llama.lock python bench/bench_overhead.py --llama     # plus the real llama-server row
    python bench/bench_overhead.py --otel-off --rows '' --no-litellm  # OpenTelemetry off against no telemetry code

Upstream: bench/canned_upstream.py (raw asyncio, canned answers). Cases: non-streaming with a valid tool call
(the proxy validates it against the offered tool), streaming with content and a call. One client for latency
(p50/p99, added ms against direct); 16 and 64 clients for throughput (ratio to direct, same round).
Every figure is relative to the direct baseline of the same round; writes bench/results/overhead.{md,png}.
`--llama`: also a real llama-server on the embedded SmolLM2 model (sanctum_proxy/upstreams/embedded.py), time to
first token reached directly and through sanctum-proxy, alternating request by request, so the proxy's share of
what a user waits for is visible (one llama-server at a time on a shared machine: run it under the lock above).
LiteLLM is a bench-only requirement (bench/requirements-litellm.txt, its own venv: see bench/README.md);
without it that column is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agent_rows
import otel_off
import servers
from canned_upstream import CITY_ARGS, MODEL, TOOLS
from loadgen import Connection, many_clients, one_client, percentile

RESULTS = Path(__file__).parent / "results"
PATH = "/chat/completions"
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris?"}]
CALL = json.dumps({"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "temperature": 0}).encode()
STREAM = json.dumps({"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "temperature": 0,
                     "stream": True}).encode()
THINK_MS = 20  # the shortest answer of a fast local model: the realistic floor of an upstream's time
CALL_THINKING = json.dumps({"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "temperature": 0,
                            "user": f"think-ms-{THINK_MS}"}).encode()


LLAMA_STREAM = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "Say hello to Paris."}],
                           "temperature": 0, "max_tokens": 16, "stream": True}).encode()


@dataclass
class Samples:
    """Everything measured for one target, kept per round."""

    call_ms: list[list[float]] = field(default_factory=list)
    ttft_ms: list[list[float]] = field(default_factory=list)
    stream_ms: list[list[float]] = field(default_factory=list)
    own_call_ms: list[float] = field(default_factory=list)  # the proxy's x-sanctum-overhead-ms headers
    own_stream_ms: list[float] = field(default_factory=list)
    rps: dict[str, list[float]] = field(default_factory=dict)  # "call@16" -> one figure per round
    failed: int = 0


def check(name: str, url: str) -> None:
    """One answer of each kind must carry the call intact, or the timings mean nothing."""
    async def both() -> tuple[Any, Any]:
        conn = Connection(url)
        try:
            plain = await conn.post(conn.request_bytes(PATH, CALL))
            streamed = await conn.post(conn.request_bytes(PATH, STREAM), stream=True)
        finally:
            conn.close()
        return plain, streamed

    plain, streamed = asyncio.run(both())
    if plain.status != 200 or streamed.status != 200:
        raise RuntimeError(f"{name}: HTTP {plain.status}/{streamed.status}: {plain.body[:300]!r}")
    call = json.loads(plain.body)["choices"][0]["message"]["tool_calls"][0]["function"]
    if call["name"] != "get_weather" or json.loads(call["arguments"]) != json.loads(CITY_ARGS):
        raise RuntimeError(f"{name}: the tool call did not come through: {call}")
    content, name_seen, arguments = "", "", ""
    for line in streamed.body.decode().splitlines():
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        for choice in json.loads(line[5:]).get("choices") or []:
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                name_seen += (piece.get("function") or {}).get("name") or ""
                arguments += (piece.get("function") or {}).get("arguments") or ""
    if not content or name_seen != "get_weather" or json.loads(arguments) != json.loads(CITY_ARGS):
        raise RuntimeError(f"{name}: the stream lost content or the call: "
                           f"{content!r} {name_seen!r} {arguments!r}")
    if streamed.first_token_ms is None:
        raise RuntimeError(f"{name}: no content event seen in the stream")


async def measure_round(urls: dict[str, str], samples: dict[str, Samples], args: argparse.Namespace,
                        number: int) -> None:
    names = list(urls)
    order = names[number % len(names):] + names[:number % len(names)]  # rotate who goes first
    for name in order:
        replies = await one_client(urls[name], PATH, CALL, args.requests)
        samples[name].call_ms.append([r.total_ms for r in replies])
        samples[name].own_call_ms += [r.own_ms for r in replies if r.own_ms is not None]
    for name in order:
        replies = await one_client(urls[name], PATH, STREAM, args.requests, stream=True)
        samples[name].ttft_ms.append([r.first_token_ms or r.total_ms for r in replies])
        samples[name].stream_ms.append([r.total_ms for r in replies])
        samples[name].own_stream_ms += [r.own_ms for r in replies if r.own_ms is not None]
    for clients in args.clients:
        for kind, body in (("call", CALL), ("stream", STREAM), ("think", CALL_THINKING)):
            for name in order:
                rps, failed = await many_clients(urls[name], PATH, body, clients, args.seconds,
                                                 kind == "stream")
                samples[name].rps.setdefault(f"{kind}@{clients}", []).append(rps)
                samples[name].failed += failed


async def warm_up(urls: dict[str, str]) -> None:
    for url in urls.values():
        await one_client(url, PATH, CALL, 30)
        await one_client(url, PATH, STREAM, 30, stream=True)
        await many_clients(url, PATH, CALL, 16, 0.3)


@dataclass
class LlamaRow:
    """Time to first token and whole stream (ms) on the real llama-server, direct and through sanctum-proxy."""

    ttft: dict[str, list[float]] = field(default_factory=dict)
    total: dict[str, list[float]] = field(default_factory=dict)


def llama_row(requests: int) -> LlamaRow:
    """The embedded llama-server (SmolLM2) reached directly and through sanctum-proxy, one streamed request at a
    time, alternating (the model's own time drifts with the machine's load: each pair shares it)."""
    from sanctum_proxy.upstreams.embedded import LlamaServer

    row = LlamaRow()
    with LlamaServer() as llama:
        proxy = servers.sanctum(llama.base_url).start()
        try:
            urls = {"llama-server direct": llama.base_url, "llama-server via sanctum": proxy.url}

            async def pairs() -> None:
                for url in urls.values():  # warm both (the model's first answer loads its weights); a
                    for _ in range(3):     # connection each: llama-server closes one after an event stream
                        await one_client(url, PATH, LLAMA_STREAM, 1, stream=True)
                for _ in range(requests):
                    for name, url in urls.items():
                        reply = (await one_client(url, PATH, LLAMA_STREAM, 1, stream=True))[0]
                        if reply.first_token_ms is None:
                            raise RuntimeError(f"{name}: no content in the stream: {reply.body[:300]!r}")
                        row.ttft.setdefault(name, []).append(reply.first_token_ms)
                        row.total.setdefault(name, []).append(reply.total_ms)

            asyncio.run(pairs())
        finally:
            proxy.stop()
    return row


def llama_report(row: LlamaRow) -> list[str]:
    direct, via = "llama-server direct", "llama-server via sanctum"
    lines = ["", "## A real upstream: llama-server on the embedded SmolLM2-135M, streamed, one client", "",
             f"{len(row.ttft[direct])} requests each, direct and through sanctum-proxy alternating "
             "(a short answer, no tools: what the proxy adds to a model's own time).", "",
             "| target | time to first token p50 ms | p90 ms | whole stream p50 ms |", "|---|---:|---:|---:|"]
    for name in (direct, via):
        lines.append(f"| {name} | {percentile(row.ttft[name], 0.5):.2f} | {percentile(row.ttft[name], 0.9):.2f} | "
                     f"{percentile(row.total[name], 0.5):.2f} |")
    pairs = [v - d for v, d in zip(row.ttft[via], row.ttft[direct], strict=True)]
    share = statistics.median(pairs) / percentile(row.ttft[via], 0.5) * 100
    lines += ["", f"Added to time to first token, median of the per-pair differences: {statistics.median(pairs):+.2f} "
              f"ms, {share:.1f}% of what the user waits for the first token through the proxy."]
    return lines


def run(args: argparse.Namespace) -> tuple[dict[str, Samples], dict[str, str]]:
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, servers.canned_upstream() as upstream:
        started: list[servers.Child] = []
        urls = {"direct": upstream.url}
        try:
            floor = servers.relay(upstream.url).start()
            started.append(floor)
            urls["relay"] = floor.url
            proxy = servers.sanctum(upstream.url, *args.sanctum_flag,
                                    env=otel_off.OFF_ENV if args.otel_off else None).start()
            started.append(proxy)
            urls["sanctum"] = proxy.url
            if args.otel_off:
                tree = otel_off.stripped_tree(Path(tmp))
                bare = servers.sanctum(upstream.url, *args.sanctum_flag, env=otel_off.OFF_ENV, tree=tree).start()
                started.append(bare)
                check(otel_off.STRIPPED, bare.url)
                urls[otel_off.STRIPPED] = bare.url
                pids_off = {"sanctum": proxy.pid, otel_off.STRIPPED: bare.pid}
            if args.workers > 1:
                several = servers.sanctum(upstream.url, "--workers", str(args.workers), *args.sanctum_flag).start()
                started.append(several)
                urls[f"sanctum ×{args.workers}"] = several.url
            binary = None if args.no_litellm else servers.litellm_binary(args.litellm)
            if binary is None:
                notes["litellm"] = "skipped: not installed (see bench/README.md)" if not args.no_litellm \
                    else "skipped: --no-litellm"
            else:
                try:
                    lite = servers.litellm(upstream.url, binary, Path(tmp)).start()
                    started.append(lite)
                    check("litellm", lite.url)
                    urls["litellm"] = lite.url
                except RuntimeError as exc:
                    notes["litellm"] = f"skipped: {str(exc).splitlines()[0]}"
            check("direct", upstream.url)
            check("relay", floor.url)
            check("sanctum", proxy.url)
            samples = {name: Samples() for name in urls}
            targets = {k: urls[k] for k in ("direct", "relay", "sanctum")}
            pids: dict[str, int | None] = {"direct": None, "relay": floor.pid, "sanctum": proxy.pid}
            if args.before:
                old = servers.sanctum(upstream.url, *args.sanctum_flag, tree=args.before.resolve(),
                                      env=dict(e.split("=", 1) for e in args.before_env))
                started.append(old.start())
                targets[agent_rows.BEFORE], pids[agent_rows.BEFORE] = old.url, old.pid
            if args.parsing_relay:
                parsing = servers.relay(upstream.url, parse=True)
                started.append(parsing.start())
                targets[agent_rows.PARSING], pids[agent_rows.PARSING] = parsing.url, parsing.pid
            notes["rows"] = "\n\n".join(body_rows(args, targets, pids))
            if args.rows_only:
                return samples, notes
            asyncio.run(warm_up(urls))
            for number in range(args.rounds):
                began = time.perf_counter()
                asyncio.run(measure_round(urls, samples, args, number))
                print(f"round {number + 1}/{args.rounds}: {time.perf_counter() - began:.1f}s", flush=True)
            notes["sanctum_rss_mb"] = f"{servers.rss_mb(proxy.pid):.0f}"
            if args.otel_off:
                cases = {"tool call": (PATH, CALL, False), "stream": (PATH, STREAM, True)}
                notes["otel_cpu"] = "\n".join([*otel_off.cpu_lines(urls, pids_off, cases, args.requests * 4,
                                                                   args.rounds), *otel_off.hook_lines()])
        finally:
            for child in started:
                child.stop()
    return samples, notes


def body_rows(args: argparse.Namespace, urls: dict[str, str], pids: dict[str, int | None]) -> list[str]:
    """The tables of bench/agent_rows.py: real agent bodies (and sizes, turn counts), interleaved rounds."""
    tables = []
    growth: dict[str, list[dict[str, object]]] = {}
    for kind in args.rows:
        rows = agent_rows.rows_of(kind)
        agent_rows.check(rows, urls["sanctum"])
        for number in range(args.rounds):
            began = time.perf_counter()
            asyncio.run(agent_rows.measure(rows, urls, pids, args.body_requests,
                                           args.seconds if kind == "agents" else 0, number))
            print(f"{kind} round {number + 1}/{args.rounds}: {time.perf_counter() - began:.1f}s", flush=True)
        tables.append("\n".join(agent_rows.table(rows, ROW_TITLES[kind])))
        growth[kind] = agent_rows.medians(rows)
    if not args.quick and growth and not args.parsing_relay:  # the growth record is the relay's and the proxy's
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "overhead_rows.json").write_text(json.dumps(growth, indent=1) + "\n", encoding="utf-8")
        if "sizes" in growth or "turns" in growth:
            agent_rows.plot(growth, RESULTS / "overhead_growth.png")
    return tables


ROW_TITLES = {"agents": "Real agent requests: added p50 over direct, relay and proxy interleaved",
              "sizes": "Cost against body size (one tool, the conversation grows)",
              "turns": "Cost against turn count (opencode's turn plus N tool rounds of 1.5 KB)"}


# --- report ------------------------------------------------------------------------------------------------


def pooled(rounds: list[list[float]]) -> list[float]:
    return [v for r in rounds for v in r]


def added(samples: dict[str, Samples], name: str, attr: str, q: float) -> tuple[float, float, float]:
    """(median over rounds, min, max) of the target's quantile minus direct's, both from the same round."""
    mine, base = getattr(samples[name], attr), getattr(samples["direct"], attr)
    diffs = [percentile(m, q) - percentile(b, q) for m, b in zip(mine, base, strict=True)]
    return statistics.median(diffs), min(diffs), max(diffs)


def ratios(samples: dict[str, Samples], name: str, key: str) -> tuple[float, float, float]:
    r = [m / b for m, b in zip(samples[name].rps[key], samples["direct"].rps[key], strict=True)]
    return statistics.median(r), min(r), max(r)


def header_p50(values: list[float]) -> str:
    """The p50 of a target's overhead headers, or a dash where it sends none."""
    return f"{percentile(values, 0.5):.2f}" if values else "—"


def report(samples: dict[str, Samples], notes: dict[str, str], args: argparse.Namespace) -> str:
    others = [n for n in samples if n != "direct"]
    spread = "median over rounds [min..max]"
    if not samples["direct"].call_ms:  # --rows-only
        return rows_report(notes, args)
    lines = [
        "# Proxy overhead against a direct upstream",
        "",
        f"`{shlex.join(['python', 'bench/bench_overhead.py', *args.argv])}` — "
        f"{args.rounds} interleaved rounds; "
        f"per round and target {args.requests} sequential requests per case and {args.seconds:g} s per "
        f"throughput cell. Python {platform.python_version()}, {os.cpu_count()} CPUs "
        "(shared with other work while measured: expect noise; the [min..max] over rounds shows it). "
        "Client, canned upstream and proxy are separate processes on the same machine.",
        "",
        "## One client: latency added to a non-streaming answer with a valid tool call",
        "",
        f"| target | p50 ms | p99 ms | added p50 ms ({spread}) | added p99 ms | own p50 ms (header) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in samples:
        all_ms = pooled(samples[name].call_ms)
        row = f"| {name} | {percentile(all_ms, 0.5):.2f} | {percentile(all_ms, 0.99):.2f} |"
        if name == "direct":
            lines.append(row + " (baseline) | | |")
        else:
            mid, low, high = added(samples, name, "call_ms", 0.5)
            lines.append(row + f" {mid:+.2f} [{low:+.2f}..{high:+.2f}] | "
                         f"{added(samples, name, 'call_ms', 0.99)[0]:+.2f} | {header_p50(samples[name].own_call_ms)} |")
    lines += ["", "## One client: streaming with content and a call", "",
              f"| target | time to first token p50 ms | TTFT added p50 ms ({spread}) | whole stream p50 ms | "
              "whole stream added p50 ms | own p50 ms (header) |", "|---|---:|---:|---:|---:|---:|"]
    for name in samples:
        ttft, total = pooled(samples[name].ttft_ms), pooled(samples[name].stream_ms)
        row = f"| {name} | {percentile(ttft, 0.5):.2f} |"
        if name == "direct":
            lines.append(row + f" (baseline) | {percentile(total, 0.5):.2f} | | |")
        else:
            mid, low, high = added(samples, name, "ttft_ms", 0.5)
            whole = added(samples, name, "stream_ms", 0.5)[0]
            lines.append(row + f" {mid:+.2f} [{low:+.2f}..{high:+.2f}] | {percentile(total, 0.5):.2f} | "
                         f"{whole:+.2f} | {header_p50(samples[name].own_stream_ms)} |")
    lines += ["", "## Throughput: requests per second, as a ratio to direct in the same round", "",
              "| case | clients | direct rps | "
              + " | ".join(f"{n} (× direct, {spread})" for n in others) + " |",
              "|---|---:|---:|" + "---:|" * len(others)]
    for key in samples["direct"].rps:
        kind, clients = key.split("@")
        cells = [f"{statistics.median(samples[n].rps[key]):.0f} rps, {ratios(samples, n, key)[0]:.2f}× "
                 f"[{ratios(samples, n, key)[1]:.2f}..{ratios(samples, n, key)[2]:.2f}]" for n in others]
        lines.append(f"| {CASES[kind]} | {clients} | "
                     f"{statistics.median(samples['direct'].rps[key]):.0f} | " + " | ".join(cells) + " |")
    failed = {n: s.failed for n, s in samples.items() if s.failed}
    if not samples["direct"].call_ms:
        return ""
    own = added(samples, "sanctum", "call_ms", 0.5)[0] - added(samples, "relay", "call_ms", 0.5)[0]
    own_ttft = added(samples, "sanctum", "ttft_ms", 0.5)[0] - added(samples, "relay", "ttft_ms", 0.5)[0]
    lines += ["", "`relay` is bench/relay.py, a bare FastAPI + aiohttp relay on the same uvicorn defaults: the "
              "floor of any proxy built on these parts. Of sanctum-proxy's added p50, "
              f"{own:+.2f} ms (tool call) and {own_ttft:+.2f} ms (TTFT) are above that floor.",
              "", "`own p50 ms (header)` is the p50 of sanctum-proxy's `x-sanctum-overhead-ms`: its own time from "
              "its trace's start (body read, parsed, planned) to the answer's headers, less its upstream rounds. "
              "The rest of the added p50 is the extra hop (a second connection, HTTP in uvicorn both ways, "
              "writing the body) and the work before the trace starts."]
    lines += ["", f"`upstream thinks {THINK_MS} ms`: the canned upstream waits that long before each answer (a "
              "fast local model's shortest reply), so the proxies are measured against a realistic upstream as "
              "well as against one that costs nothing.",
              "", "Targets for sanctum-proxy: added p50 ≤ 0.5 ms, throughput ≥ 0.8× direct, streaming adds "
              "≤ 1 ms to time to first token.", ""]
    if failed:
        lines.append(f"Failed requests during throughput runs: {failed}.")
    if otel_off.STRIPPED in samples:
        lines += [*off_ratios(samples), notes.get("otel_cpu", ""), ""]
    if notes.get("rows"):
        lines += [notes["rows"], ""]
    for key, value in notes.items():
        if key not in ("rows", "otel_cpu"):
            lines.append(f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def off_ratios(samples: dict[str, Samples]) -> list[str]:
    """bench/otel_off.py's section from the same rounds' figures."""
    on, bare = samples["sanctum"], samples[otel_off.STRIPPED]

    def per_round(attr: str) -> list[float]:
        return [percentile(a, 0.5) / percentile(b, 0.5)
                for a, b in zip(getattr(on, attr), getattr(bare, attr), strict=True)]

    rps = {key: [a / b for a, b in zip(on.rps[key], bare.rps[key], strict=True)] for key in on.rps}
    return otel_off.ratio_lines(per_round("call_ms"), per_round("ttft_ms"), rps)


def rows_report(notes: dict[str, str], args: argparse.Namespace) -> str:
    command = " ".join(["python bench/bench_overhead.py", *args.argv])
    return "\n".join([
        "# Proxy overhead on the agents' real requests", "",
        f"`{command}`: {args.rounds} interleaved rounds, each target {args.body_requests} sequential requests "
        f"per row and mode a round, {args.seconds:g} s per throughput cell; {os.cpu_count()} CPUs shared with "
        "other work. Added p50 is the target's p50 minus direct's in the same round; the ratio is the proxy's "
        "added p50 over the relay's (median over rounds, [min..max] of the per-round ratios); CPU is the "
        "server process's user+system time per request. The canned upstream answers a valid call of the "
        "request's first tool; the proxy runs with `--spell-calling native`."
        + (f" `{agent_rows.PARSING}` is bench/relay.py `--parse`: the relay that also decodes the request and the "
           "answer (each stream event) with orjson and encodes them again, nothing checked." * args.parsing_relay),
        "", notes.get("rows", ""), ""])


CASES = {"call": "tool call", "stream": "stream", "think": f"tool call, upstream thinks {THINK_MS} ms"}


def plot(samples: dict[str, Samples], path: Path) -> None:
    plt = servers.pyplot()
    if plt is None:
        return

    others = [n for n in samples if n != "direct"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    cases = [("call p50", "call_ms", 0.5), ("call p99", "call_ms", 0.99), ("TTFT p50", "ttft_ms", 0.5)]
    width = 0.8 / max(len(others), 1)
    for i, name in enumerate(others):
        values = [added(samples, name, attr, q)[0] for _, attr, q in cases]
        left.bar([x + i * width for x in range(len(cases))], values, width, label=name)
    left.set_xticks([x + width * (len(others) - 1) / 2 for x in range(len(cases))], [c[0] for c in cases])
    left.set_yscale("symlog", linthresh=1)
    left.set_ylabel("ms added vs direct")
    left.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    left.legend()
    keys = list(samples["direct"].rps)
    for i, name in enumerate(others):
        left_edges = [x + i * width for x in range(len(keys))]
        right.bar(left_edges, [ratios(samples, name, k)[0] for k in keys], width, label=name)
    right.set_xticks([x + width * (len(others) - 1) / 2 for x in range(len(keys))], keys)
    right.axhline(0.8, color="grey", linestyle=":", linewidth=1)
    right.set_ylabel("throughput × direct")
    right.set_ylim(0, 1.1)
    right.legend()
    fig.suptitle("sanctum-proxy overhead (ratios against direct, same rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    servers.exit_on_sigterm()
    args = parse(argv)
    samples, notes = run(args)
    text = report(samples, notes, args)
    if args.llama:
        text += "\n".join(llama_report(llama_row(args.llama_requests))) + "\n"
    print(text)
    if args.quick:
        return 0  # a smoke run never overwrites the recorded results
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "overhead" if args.workers == 1 else f"overhead_workers{args.workers}"  # the main record stays
    if args.otel_off:
        name = "overhead_otel_off"
    if args.rows_only:
        name = "overhead_" + "_".join(args.rows) + "_parsing" * args.parsing_relay
    (RESULTS / f"{name}.md").write_text(text, encoding="utf-8")
    if not args.rows_only and not args.otel_off:
        plot(samples, RESULTS / f"{name}.png")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run of seconds (CI); results not written")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5; quick 1)")
    p.add_argument("--requests", type=int,
                   help="sequential requests per case per round (default 300; quick 60)")
    p.add_argument("--seconds", type=float, help="seconds per throughput cell (default 2; quick 0.5)")
    p.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")],
                   help="comma-separated concurrency levels (default 16,64; quick 16)")
    p.add_argument("--litellm", help="path of the litellm executable "
                                     "(default bench/.venv-litellm/bin/litellm, "
                                     "then PATH)")
    p.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM column")
    p.add_argument("--workers", type=int, default=1,
                   help="also measure sanctum-proxy --workers N as its own column (default: not)")
    p.add_argument("--sanctum-flag", action="append", default=[],
                   help="extra flag for sanctum-proxy (repeatable, e.g. --sanctum-flag=--log-level=warning)")
    p.add_argument("--otel-off", action="store_true",
                   help="also a copy of the proxy without its telemetry hooks, and the ratio of the proxy with "
                        "OpenTelemetry off to it (bench/otel_off.py; results to overhead_otel_off.md)")
    p.add_argument("--rows", type=lambda s: [r for r in s.split(",") if r], default=None,
                   help="tables of bench/agent_rows.py to measure: agents,sizes,turns (default agents; '' none)")
    p.add_argument("--rows-only", action="store_true",
                   help="only those tables (written to bench/results/overhead_agents.md)")
    p.add_argument("--before", type=Path,
                   help="a tree holding another sanctum_proxy/ (git archive of a commit): its proxy is measured "
                        "in the same rounds as 'sanctum before', for before/after figures")
    p.add_argument("--parsing-relay", action="store_true",
                   help="the rows also through bench/relay.py --parse, the relay that decodes and encodes again "
                        "what passes: the floor of a proxy that reads the body, against issue 45's targets")
    p.add_argument("--before-env", action="append", default=[],
                   help="NAME=VALUE for the --before proxy alone (repeatable; e.g. SANCTUM_TRACES_BODIES=false)")
    p.add_argument("--body-requests", type=int,
                   help="sequential requests per row, mode and target a round (default 100; quick 10)")
    p.add_argument("--llama", action="store_true",
                   help="also time a real llama-server (embedded SmolLM2) direct and through sanctum-proxy; "
                        "run under `flock /tmp/sanctum-llama.lock`")
    p.add_argument("--llama-requests", type=int, help="streamed requests per target on llama-server "
                                                      "(default 40; quick 5)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    quick = args.quick
    args.rows = ["agents"] if args.rows is None else args.rows
    args.body_requests = args.body_requests or (10 if quick else 100)
    if args.rows_only and not any(f.startswith("--spell-calling") for f in args.sanctum_flag):
        args.sanctum_flag.append("--spell-calling=native")  # the rows' setting; the canned upstream is native
    args.llama_requests = args.llama_requests or (5 if quick else 40)
    args.rounds = args.rounds or (1 if quick else 5)
    args.requests = args.requests or (60 if quick else 300)
    args.seconds = args.seconds or (0.5 if quick else 2.0)
    args.clients = args.clients or ([16] if quick else [16, 64])
    return args


if __name__ == "__main__":
    sys.exit(main())
