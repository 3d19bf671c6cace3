"""OpenTelemetry spans of requests and their upstream rounds (the optional `[otel]` extra).

On only when an OTLP endpoint variable is set and the extra is installed; off, nothing here runs. A request is a SERVER
span under the client's `traceparent`, each round a CLIENT span whose traceparent goes upstream. Message content goes on
spans only with `traces_bodies`.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from sanctum_proxy.core.omens import Omen, Outcome
from sanctum_proxy.repair.events import RoundRecord

if TYPE_CHECKING:
    from sanctum_proxy.state.traces import Trace

log = logging.getLogger("sanctum_proxy.telemetry")
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# Trace context headers the round in flight sends upstream; None: none.
OUTGOING: ContextVar[dict[str, str] | None] = ContextVar("sanctum_outgoing_trace", default=None)
# The round span in flight, told its backend by `sent_to`; None: none.
ROUND: ContextVar[RoundInFlight | None] = ContextVar("sanctum_round_span", default=None)
PROVIDER = "openai"
OPERATION = "chat"
SESSION_HEADERS = ("x-claude-code-session-id", "x-session-id")
_OMEN_METADATA = ("spell", "call_id", "repairs", "reason", "from", "to", "upstream_status", "choice")
_OMEN_BODIES = ("raw", "correction", "details", "message")
Attributes = dict[str, Any]


def from_environ(environ: Mapping[str, str], bodies: bool) -> Telemetry | None:
    """The exporter the environment asks for, or None."""
    if not any(environ.get(name) for name in ENDPOINTS) or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("an OTLP endpoint is set but the [otel] extra is not installed "
                    "(pip install 'sanctum-proxy[otel]'): no traces are exported")
        return None
    provider = TracerProvider(resource=_resource(Resource))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.info("OpenTelemetry traces are exported over OTLP/HTTP")
    return Telemetry(provider, bodies)


def _resource(resource: Any) -> Any:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), with this process's name, instance and host
    where those leave them out: replicas exporting to one collector stay apart."""
    detected = resource.create()
    ours = {"service.name": "sanctum-proxy", "service.instance.id": str(uuid.uuid4()),
            "host.name": socket.gethostname()}
    given = dict(detected.attributes)
    if str(given.get("service.name", "")).startswith("unknown_service"):  # the SDK's stand-in for none
        del given["service.name"]
    return detected.merge(resource({k: v for k, v in ours.items() if k not in given}))


class Telemetry:
    """The tracer of one app."""

    def __init__(self, provider: Any, bodies: bool) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self.tracer = provider.get_tracer("sanctum_proxy")
        self.propagator = TraceContextTextMapPropagator()
        self.bodies = bodies

    def begin(self, headers: Mapping[str, str], trace: Trace) -> None:
        """The request's span, a child of the client's `traceparent` if sent."""
        from opentelemetry.trace import SpanKind

        parent = self.propagator.extract(headers)
        body = trace.request
        model = str(body.get("model") or "")
        attributes: Attributes = {
            "gen_ai.operation.name": OPERATION, "gen_ai.provider.name": PROVIDER, "gen_ai.system": PROVIDER,
            "gen_ai.request.model": model, "gen_ai.request.stream": trace.stream,
            "sanctum.trace_id": trace.id, "sanctum.upstream": trace.upstream, "sanctum.protocol": trace.protocol,
            "sanctum.requested_mode": trace.requested_mode, **_request_parameters(body)}
        session = next((headers.get(name) for name in SESSION_HEADERS if headers.get(name)), None) \
            or body.get("prompt_cache_key") or body.get("session_id")
        if isinstance(session, str):
            attributes["gen_ai.conversation.id"] = session[:200]
        if self.bodies:
            attributes["gen_ai.input.messages"] = _json(body.get("messages"))
        span = self.tracer.start_span(f"{OPERATION} {model}".strip(), context=parent, kind=SpanKind.SERVER,
                                      attributes=attributes, start_time=int(trace.created * 1e9))
        trace.spans = RequestSpans(self, span, trace.upstream)

    def close(self) -> None:
        """Export what is queued, then stop the batch thread."""
        self._provider.shutdown()


