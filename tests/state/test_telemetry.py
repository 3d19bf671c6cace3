"""OpenTelemetry export through the real proxy to a real OTLP/HTTP receiver (tests/fakes/otlp.py), decoded with
the protocol's own protobuf: the request's span, each round's, the omens as events, the client's trace id
carried to the upstream on every round."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ServerThread
from tests.fakes.otlp import OtlpReceiver, ReceivedSpan
from tests.fakes.upstream import FakeUpstream, Step, completion, content_chunks, native_call
from tests.polling import wait_until
from tests.tools import WEATHER

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto (dev extra) is not installed")

SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
       "sanctum": {"constrain": "off"}}
USAGE = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
         "prompt_tokens_details": {"cached_tokens": 32}, "completion_tokens_details": {"reasoning_tokens": 4}}


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    with ServerThread(found.app()) as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # milliseconds: spans leave at once
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        yield found


def spans_of(receiver: OtlpReceiver, count: int) -> list[ReceivedSpan]:
    return wait_until(lambda: receiver.spans if len(receiver.spans) >= count else None, 10,
                      f"{count} spans at the receiver", detail=lambda: repr(receiver.spans))


def corrected(fake: Any) -> None:
    """Round 1 names a tool that does not exist (rejected), round 2 is right."""
    fake.push(Step(body=completion(None, [native_call("lookup_weather", '{"city":"Paris"}')], "tool_calls")),
              Step(body={**completion(None, [native_call("get_weather", '{"city":"Paris"}')], "tool_calls"),
                         "model": "m-q4", "usage": USAGE}))


@pytest.fixture
def pool() -> Iterator[list[tuple[FakeUpstream, ServerThread]]]:
    """Two fake upstreams on their own ports, for one `[[upstreams]]` pool."""
    fakes = [FakeUpstream() for _ in range(2)]
    servers = [ServerThread(f.app()).__enter__() for f in fakes]
    yield list(zip(fakes, servers, strict=True))
    for server in servers:
        if server.thread.is_alive():
            server.__exit__()


def pooled(make_proxy: Any, pool: list[tuple[FakeUpstream, ServerThread]]) -> str:
    return str(make_proxy(probe_capabilities=False, health_check_seconds=60, upstreams=[
        {"name": "pool", "urls": [s.url + "/v1" for _, s in pool]}]))


def test_request_and_rounds_arrive_with_genai_attributes_and_repair_events(make_proxy, fake, receiver):
    corrected(fake[0])
    with httpx.Client(base_url=make_proxy(), timeout=20) as client:
        r = client.post("/v1/chat/completions", json=ASK, headers={"traceparent": TRACEPARENT})
    assert r.status_code == 200 and r.headers["x-sanctum-rounds"] == "2"
    spans = spans_of(receiver, 3)
    assert {s.trace_id for s in spans} == {TRACE_ID}  # one trace: the client's
    request = next(s for s in spans if s.kind == SERVER)
    rounds = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.attributes["sanctum.round"])
    assert request.parent_span_id == PARENT_ID and request.name == "chat m"
    assert request.service == "sanctum-proxy"
    assert [s.parent_span_id for s in rounds] == [request.span_id] * 2
    a = request.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "m" and a["gen_ai.response.model"] == "m-q4"
    assert a["gen_ai.request.stream"] is False and a["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert a["gen_ai.usage.cache_read.input_tokens"] == 32 and a["gen_ai.usage.reasoning.output_tokens"] == 4
    assert a["sanctum.outcome"] == "rejected" and a["sanctum.rounds"] == 2
    assert a["sanctum.trace_id"] == r.json()["sanctum"]["trace_id"]
    assert "gen_ai.input.messages" in a and "Weather in Paris?" in a["gen_ai.input.messages"]
    assert rounds[0].attributes["sanctum.round.outcome"] == "rejected"
    # each round names the model that answered it, a rejected one too
    assert [(s.attributes["gen_ai.response.model"], s.attributes["gen_ai.response.id"]) for s in rounds] == [
        ("fake-model", "chatcmpl-fake"), ("m-q4", "chatcmpl-fake")]
    assert rounds[1].attributes["gen_ai.usage.input_tokens"] == 40
    (event, fields), = rounds[0].events
    assert event == "sanctum.SpellCallRejected" and fields["sanctum.reason"] == "unknown_spell"
    assert fields["sanctum.spell"] == "lookup_weather" and "sanctum.correction" in fields
    # the upstream got the client's trace, each round under its own span
    sent = [h["traceparent"] for h in fake[0].chat_headers]
    assert sent == [f"00-{TRACE_ID}-{s.span_id}-01" for s in rounds]


def test_without_traces_bodies_no_message_content_is_exported(make_proxy, fake, receiver):
    corrected(fake[0])
    with httpx.Client(base_url=make_proxy(traces_bodies=False), timeout=20) as client:
        assert client.post("/v1/chat/completions", json=ASK).status_code == 200
    spans = spans_of(receiver, 3)
    for span in spans:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(span.attributes)
        for _, fields in span.events:
            assert "sanctum.correction" not in fields and "sanctum.raw" not in fields
    request = next(s for s in spans if s.kind == SERVER)
    assert request.parent_span_id == ""  # no traceparent: a new trace
    assert fake[0].chat_headers[0]["traceparent"].split("-")[1] == request.trace_id


def test_a_stream_has_its_time_to_first_chunk(make_proxy, fake, receiver):
    fake[0].push(Step(chunks=content_chunks("Hello there, friend.")))
    with httpx.Client(base_url=make_proxy(), timeout=20) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "stream": True,
                                                      "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and "[DONE]" in r.text
    request = next(s for s in spans_of(receiver, 2) if s.kind == SERVER)
    assert request.attributes["gen_ai.request.stream"] is True
    assert 0 < request.attributes["gen_ai.response.time_to_first_chunk"] < 5


def test_an_upstream_error_marks_the_spans_failed(make_proxy, fake, receiver):
    fake[0].push(Step(status=500, body={"error": {"code": 500, "message": "boom", "type": "server_error"}}))
    with httpx.Client(base_url=make_proxy(), timeout=20) as client:
        assert client.post("/v1/chat/completions", json={**ASK, "tools": []}).status_code == 500
    spans = spans_of(receiver, 2)
    assert {s.status_code for s in spans} == {2}
    assert next(s for s in spans if s.kind == SERVER).attributes["error.type"] == "upstream_error"


def test_off_without_an_endpoint_nothing_is_sent_upstream(make_proxy, fake, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    with httpx.Client(base_url=make_proxy(), timeout=20) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                        headers={"traceparent": TRACEPARENT})
    assert r.status_code == 200 and "traceparent" not in fake[0].chat_headers[0]


def test_two_replicas_spans_arrive_at_one_receiver(make_proxy, fake, receiver):
    first, second = make_proxy(), make_proxy()
    ids = []
    for url in (first, second):
        with httpx.Client(base_url=url, timeout=20) as client:
            r = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                            headers={"traceparent": TRACEPARENT})
            ids.append(r.json()["sanctum"]["trace_id"])
    requests = [s for s in spans_of(receiver, 4) if s.kind == SERVER]
    assert sorted(s.attributes["sanctum.trace_id"] for s in requests) == sorted(ids)
    assert {s.trace_id for s in requests} == {TRACE_ID}
    assert {s.resource["host.name"] for s in requests} == {socket.gethostname()}
    assert all(s.resource["service.instance.id"] for s in requests)


def test_each_process_is_its_own_service_instance():
    show = ("import os; from sanctum_proxy.state import telemetry; t = telemetry.from_environ(os.environ, False); "
            "print(t._provider.resource.attributes['service.instance.id'])")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    ids = {subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip() for _ in range(2)}
    assert len(ids) == 2 and all(ids)


def test_resource_attributes_from_the_environment_win(make_proxy, fake, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=gateway,service.instance.id=pod-a")
    with httpx.Client(base_url=make_proxy(), timeout=20) as client:
        assert client.post("/v1/chat/completions", json={**ASK, "tools": []}).status_code == 200
    request = next(s for s in spans_of(receiver, 2) if s.kind == SERVER)
    assert request.service == "gateway" and request.resource["service.instance.id"] == "pod-a"


def test_each_round_names_the_backend_that_answered(make_proxy, pool, receiver):
    proxy = pooled(make_proxy, pool)
    for fake, _ in pool:
        corrected(fake)
    with httpx.Client(base_url=proxy, timeout=20) as client:
        assert client.post("/v1/chat/completions", json=ASK).status_code == 200
    (fake, server), = [(f, s) for f, s in pool if f.requests]  # both rounds on one backend
    rounds = [s for s in spans_of(receiver, 3) if s.kind == CLIENT]
    assert len(rounds) == 2 and len(fake.requests) == 2
    for span in rounds:
        a = span.attributes
        assert (a["server.address"], a["server.port"], a["sanctum.upstream"]) == ("127.0.0.1", server.port, "pool")
        assert not [e for e, _ in span.events if e == "sanctum.failover"]


def test_a_round_that_fails_over_names_both_backends(make_proxy, pool, receiver):
    proxy = pooled(make_proxy, pool)
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy, timeout=20) as client:
        assert client.post("/v1/chat/completions", json=ask).status_code == 200
        (held, _), = [(s, f) for f, s in pool if f.requests]
        other = next(s for _, s in pool if s is not held)
        held.__exit__()  # the conversation's backend dies; its health mark is still "up"
        for stream in (False, True):
            assert client.post("/v1/chat/completions", json={**ask, "stream": stream}).status_code == 200
    rounds = [s for s in spans_of(receiver, 6) if s.kind == CLIENT]
    first, *later = sorted(rounds, key=lambda s: s.start_ns)
    assert first.attributes["server.port"] == held.port and not first.events
    failed = [(s.attributes["server.port"], [f["server.port"] for e, f in s.events if e == "sanctum.failover"])
              for s in later]
    assert failed == [(other.port, [held.port]), (other.port, [])]  # after one failure it is marked down
    assert all(s.attributes["sanctum.upstream"] == "pool" for s in rounds)


def counted(monkeypatch: pytest.MonkeyPatch, calls: dict[str, int], owner: Any, name: str) -> None:
    """Count the calls of `owner.name`, still running it."""
    real = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[f"{owner.__name__}.{name}"] = calls.get(f"{owner.__name__}.{name}", 0) + 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


@pytest.fixture
def otel_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Calls into the OpenTelemetry SDK and into the proxy's span code, counted."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk import trace as sdk
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from sanctum_proxy.state import telemetry

    calls: dict[str, int] = {}
    for owner, name in ((sdk.TracerProvider, "__init__"), (OTLPSpanExporter, "__init__"),
                        (sdk.Tracer, "start_span"), (sdk.Span, "set_attributes"), (sdk.Span, "end"),
                        (TraceContextTextMapPropagator, "extract"), (TraceContextTextMapPropagator, "inject"),
                        (telemetry.Telemetry, "begin"), (telemetry.RequestSpans, "round"),
                        (telemetry.RequestSpans, "end"), (telemetry.RoundInFlight, "__init__")):
        counted(monkeypatch, calls, owner, name)
    return calls


def some_requests(proxy: str, fake: Any) -> None:
    """A corrected request, a stream and a plain one, each under the client's traceparent."""
    corrected(fake)
    fake.push(Step(chunks=content_chunks("Hello there.")))
    with httpx.Client(base_url=proxy, timeout=20, headers={"traceparent": TRACEPARENT}) as client:
        assert client.post("/v1/chat/completions", json=ASK).headers["x-sanctum-rounds"] == "2"
        plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert "[DONE]" in client.post("/v1/chat/completions", json={**plain, "stream": True}).text
        assert client.post("/v1/chat/completions", json=plain).status_code == 200


def test_without_an_endpoint_no_provider_exporter_or_span_work_is_made(make_proxy, fake, otel_calls, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    some_requests(make_proxy(), fake[0])
    assert otel_calls == {}
    assert "traceparent" not in fake[0].chat_headers[0]


def test_with_an_endpoint_the_same_requests_make_spans(make_proxy, fake, otel_calls, receiver):
    some_requests(make_proxy(), fake[0])  # the counting above can see span work: here it happens
    spans_of(receiver, 7)
    assert otel_calls["TracerProvider.__init__"] == 1 and otel_calls["OTLPSpanExporter.__init__"] == 1
    assert otel_calls["Tracer.start_span"] == 7  # 3 requests, 4 rounds
    assert otel_calls["RoundInFlight.__init__"] == 4 and otel_calls["TraceContextTextMapPropagator.inject"] == 4
