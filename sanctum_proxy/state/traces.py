"""Trace records of chat requests: the live Trace, its stored document and that document's transforms.

Outcomes, most telling first: surrendered, fallback, rejected, repaired, clean, error.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast
from typing import Final as Const

import orjson

from sanctum_proxy.core.omens import Omen, Outcome
from sanctum_proxy.core.shapes import JSONObject, Usage
from sanctum_proxy.errors import CLIENT_GONE, ProxyError, ToolCallParseError
from sanctum_proxy.repair.events import Final, RoundRecord, note
from sanctum_proxy.repair.plan import Plan

if TYPE_CHECKING:  # telemetry imports this module
    from sanctum_proxy.state.telemetry import RequestSpans

# Omen fields that quote nothing of the conversation (kept by metadata_only).
_OMEN_METADATA = ("type", "round", "spell", "call_id", "repairs", "reason", "from", "to", "upstream_status")


@dataclass
class Trace:
    id: str
    request_id: str | None
    created: float  # unix seconds
    started: float  # time.perf_counter()
    request: JSONObject  # without `sanctum`
    plan: Plan
    upstream: str
    requested_mode: str  # native | prompted | auto
    protocol: str = "chat"  # chat | responses | messages
    final: Final | None = None
    omens: list[Omen] = field(default_factory=list)
    error: JSONObject | None = None  # OpenAI error object
    status: int = 0  # 200 for an error inside a stream
    outcome: Outcome = Outcome.ERROR
    latency_ms: float = 0.0
    done: bool = field(default=False, repr=False)
    body_bytes: int = 0
    rounds: dict[int, list[RoundRecord]] = field(default_factory=dict)  # by choice
    first_chunk_ms: float | None = None
    upstream_ms: float = 0.0  # the proxy's own time is the rest
    open_since: float | None = None
    spans: RequestSpans | None = field(default=None, repr=False)

    def record(self, record: RoundRecord, choice: int = 0) -> None:
        """A round's record as the loop yielded it: when sent, then when judged."""
        note(self.rounds.setdefault(choice, []), record)
        if record.outcome == Outcome.PENDING:
            self.open_since = time.perf_counter()
        else:
            self.upstream_ms += record.latency_ms
            self.open_since = None

    def overhead_ms(self) -> float:
        """The proxy's own time so far: elapsed less upstream round time, counting a round in flight from when sent."""
        now = time.perf_counter()
        waiting = now - self.open_since if self.open_since is not None else 0.0
        return max(0.0, (now - self.started - waiting) * 1000 - self.upstream_ms)

    def records(self) -> list[RoundRecord]:
        return [r for choice in sorted(self.rounds) for r in self.rounds[choice]]

    @property
    def mode(self) -> str:
        """The latest round's mode, or the plan's before any round."""
        rounds = self.rounds.get(0)
        return rounds[-1].mode if rounds else self.plan.mode

    def weight(self) -> int:
        """Approximate bytes of text this trace keeps alive until written, counted without deep walks."""
        total = self.body_bytes
        for record in self.records():
            message = record.answer if isinstance(record.answer, dict) else {}
            content = message.get("content")
            total += len(content) if isinstance(content, str) else 0
            for call in message.get("tool_calls") or []:
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                total += len(arguments) if isinstance(arguments, str) else 0
        return total

    @property
    def stream(self) -> bool:
        return self.request.get("stream") is True

    def answered(self, final: Final) -> None:
        self.final, self.status, self.outcome = final, 200, final.outcome
        self._end()

    def failed(self, error: ProxyError, status: int) -> None:
        self.error, self.status = {**error.body()["error"]}, status
        self.outcome = Outcome.SURRENDERED if isinstance(error, ToolCallParseError) else Outcome.ERROR
        self._end()

    def client_gone(self) -> None:
        self.error = {"message": "the client disconnected before the answer was complete",
                      "type": "client_disconnected", "param": None, "code": "client_disconnected"}
        self.status, self.outcome = CLIENT_GONE, Outcome.ERROR
        self._end()

    def _end(self) -> None:
        self.latency_ms = (time.perf_counter() - self.started) * 1000
        self.done = True


class RoundDoc(TypedDict):
    """A round in a trace document; metadata-only documents keep bodies' shapes only."""

    number: int
    mode: str
    outcome: str
    constrained: bool
    status: int
    latency_ms: float
    finish_reason: str | None
    usage: Usage | None
    sent: JSONObject
    answer: Mapping[str, object] | None
    error: JSONObject | None
    sent_keys: NotRequired[list[str]]  # stored: every key of `sent` in order


