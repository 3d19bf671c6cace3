"""The agents' real requests through the relay and sanctum-proxy: added p50 against direct, its ratio, CPU per
request and 16-client throughput, every target interleaved in the same rounds (bench/bench_overhead.py's rows).

Each row is one body (bench/agent_bodies.py) posted plain and streamed. Direct and the relay get the chat body;
a row of the proxy's own Messages or Responses endpoint sends the agent's own body to the proxy and the chat body
the proxy makes of it to direct and the relay (the relay cannot translate: it copies bytes).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from agent_bodies import Body, agent_rows, chat_turn, make, size_rows, translated_rows, turn_rows
from canned_upstream import MODEL, TOOLS
from loadgen import many_clients, one_client, percentile

SMALL = make("small body (one tool)", "/chat/completions",
             {"model": MODEL, "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                           {"role": "user", "content": "What is the weather in Paris?"}],
              "tools": TOOLS, "temperature": 0})
BEFORE = "sanctum before"  # the same proxy from another tree (bench_overhead.py --before DIR)
PARSING = "relay parsing"  # the relay that decodes and encodes what passes (bench_overhead.py --parsing-relay)
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    """One body's measurements per target and mode ("plain", "stream"), one entry per round."""

    body: Body
    direct_body: Body
    p50: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # ms of the process's CPU a request
    rps: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def cpu_ms(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def rows_of(kind: str) -> list[Row]:
    """The rows of one table: `agents` (the agents' turns and the small body), `sizes`, `turns`."""
    if kind == "sizes":
        return [Row(b, b) for b in size_rows()]
    if kind == "turns":
        return [Row(b, b) for b in turn_rows("opencode")]
    rows = [Row(SMALL, SMALL)] + [Row(b, b) for b in agent_rows()]
    for body in translated_rows():
        agent = body.name.split(" ")[0]
        rows.append(Row(body, make(body.name, "/chat/completions", chat_turn(agent))))
    return rows


async def measure(rows: list[Row], urls: dict[str, str], pids: dict[str, int | None], requests: int,
                  seconds: float, number: int, clients: int = 16) -> None:
    """One round: every row, plain and streamed, each target in turn (who goes first rotates per round)."""
    names = list(urls)
    order = names[number % len(names):] + names[:number % len(names)]
    for row in rows:
        for mode in ("plain", "stream"):
            for name in order:
                body = row.body if name.startswith("sanctum") else row.direct_body
                raw = body.stream if mode == "stream" else body.plain
                await one_client(urls[name], body.path, raw, 3, mode == "stream")  # its connection warm
                before = cpu_ms(pids[name])
                replies = await one_client(urls[name], body.path, raw, requests, mode == "stream")
                row.cpu.setdefault((name, mode), []).append((cpu_ms(pids[name]) - before) / requests)
                row.p50.setdefault((name, mode), []).append(percentile([r.total_ms for r in replies], 0.5))
            if seconds > 0:
                for name in order:
                    if name == "direct":
                        continue
                    body = row.body if name.startswith("sanctum") else row.direct_body
                    raw = body.stream if mode == "stream" else body.plain
                    rps, _ = await many_clients(urls[name], body.path, raw, clients, seconds, mode == "stream")
                    row.rps.setdefault((name, mode), []).append(rps)


def check(rows: list[Row], url: str) -> None:
    """The proxy must answer each row with the call of the request's first tool, or the timings mean nothing."""
    async def all_rows() -> None:
        for row in rows:
            reply = (await one_client(url, row.body.path, row.body.plain, 1))[0]
            text = reply.body.decode()
            wanted = json.loads(row.direct_body.plain)["tools"][0]["function"]["name"]
            if wanted not in text or json.loads(text).get("error"):
                raise RuntimeError(f"{row.body.name}: the call of {wanted} did not come through: {text[:400]}")

    asyncio.run(all_rows())


def added(row: Row, name: str, mode: str) -> list[float]:
    """Per round: the target's p50 minus direct's p50 of the same round."""
    return [m - d for m, d in zip(row.p50[(name, mode)], row.p50[("direct", mode)], strict=True)]


def table(rows: list[Row], title: str) -> list[str]:
    med = statistics.median
    extra = [name for name in (BEFORE, PARSING) if (name, "plain") in rows[0].p50]
    lines = [f"## {title}", "",
             "| request | KB | tools | mode | added p50 relay ms | added p50 proxy ms | ratio [min..max] | "
             "CPU ms/req relay | CPU ms/req proxy | 16 clients proxy / relay |"
             + "".join(f" added p50 {name} ms | {name} / relay | CPU ms/req {name} | 16 clients {name} / relay |"
                       for name in extra),
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|---:|---:|---:|" * len(extra)]
    for row in rows:
        for mode in ("plain", "stream"):
            relay, proxy = added(row, "relay", mode), added(row, "sanctum", mode)
            tail = ""
            for name in extra:
                other = added(row, name, mode)
                tail += f" {med(other):.2f} | {med(other) / med(relay):.2f}x | {med(row.cpu[(name, mode)]):.2f} |"
                tail += f" {throughput(row, name, mode)} |"
            each = [p / r if r > 0 else float("nan") for p, r in zip(proxy, relay, strict=True)]
            lines.append(f"| {row.body.name} | {row.body.kb:.1f} | {row.body.tools} | {mode} | {med(relay):.2f} | "
                         f"{med(proxy):.2f} | {med(proxy) / med(relay):.2f}x [{min(each):.2f}..{max(each):.2f}] | "
                         f"{med(row.cpu[('relay', mode)]):.2f} | {med(row.cpu[('sanctum', mode)]):.2f} | "
                         f"{throughput(row, 'sanctum', mode)} |" + tail)
    return lines + [""]


def throughput(row: Row, name: str, mode: str) -> str:
    """`name`'s 16-client requests a second over the relay's, median [min..max] of the rounds ("" unmeasured)."""
    if not row.rps:
        return ""
    r = [p / q for p, q in zip(row.rps[(name, mode)], row.rps[("relay", mode)], strict=True)]
    return f"{statistics.median(r):.2f}x [{min(r):.2f}..{max(r):.2f}]"


def medians(rows: list[Row]) -> list[dict[str, object]]:
    """Per row and mode: KB, and each target's added p50 and CPU per request (medians over rounds)."""
    out: list[dict[str, object]] = []
    for row in rows:
        for mode in ("plain", "stream"):
            names = sorted({n for n, m in row.p50 if m == mode and n != "direct"})
            out.append({"name": row.body.name, "kb": row.body.kb, "mode": mode,
                        "added_ms": {n: statistics.median(added(row, n, mode)) for n in names},
                        "cpu_ms": {n: statistics.median(row.cpu[(n, mode)]) for n in names}})
    return out


def plot(data: dict[str, list[dict[str, object]]], path: Path) -> None:
    """Added p50 and CPU per request against body size and turn count, relay and proxy."""
    import servers

    plt = servers.pyplot()
    if plt is None:
        return
    kinds = [k for k in ("sizes", "turns") if k in data]
    fig, axes = plt.subplots(len(kinds), 2, figsize=(11, 4 * len(kinds)), squeeze=False)
    for line, kind in zip(axes, kinds, strict=True):
        for ax, what, label in ((line[0], "added_ms", "added p50 ms"), (line[1], "cpu_ms", "CPU ms / request")):
            for mode in ("plain", "stream"):
                points = [d for d in data[kind] if d["mode"] == mode]
                for name in points[0][what]:  # type: ignore[attr-defined]
                    ax.plot([d["kb"] for d in points], [d[what][name] for d in points],  # type: ignore[index]
                            marker="o", label=f"{name}, {mode}")
            grows = "one tool, conversation grows" if kind == "sizes" else "opencode + N rounds"
            ax.set_xlabel(f"request KB ({grows})")
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