class RequestSpans:
    """One request's span and its rounds' spans, keyed by choice and round number."""

    def __init__(self, telemetry: Telemetry, span: Any, upstream: str) -> None:
        self.telemetry = telemetry
        self.span = span
        self.upstream = upstream  # the pool's configured name, as the metrics' `upstream` label
        self.rounds: dict[tuple[int, int], tuple[Any, list[int]]] = {}

    def round(self, record: RoundRecord, choice: int = 0) -> None:
        """Start a round's span when sent; set its attributes when judged."""
        try:
            self._round(record, choice)
        except Exception:  # a span must never fail the request it describes
            log.exception("the span of round %d could not be recorded", record.number)

    def _round(self, record: RoundRecord, choice: int) -> None:
        key = (choice, record.number)
        if record.outcome == Outcome.PENDING:
            self._sent(key, record)
            return
        found = self.rounds.get(key)
        if found is None:
            return
        span, ended = found
        span.set_attributes(_judged(record, self.telemetry.bodies))
        if record.error is not None:
            _failed(span, record.error)
        ended.append(time.time_ns())

    def _sent(self, key: tuple[int, int], record: RoundRecord) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        model = str(record.sent.get("model") or "")
        attributes: Attributes = {
            "gen_ai.operation.name": OPERATION, "gen_ai.provider.name": PROVIDER, "gen_ai.system": PROVIDER,
            "gen_ai.request.model": model, "gen_ai.request.stream": record.sent.get("stream") is True,
            "sanctum.round": record.number, "sanctum.round.mode": record.mode, "sanctum.upstream": self.upstream,
            "sanctum.round.constrained": record.constrained, **_request_parameters(record.sent)}
        if key[0]:
            attributes["sanctum.choice"] = key[0]
        if self.telemetry.bodies:
            attributes["gen_ai.input.messages"] = _json(record.sent.get("messages"))
        context = set_span_in_context(self.span)
        span = self.telemetry.tracer.start_span(f"{OPERATION} {model}".strip(), context=context,
                                                kind=SpanKind.CLIENT, attributes=attributes)
        self.rounds[key] = (span, [])
        carrier: dict[str, str] = {}
        self.telemetry.propagator.inject(carrier, context=set_span_in_context(span))
        OUTGOING.set(carrier or None)
        ROUND.set(RoundInFlight(span))

    def end(self, trace: Trace) -> None:
        """Add the omens as events, then end every span."""
        try:
            self._end(trace)
        except Exception:
            log.exception("the spans of trace %s could not be recorded", trace.id)

    def _end(self, trace: Trace) -> None:
        final = trace.final
        omens = final.omens if final is not None else trace.omens
        for omen in omens:
            self._event(omen)
        last = max((k for k in self.rounds if k[0] == 0), default=None)
        for key, (span, ended) in self.rounds.items():
            if key == last and final is not None:
                span.set_attributes(_answered(final.meta, None))
            if not ended:
                _failed(span, {"type": "client_disconnected" if trace.error else "cut_short",
                               "message": "the round ended before it was judged"})
            span.end(end_time=ended[0] if ended else None)
        span = self.span
        attributes: Attributes = {"sanctum.outcome": trace.outcome, "sanctum.mode": trace.mode,
                                  "sanctum.rounds": len(trace.records()),
                                  "sanctum.overhead_ms": round(trace.overhead_ms(), 2),
                                  "http.response.status_code": trace.status}
        if trace.first_chunk_ms is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = trace.first_chunk_ms / 1000
        if final is not None:
            attributes.update(_answered(final.meta, final.usage))
            attributes["gen_ai.response.finish_reasons"] = [final.finish_reason]
            if self.telemetry.bodies:
                attributes["gen_ai.output.messages"] = _json([final.message])
        span.set_attributes(attributes)
        if trace.error is not None:
            _failed(span, trace.error)
        span.end()

    def _event(self, omen: Omen) -> None:
        """An omen as an event on its round's span, else on the request's."""
        choice = omen.fields.get("choice")
        found = self.rounds.get((choice if isinstance(choice, int) else 0, omen.round))
        span = found[0] if found is not None else self.span
        when = found[1][0] if found is not None and found[1] else None
        span.add_event(f"sanctum.{omen.type}", _omen_attributes(omen, self.telemetry.bodies), timestamp=when)