class AnswerDoc(TypedDict):
    message: Mapping[str, object]
    finish_reason: str


class TraceDoc(TypedDict):
    """The document of one request, for the metrics, access log and store."""

    object: str
    id: str
    request_id: str | None
    created: float
    time: str
    model: str
    upstream: str
    mode: str
    requested_mode: str
    protocol: str
    stream: bool
    outcome: str
    status: int
    latency_ms: float
    usage: Usage | None
    request: JSONObject
    rounds: list[RoundDoc]
    omens: list[JSONObject]
    answer: AnswerDoc | None
    error: JSONObject | None
    bodies: bool
    clipped: NotRequired[str]
    first_chunk_ms: NotRequired[float | None]


def trace_json(trace: Trace) -> TraceDoc:
    """The full document; runs on the writer thread, never the event loop."""
    final, records = trace.final, trace.records()
    omens = final.omens if final is not None else trace.omens
    return {
        "object": "sanctum.trace", "id": trace.id, "request_id": trace.request_id,
        "created": trace.created, "time": iso_time(trace.created),
        "model": str(trace.request.get("model") or ""), "upstream": trace.upstream,
        "mode": final.mode if final is not None else (records[-1].mode if records else trace.plan.mode),
        "requested_mode": trace.requested_mode, "protocol": trace.protocol, "stream": trace.stream,
        "outcome": trace.outcome, "status": trace.status, "latency_ms": round(trace.latency_ms, 2),
        "usage": final.usage if final is not None else _summed_usage(records),
        "request": trace.request,
        "rounds": [_round_json(r) for r in records],
        "omens": [o.to_json() for o in omens],
        "answer": None if final is None else {"message": final.message, "finish_reason": final.finish_reason},
        "error": trace.error, "bodies": True,
        "first_chunk_ms": None if trace.first_chunk_ms is None else round(trace.first_chunk_ms, 2),
    }


def _round_json(record: RoundRecord) -> RoundDoc:
    return {"number": record.number, "mode": record.mode, "outcome": record.outcome,
            "constrained": getattr(record, "constrained", False),
            "status": _round_status(record.error),
            "latency_ms": round(record.latency_ms, 2), "finish_reason": record.finish_reason,
            "usage": record.usage, "sent": record.sent, "answer": record.answer, "error": record.error}


def _round_status(error: JSONObject | None) -> int:
    """200, the upstream's error status, or 502/504 for an upstream unreachable or too slow."""
    if error is None:
        return 200
    status = error.get("upstream_status") or error.get("status") or 502
    return int(cast("int | str", status))  # an int


def _summed_usage(records: list[RoundRecord]) -> Usage | None:
    total: dict[str, int] = {}
    for record in records:
        for key, value in (record.usage or {}).items():
            if key in ("prompt_tokens", "completion_tokens", "total_tokens") and isinstance(value, int):
                total[key] = total.get(key, 0) + value
    return cast("Usage", total) if total else None


SENT_KEYS: Const = "sent_keys"  # stored: every key of `sent` in order; absent ones are the request's


def compacted(doc: TraceDoc) -> TraceDoc:
    """The document as stored: members of a round's `sent` that are the request's own objects are not written twice.

    Identity is checked, not equality, since this runs for every trace. `expanded` undoes it.
    """
    request: object = doc.get("request")  # a document may come from elsewhere
    if not isinstance(request, dict) or not doc.get("rounds"):
        return doc
    rounds = []
    for r in doc["rounds"]:
        sent: object = r.get("sent")
        if isinstance(sent, dict):
            kept = {k: v for k, v in sent.items() if k not in request or not _same(v, request[k])}
            if len(kept) < len(sent):
                r = {**r, "sent": kept, SENT_KEYS: list(sent)}
        rounds.append(r)
    return {**doc, "rounds": rounds}


