"""The Prometheus metrics of one app, fed from finished trace documents on the trace writer thread.

Each app has its own CollectorRegistry. With `workers` > 1, PROMETHEUS_MULTIPROC_DIR makes any process answer for all.
The `model` label is a configured name or `other`, since client-chosen names would make unbounded series.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sanctum_proxy.core.omens import OmenType, Outcome

if TYPE_CHECKING:  # state/traces.py imports the repair loop
    from sanctum_proxy.state.traces import TraceDoc

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 11)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FIRST_CHUNK_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
OTHER = "other"
NO_MODEL = "none"  # a request refused before routing
IN_CONTENT = "_in_content"


class Metrics:
    def __init__(self, models: Collection[str] = ()) -> None:
        self.models = frozenset(models)  # configured names; all others are OTHER
        self.registry = registry = CollectorRegistry()
        routed = ["model", "upstream"]
        self.requests = Counter("sanctum_requests", "Chat requests by spell-calling mode, outcome, model, upstream",
                                ["mode", "outcome", *routed], registry=registry)
        self.repairs = Counter("sanctum_repairs", "Local (tier 1) mends by call format and kind, e.g. trailing_comma",
                               ["format", "kind"], registry=registry)
        self.tokens = Counter("sanctum_tokens", "Tokens of answered requests by type: input, output, "
                              "cached_input (of input), reasoning (of output)", ["type", *routed], registry=registry)
        self.first_chunk = Histogram("sanctum_time_to_first_chunk_seconds",
                                     "A stream's time from its request to its first text", routed,
                                     buckets=FIRST_CHUNK_BUCKETS, registry=registry)
        self.rejections = Counter("sanctum_rejections", "Answers bounced with a correction (tier 2)",
                                  ["reason"], registry=registry)
        self.surrenders = Counter("sanctum_surrenders", "Requests given up on (tier 3)", registry=registry)
        self.fallbacks = Counter("sanctum_fallbacks", "Auto-mode switches from native to prompted, by reason",
                                 ["reason"], registry=registry)
        self.rounds = Histogram("sanctum_rounds_per_request", "Upstream rounds per chat request",
                                buckets=ROUND_BUCKETS, registry=registry)
        self.upstream_latency = Histogram("sanctum_upstream_latency_seconds", "Latency of one upstream round",
                                          ["mode", *routed], buckets=LATENCY_BUCKETS, registry=registry)
        self.request_latency = Histogram("sanctum_request_latency_seconds", "Latency of one chat request",
                                         routed, buckets=LATENCY_BUCKETS, registry=registry)
        self.in_flight = Gauge("sanctum_requests_in_flight", "Chat requests being answered",
                               registry=registry, multiprocess_mode="livesum")
        self.streams = Gauge("sanctum_streams_in_flight", "Streaming chat requests being answered",
                             registry=registry, multiprocess_mode="livesum")
        self.traces_dropped = Counter("sanctum_traces_dropped", "Traces lost to a full writer queue",
                                      registry=registry)

    def model(self, name: str) -> str:
        return name if name in self.models else OTHER

    def refused(self) -> None:
        self.requests.labels("none", "error", NO_MODEL, NO_MODEL).inc()

    def observe(self, doc: TraceDoc) -> None:
        routed = (self.model(doc["model"]), doc["upstream"])
        self.requests.labels(doc["mode"], doc["outcome"], *routed).inc()
        self.rounds.observe(len(doc["rounds"]))
        self.request_latency.labels(*routed).observe(doc["latency_ms"] / 1000)
        first = doc.get("first_chunk_ms")
        if first is not None:
            self.first_chunk.labels(*routed).observe(first / 1000)
        for token_type, count in tokens(doc["usage"]).items():
            self.tokens.labels(token_type, *routed).inc(count)
        modes: dict[object, str] = {r["number"]: r["mode"] for r in doc["rounds"]}
        for record in doc["rounds"]:
            self.upstream_latency.labels(record["mode"], *routed).observe(record["latency_ms"] / 1000)
        for omen in doc["omens"]:
            kind = omen["type"]
            if kind == OmenType.REPAIRED:
                named = omen.get("repairs")
                repairs = named if isinstance(named, list) else []
                written = call_format(repairs, modes.get(omen["round"]))
                for repair in repairs:
                    self.repairs.labels(written, repair).inc()
            elif kind == OmenType.REJECTED:
                self.rejections.labels(omen.get("reason") or "unknown").inc()
            elif kind == OmenType.FALLBACK:
                self.fallbacks.labels(omen.get("reason") or "unknown").inc()
        if doc["outcome"] == Outcome.SURRENDERED:
            self.surrenders.inc()

    def render(self) -> bytes:
        if os.environ.get(MULTIPROCESS_ENV):
            every_process = CollectorRegistry()
            multiprocess.MultiProcessCollector(every_process)  # type: ignore[no-untyped-call]
            return generate_latest(every_process)
        return generate_latest(self.registry)


def tokens(usage: object) -> dict[str, int]:
    """OpenAI usage as token counts by type; cached_input and reasoning are parts of input and output."""
    if not isinstance(usage, dict):
        return {}
    out = {kind: usage[name] for name, kind in (("prompt_tokens", "input"), ("completion_tokens", "output"))
           if isinstance(usage.get(name), int) and usage[name] > 0}
    for details, name, kind in (("prompt_tokens_details", "cached_tokens", "cached_input"),
                                ("completion_tokens_details", "reasoning_tokens", "reasoning")):
        part = usage.get(details)
        if isinstance(part, dict) and isinstance(part.get(name), int) and part[name] > 0:
            out[kind] = part[name]
    return out


def call_format(repairs: list[str], mode: object) -> str:
    """The codec a mended call was written in when it came in content, else `tool_calls` (native) or `prompted`."""
    written = next((r[:-len(IN_CONTENT)] for r in repairs if isinstance(r, str) and r.endswith(IN_CONTENT)), None)
    if written:
        return written
    return "tool_calls" if mode == "native" else "prompted"
