"""bench_overhead.py --otel-off: the proxy with OpenTelemetry off against a copy with its telemetry hooks cut.

Off means the `[otel]` extra installed and no OTLP endpoint set. The copy is this tree's sanctum_proxy/ with every
per-request telemetry hook deleted, so the A/B is exactly what those hooks cost when off.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import timeit
from pathlib import Path

from agent_rows import cpu_ms
from loadgen import one_client

ROOT = Path(__file__).resolve().parent.parent
STRIPPED = "sanctum, no telemetry"
# The endpoint variables set empty: off, whatever the shell running the bench exports.
OFF_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}
# Each per-request hook as written in sanctum_proxy/, and what replaces it in the copy.
HOOKS = (
    ("tracing = telemetry.from_environ(os.environ, settings.traces_bodies)", "tracing = None"),
    ("        if self.telemetry is not None:\n            self.telemetry.begin(request.headers, trace)\n", ""),
    ("        if trace.spans is not None:\n            trace.spans.end(trace)\n", ""),
    ("        if trace.spans is not None:\n            trace.spans.round(record, choice)\n", ""),
    ("        telemetry.sent_to(backend.base_url)\n", ""),
    ("        if (context := telemetry.OUTGOING.get()) is not None:", "        if False:"),
)


def stripped_tree(dest: Path) -> Path:
    """A copy of sanctum_proxy/ under `dest` without the hooks; raises where one is not found exactly once."""
    package = dest / "sanctum_proxy"
    shutil.copytree(ROOT / "sanctum_proxy", package, ignore=shutil.ignore_patterns("__pycache__"))
    sources = {path: path.read_text(encoding="utf-8") for path in package.rglob("*.py")}
    for hook, replacement in HOOKS:
        holders = [path for path, text in sources.items() if hook in text]
        if len(holders) != 1 or sources[holders[0]].count(hook) != 1:
            raise RuntimeError(f"telemetry hook found {len(holders)} times, update bench/otel_off.py: {hook!r}")
        sources[holders[0]] = sources[holders[0]].replace(hook, replacement)
    for path, text in sources.items():
        path.write_text(text, encoding="utf-8")
    return dest


def cpu_lines(urls: dict[str, str], pids: dict[str, int], cases: dict[str, tuple[str, bytes, bool]],
              requests: int, rounds: int) -> list[str]:
    """CPU (user + system) per request of each proxy process, `requests` sequential requests per case and round,
    the two proxies alternating which goes first; less disturbed by other work on the machine than latency."""
    names = ["sanctum", STRIPPED]
    per: dict[tuple[str, str], list[float]] = {}

    async def one_round(number: int) -> None:
        for case, (path, body, stream) in cases.items():
            for name in names[number % 2:] + names[:number % 2]:
                await one_client(urls[name], path, body, 20, stream)  # the connection warm
                before = cpu_ms(pids[name])
                await one_client(urls[name], path, body, requests, stream)
                per.setdefault((case, name), []).append((cpu_ms(pids[name]) - before) / requests)

    for number in range(rounds):
        asyncio.run(one_round(number))
    lines = ["", f"CPU per request of the proxy process (user + system, {requests} sequential requests per case, "
             f"{rounds} rounds; median over rounds, ratio per round):", "",
             f"| case | sanctum ms | {STRIPPED} ms | off / no telemetry |", "|---|---:|---:|---:|"]
    for case in cases:
        on, bare = per[(case, "sanctum")], per[(case, STRIPPED)]
        ratios = [a / b for a, b in zip(on, bare, strict=True)]
        lines.append(f"| {case} | {statistics.median(on):.3f} | {statistics.median(bare):.3f} | "
                     f"{statistics.median(ratios):.3f} [{min(ratios):.3f}..{max(ratios):.3f}] |")
    return lines


def hook_lines() -> list[str]:
    """The hooks a round runs while off, timed alone in this process: a bound far below the noise of the rest."""
    from sanctum_proxy.state import telemetry

    calls = 1_000_000
    timed = {"telemetry.sent_to (once per backend tried)": lambda: telemetry.sent_to("http://127.0.0.1:8080/v1"),
             "telemetry.OUTGOING.get (once per round)": telemetry.OUTGOING.get}
    lines = ["", f"The hooks left while off, each timed alone ({calls:,} calls, best of 5; the figure includes "
             "the timing loop's own call):", "", "| hook | ns per call |", "|---|---:|"]
    for name, hook in timed.items():
        lines.append(f"| {name} | {min(timeit.repeat(hook, number=calls, repeat=5)) / calls * 1e9:.0f} |")
    lines.append("| `is not None` checks of the telemetry and the trace's spans | 2 a request, 2 a round |")
    return lines


def ratio_lines(call: list[float], ttft: list[float], rps: dict[str, list[float]]) -> list[str]:
    """The report's section: per-round ratios of the proxy with telemetry off to the one without it."""
    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} [{min(values):.3f}..{max(values):.3f}]"

    lines = ["", f"## OpenTelemetry off: the proxy (the [otel] extra installed, no endpoint) / `{STRIPPED}`", "",
             f"`{STRIPPED}` is this tree's sanctum_proxy/ with every per-request telemetry hook cut "
             "(bench/otel_off.py). Per-round ratios, median [min..max]; 1.000 is no change.", "",
             "| figure | off / no telemetry |", "|---|---:|",
             f"| tool call p50 latency | {cell(call)} |", f"| stream time to first token p50 | {cell(ttft)} |"]
    lines += [f"| throughput {key} | {cell(values)} |" for key, values in rps.items()]
    return lines
