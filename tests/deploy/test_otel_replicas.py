"""Two replicas of the image export their spans to one OTLP receiver (tests/fakes/otlp.py on the host's loopback),
each as its own instance, as a Deployment's pods do when OTEL_EXPORTER_OTLP_ENDPOINT names one collector."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from sanctum_proxy.upstreams.embedded import free_port
from tests.conftest import ServerThread
from tests.deploy import podman
from tests.deploy.test_image import ASK, wait_healthy
from tests.fakes.otlp import OtlpReceiver, ReceivedSpan
from tests.fakes.upstream import FakeUpstream
from tests.polling import wait_until

pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto (dev extra) is not installed")

SERVER = 2  # opentelemetry.proto.trace.v1.Span.SpanKind


@pytest.fixture
def receiver() -> Iterator[tuple[OtlpReceiver, str]]:
    found = OtlpReceiver()
    with ServerThread(found.app()) as server:
        yield found, server.url


@pytest.fixture
def replicas(proxy_image: str, fake_ollama: tuple[FakeUpstream, str],
             receiver: tuple[OtlpReceiver, str]) -> Iterator[list[str]]:
    """Two containers of the image on the host network, one upstream, one OTLP endpoint: their URLs."""
    names = [f"sanctum-otel-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    urls = []
    try:
        for name in names:
            port = free_port()
            podman.run("--name", name, "--network", "host", "-e", f"SANCTUM_UPSTREAM={fake_ollama[1]}/v1",
                       "-e", f"SANCTUM_PORT={port}", "-e", "SANCTUM_HOST=127.0.0.1",
                       "-e", "SANCTUM_TRACES_PATH=:memory:", "-e", f"OTEL_EXPORTER_OTLP_ENDPOINT={receiver[1]}",
                       "-e", "OTEL_BSP_SCHEDULE_DELAY=100", proxy_image)
            urls.append(f"http://127.0.0.1:{port}")
        for url, name in zip(urls, names, strict=True):
            wait_healthy(url, name)
        yield urls
    finally:
        podman.remove(*names)


def test_two_replicas_spans_arrive_at_one_receiver_as_two_instances(replicas, receiver):
    found, _ = receiver
    trace_ids = []
    for url in replicas:
        r = httpx.post(url + "/v1/chat/completions", json=ASK, timeout=30)
        assert r.status_code == 200, r.text
        trace_ids.append(r.headers["x-sanctum-trace-id"])

    def requests() -> list[ReceivedSpan] | None:
        spans = [s for s in found.spans if s.kind == SERVER]
        return spans if len(spans) >= 2 else None

    spans = wait_until(requests, 30, "both replicas' request spans at the receiver", detail=lambda: repr(found.spans))
    by_trace = {s.attributes["sanctum.trace_id"]: s for s in spans}
    assert sorted(by_trace) == sorted(trace_ids)
    instances = {by_trace[t].resource["service.instance.id"] for t in trace_ids}
    assert len(instances) == 2  # two replicas, each its own instance
    assert {by_trace[t].service for t in trace_ids} == {"sanctum-proxy"}
    assert all(by_trace[t].attributes["sanctum.outcome"] == "repaired" for t in trace_ids)