def expanded(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored document with `compacted` undone."""
    request = doc.get("request")
    for r in doc.get("rounds") or ():
        keys = r.pop(SENT_KEYS, None)
        if isinstance(keys, list) and isinstance(r.get("sent"), dict) and isinstance(request, dict):
            sent = r["sent"]
            r["sent"] = {k: sent[k] if k in sent else request.get(k) for k in keys}
    return doc


def _same(value: object, given: object) -> bool:
    if value is given:
        return True
    return (isinstance(value, list) and isinstance(given, list) and len(value) == len(given)
            and all(a is b for a, b in zip(value, given, strict=True)))


def metadata_only(doc: TraceDoc) -> TraceDoc:
    """Drop every message body; counts, names, statuses, latencies, tokens and omen kinds stay."""
    request = doc["request"]
    out: TraceDoc = {**doc, "bodies": False, "request": _request_shape(request) if request is not None else request}
    out["rounds"] = [{**r, "sent": _request_shape(r["sent"]) if r["sent"] is not None else r["sent"],
                      "answer": None if r["answer"] is None else _message_shape(r["answer"])}
                     for r in doc["rounds"]]
    out["omens"] = [{k: o[k] for k in _OMEN_METADATA if k in o} for o in doc["omens"]]
    if doc["answer"] is not None:
        out["answer"] = {**doc["answer"], "message": _message_shape(doc["answer"]["message"])}
    if doc["error"] is not None:
        out["error"] = {k: v for k, v in doc["error"].items() if k != "rejected"}
    return out


_MARK_BYTES = 48  # a cut string's note at most, UTF-8
_NOTE_BYTES = 128


def clipped(doc: TraceDoc, max_bytes: int, size: int) -> TraceDoc:
    """The document cut to `max_bytes` of JSON (`size`: its whole size).

    Long strings keep their head and a note, the limit halving until it fits; metadata only if that fails. Sizes are
    estimated from string lengths so the document is written once, not per halving.
    """
    lengths = sorted(_string_lengths(doc), reverse=True)
    totals = list(itertools.accumulate(lengths))  # the i + 1 longest lengths together
    limit = max_bytes // 4
    while limit >= 64:
        over = _count_over(lengths, limit)
        saved = (totals[over - 1] - over * (limit + _MARK_BYTES)) if over else 0
        if size - saved + _NOTE_BYTES <= max_bytes:
            out: TraceDoc = _clip(doc, limit)
            out["clipped"] = f"strings over {limit} characters cut ({size} bytes whole)"
            if len(orjson.dumps(out)) <= max_bytes:
                return out
        limit //= 2
    return {**metadata_only(doc), "clipped": f"metadata only ({size} bytes whole)"}


def _string_lengths(value: Any) -> list[int]:
    """Every string `_clip` may cut (values, not keys)."""
    out: list[int] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(len(item))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _count_over(descending: list[int], limit: int) -> int:
    """How many of the lengths (longest first) are over `limit`."""
    return bisect.bisect_left(descending, -limit, key=lambda n: -n)


def _clip(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}… [{len(value) - limit} more characters not stored]"
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, limit) for v in value]
    return value


def _request_shape(body: JSONObject) -> JSONObject:
    tools = _listed(body.get("tools"))
    return {"model": body.get("model"), "stream": body.get("stream") is True,
            "message_count": len(_listed(body.get("messages"))),
            "tools": [(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]}


def _message_shape(message: Mapping[str, object]) -> JSONObject:
    calls = _listed(message.get("tool_calls"))
    return {"role": message.get("role"),
            "tool_calls": [{"id": c.get("id"), "function": {"name": (c.get("function") or {}).get("name")}}
                           for c in calls if isinstance(c, dict)]}


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def summary(doc: TraceDoc) -> JSONObject:
    """The list row: who, when, how it went, and what was cast."""
    counts: dict[str, int] = {}
    for omen in doc["omens"]:
        kind = str(omen["type"])
        counts[kind] = counts.get(kind, 0) + 1
    calls = _listed(doc["answer"]["message"].get("tool_calls")) if doc["answer"] is not None else []
    return {"id": doc["id"], "request_id": doc["request_id"], "created": doc["created"], "time": doc["time"],
            "model": doc["model"], "upstream": doc["upstream"], "mode": doc["mode"],
            "requested_mode": doc["requested_mode"], "stream": doc["stream"], "outcome": doc["outcome"],
            "status": doc["status"], "latency_ms": doc["latency_ms"], "usage": doc["usage"],
            "object": "sanctum.trace.summary", "rounds": len(doc["rounds"]),
            "omens": counts, "cast": [(c.get("function") or {}).get("name") for c in calls if isinstance(c, dict)],
            "error": (doc["error"] or {}).get("type"), "protocol": doc.get("protocol", "chat")}


def iso_time(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