@dataclass
class RoundInFlight:
    """The span of the round being sent, and the backend (base URL) it was last sent to."""

    span: Any
    backend: str | None = None


def sent_to(base_url: str) -> None:
    """Name the backend the round in flight goes to; a backend named before it did not take the connection."""
    found = ROUND.get()
    if found is None:
        return
    try:
        server = _server(base_url)
        if found.backend is not None and found.backend != base_url:
            found.span.add_event("sanctum.failover", _server(found.backend))
        found.backend = base_url
        found.span.set_attributes(server)
    except Exception:  # a span must never fail the request it describes
        log.exception("the backend of a round could not be recorded")


def _server(base_url: str) -> Attributes:
    """A backend URL's host and port (the scheme's where none is written), as OpenTelemetry's HTTP attributes."""
    url = urlsplit(base_url)
    return {"server.address": url.hostname or "", "server.port": url.port or (443 if url.scheme == "https" else 80)}


def _request_parameters(body: Mapping[str, Any]) -> Attributes:
    out: Attributes = {}
    for name, attribute in (("max_tokens", "gen_ai.request.max_tokens"),
                            ("max_completion_tokens", "gen_ai.request.max_tokens"),
                            ("temperature", "gen_ai.request.temperature"), ("top_p", "gen_ai.request.top_p"),
                            ("seed", "gen_ai.request.seed")):
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[attribute] = value
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n != 1:
        out["gen_ai.request.choice.count"] = n
    return out


def _judged(record: RoundRecord, bodies: bool) -> Attributes:
    out: Attributes = {"sanctum.round.outcome": record.outcome, "sanctum.round.latency_ms": round(record.latency_ms, 2)}
    if record.finish_reason:
        out["gen_ai.response.finish_reasons"] = [record.finish_reason]
    out.update(_answered(record.meta or {}, record.usage))
    if bodies and record.answer is not None:
        out["gen_ai.output.messages"] = _json([record.answer])
    return out


def _answered(meta: Mapping[str, Any], usage: Mapping[str, Any] | None) -> Attributes:
    out: Attributes = {}
    if isinstance(meta.get("model"), str):
        out["gen_ai.response.model"] = meta["model"]
    if isinstance(meta.get("id"), str):
        out["gen_ai.response.id"] = meta["id"]
    out.update(_usage(usage))
    return out


def _usage(usage: Mapping[str, Any] | None) -> Attributes:
    """OpenAI usage as GenAI attributes."""
    if not usage:
        return {}
    out: Attributes = {}
    for name, attribute in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                            ("completion_tokens", "gen_ai.usage.output_tokens")):
        if isinstance(usage.get(name), int):
            out[attribute] = usage[name]
    prompt = usage.get("prompt_tokens_details")
    if isinstance(prompt, dict) and isinstance(prompt.get("cached_tokens"), int):
        out["gen_ai.usage.cache_read.input_tokens"] = prompt["cached_tokens"]
    completion = usage.get("completion_tokens_details")
    if isinstance(completion, dict) and isinstance(completion.get("reasoning_tokens"), int):
        out["gen_ai.usage.reasoning.output_tokens"] = completion["reasoning_tokens"]
    return out


def _failed(span: Any, error: Mapping[str, Any]) -> None:
    from opentelemetry.trace import Status, StatusCode

    kind = error.get("type") or error.get("code") or "error"
    span.set_attribute("error.type", str(kind))
    span.set_status(Status(StatusCode.ERROR, str(error.get("message") or kind)[:500]))


def _omen_attributes(omen: Omen, bodies: bool) -> Attributes:
    out: Attributes = {"sanctum.omen.type": str(omen.type), "sanctum.round": omen.round}
    for name in (*_OMEN_METADATA, *(_OMEN_BODIES if bodies else ())):
        value = _attribute_value(omen.fields.get(name))
        if value is not None:
            out[f"sanctum.{name}"] = value
    return out


def _attribute_value(value: object) -> Any:
    """A value OpenTelemetry takes: a scalar, a list of strings, or JSON text."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    return _json(value)


def _json(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return orjson.dumps(str(value)).decode()
