"""The Prometheus metrics of one app (its own CollectorRegistry, so several apps can live in one process).

Counters and histograms are fed from finished trace documents on the trace writer thread; the two in-flight
gauges move on the event loop as requests start and end. With several server processes (`workers`), the
CLI sets PROMETHEUS_MULTIPROC_DIR before they start: prometheus_client then keeps every value in a file per
process, and `render` sums the files, so any process answers /metrics for all of them (gauges: the live
processes' sum).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sanctum_proxy.core.omens import OmenType, Outcome

if TYPE_CHECKING:  # only for the annotation (state/traces.py imports the repair loop)
    from sanctum_proxy.state.traces import TraceDoc

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
ROUND_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 11)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("sanctum_requests", "Chat requests by spell-calling mode and outcome",
                                ["mode", "outcome"], registry=registry)
        self.repairs = Counter("sanctum_repairs", "Local (tier 1) mends by kind, e.g. trailing_comma",
                               ["kind"], registry=registry)
        self.rejections = Counter("sanctum_rejections", "Answers bounced with a correction (tier 2)",
                                  ["reason"], registry=registry)
        self.surrenders = Counter("sanctum_surrenders", "Requests given up on (tier 3)", registry=registry)
        self.fallbacks = Counter("sanctum_fallbacks", "Auto-mode switches from native to prompted, by reason",
                                 ["reason"], registry=registry)
        self.rounds = Histogram("sanctum_rounds_per_request", "Upstream rounds per chat request",
                                buckets=ROUND_BUCKETS, registry=registry)
        self.upstream_latency = Histogram("sanctum_upstream_latency_seconds", "Latency of one upstream round",
                                          ["mode"], buckets=LATENCY_BUCKETS, registry=registry)
        self.request_latency = Histogram("sanctum_request_latency_seconds", "Latency of one chat request",
                                         buckets=LATENCY_BUCKETS, registry=registry)
        self.in_flight = Gauge("sanctum_requests_in_flight", "Chat requests being answered",
                               registry=registry, multiprocess_mode="livesum")
        self.streams = Gauge("sanctum_streams_in_flight", "Streaming chat requests being answered",
                             registry=registry, multiprocess_mode="livesum")
        self.traces_dropped = Counter("sanctum_traces_dropped", "Traces lost to a full writer queue",
                                      registry=registry)

    def observe(self, doc: TraceDoc) -> None:
        """Count one finished request from its trace document."""
        self.requests.labels(doc["mode"], doc["outcome"]).inc()
        self.rounds.observe(len(doc["rounds"]))
        self.request_latency.observe(doc["latency_ms"] / 1000)
        for record in doc["rounds"]:
            self.upstream_latency.labels(record["mode"]).observe(record["latency_ms"] / 1000)
        for omen in doc["omens"]:
            kind = omen["type"]
            if kind == OmenType.REPAIRED:
                repairs = omen.get("repairs")  # a list of repair names (core/omens.repaired)
                for repair in repairs if isinstance(repairs, list) else ():
                    self.repairs.labels(repair).inc()
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
