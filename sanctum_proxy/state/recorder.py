"""What the chat route calls to trace a request, and the writer thread that stores it.

The event loop only builds a Trace of references and queues it; the thread builds, stores, counts, logs and prunes.
Bursts share one SQLite transaction, and readers call `flush()` so a finished request finds its trace.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

from fastapi import Request

from sanctum_proxy.core.omens import Omen, of_choice
from sanctum_proxy.errors import ProxyError, internal
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.repair.loop_data import Final, Plan
from sanctum_proxy.state.metrics import Metrics
from sanctum_proxy.state.telemetry import Telemetry
from sanctum_proxy.state.trace_store import TraceStore, default_path
from sanctum_proxy.state.traces import Trace, TraceDoc, compacted, metadata_only, trace_json
from sanctum_proxy.web import access_log

QUEUE_LIMIT = 10_000
BATCH = 256
GATHER_SECONDS = 0.02
PRUNE_SECONDS = 1.0
PRUNE_SHARE = 4  # the store is pruned after every quarter of traces_max_bytes written
log = logging.getLogger(__name__)
E = TypeVar("E")


@dataclass(frozen=True)
class Retention:
    """Where traces are kept and how many (the `traces_*` settings)."""

    path: str | None  # None: default_path()
    max_count: int  # 0: no store at all
    max_age_hours: float
    max_bytes: int
    max_doc_bytes: int
    bodies: bool
    queue_bytes: int = 32 * 1024 * 1024  # traces_queue_bytes


class Recorder:
    def __init__(self, retention: Retention, telemetry: Telemetry | None = None) -> None:
        self.retention = retention
        self.telemetry = telemetry  # None: OpenTelemetry is off
        self.metrics = Metrics()
        self.store: TraceStore | None = None
        self._queue: queue.Queue[Trace | TraceDoc | threading.Event | None] = queue.Queue(QUEUE_LIMIT)
        self._thread: threading.Thread | None = None
        self._queued_bytes = 0
        self._weights: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self.retention.path or str(default_path())

    def start(self) -> None:
        """Open the store (unless max_count is 0) and start the writer thread."""
        if self.retention.max_count > 0:
            try:
                self.store = TraceStore(self.path, journal_limit=self.retention.max_bytes // PRUNE_SHARE)
            except Exception as exc:
                raise RuntimeError(f"traces_path: cannot open {self.path}: {exc}") from exc
            self._prune()
        self._thread = threading.Thread(target=self._drain, name="sanctum-trace-writer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is queued, then stop the thread and close the store."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(10)
            self._thread = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.telemetry is not None:
            self.telemetry.close()

    # The hot path: references, gauges, one put_nowait.

    def begin(self, request: Request, trace_id: str, chat: ChatRequest, plan: Plan) -> Trace:
        trace = Trace(trace_id, _request_id(request), time.time(), time.perf_counter(), chat.body, plan,
                      plan.upstream, chat.controls.spell_calling,
                      protocol=getattr(request.state, "protocol", "chat"),
                      body_bytes=getattr(request.state, "body_bytes", 0))
        request.state.trace = trace
        if self.telemetry is not None:
            self.telemetry.begin(request.headers, trace)
        self.metrics.in_flight.inc()
        if trace.stream:
            self.metrics.streams.inc()
        return trace

    async def watch(self, request: Request, events: AsyncIterator[E]) -> AsyncIterator[E]:
        """Pass the loop's events through; end the trace however the loop ends."""
        trace: Trace | None = getattr(request.state, "trace", None)
        shown = False
        try:
            async for event in events:
                if isinstance(event, Final) and trace is not None:
                    trace.final = event
                omen = _omen_of(event)
                if omen is not None:  # a surrender raises without a Final
                    if trace is not None:
                        trace.omens.append(omen)
                    yield event
                    continue
                yield event
                shown = True
        except BaseException as exc:
            self.ended(trace, exc, shown)
            raise
        self.ended(trace, None, shown)

    def ended(self, trace: Trace | None, exc: BaseException | None, shown: bool) -> None:
        """End the trace after `shown` events, the loop having ended with `exc` (None: normally)."""
        if exc is None:
            self._end(trace)
        elif isinstance(exc, ProxyError):
            # Once a stream has started its error goes inside it (HTTP 200).
            self._end(trace, error=exc, status=200 if shown and trace and trace.stream else exc.status)
        elif isinstance(exc, asyncio.CancelledError | GeneratorExit):
            self._end(trace)  # no final: the client left
        elif isinstance(exc, Exception):
            self._end(trace, error=internal(exc), status=500)

    def _end(self, trace: Trace | None, *, error: ProxyError | None = None, status: int = 0) -> None:
        if trace is None or trace.done:
            return
        if error is not None:
            trace.failed(error, status)
        elif trace.final is not None:
            trace.answered(trace.final)
        else:
            trace.client_gone()
        if trace.spans is not None:
            trace.spans.end(trace)
        self.metrics.in_flight.dec()
        if trace.stream:
            self.metrics.streams.dec()
        self.submit(trace)

    def refused(self, request: Request, error: ProxyError) -> None:
        """Count and log a chat request refused before it had a trace."""
        if getattr(request.state, "protocol", None) is None or trace_id(request) is not None:
            return
        self.metrics.refused()
        setattr(request.state, access_log.LOGGED, True)
        access_log.emit(access_log.refused_line(_request_id(request), error.status))

    def submit(self, trace: Trace) -> None:
        """Queue the trace; past `queue_bytes` queued, only its metadata, so huge bodies are let go at once."""
        item: Trace | TraceDoc = trace
        weight = trace.weight()
        with self._lock:
            over = self._queued_bytes + weight > self.retention.queue_bytes
            if not over:
                self._queued_bytes += weight
                self._weights[id(trace)] = weight
        if over:
            try:
                item = {**metadata_only(trace_json(trace)),
                        "clipped": f"metadata only (the trace queue held over {self.retention.queue_bytes} "
                                   "bytes: traces_queue_bytes)"}
            except Exception:
                log.exception("trace %s could not be recorded", trace.id)
                return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._written(item)
            self.metrics.traces_dropped.inc()

    def _written(self, item: object) -> None:
        with self._lock:
            self._queued_bytes -= self._weights.pop(id(item), 0)

    # Everything else runs on the writer thread.

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued before this call is written; False on timeout."""
        if self._thread is None:
            return False
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _drain(self) -> None:
        pruned = time.monotonic()
        while True:
            batch = [self._queue.get()]
            if isinstance(batch[0], Trace):
                time.sleep(GATHER_SECONDS)
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            flushes = [item for item in batch if isinstance(item, threading.Event)]
            stop = any(item is None for item in batch)
            self._write([item for item in batch if isinstance(item, Trace | dict)])
            for item in batch:
                self._written(item)
            del batch  # whole answers must not stay alive while the thread waits
            if flushes or stop or time.monotonic() - pruned >= PRUNE_SECONDS:
                self._prune()
                pruned = time.monotonic()
            for done in flushes:
                done.set()
            if stop:
                return

    def _write(self, traces: list[Trace | TraceDoc]) -> None:
        docs: list[TraceDoc] = []
        for trace in traces:
            if isinstance(trace, dict):  # already metadata (submit)
                docs.append(trace)
                continue
            try:
                doc = trace_json(trace)
                docs.append(compacted(doc) if self.retention.bodies else metadata_only(doc))
            except Exception:  # one unreadable trace must not stop the writer
                log.exception("trace %s could not be recorded", trace.id)
        logged = access_log.LOGGER.isEnabledFor(logging.INFO)
        for doc in docs:
            self.metrics.observe(doc)
            if logged:
                access_log.emit(access_log.line(doc))
        if self.store is None or not docs:
            return
        every = max(1, self.retention.max_bytes // PRUNE_SHARE)
        try:
            while docs:  # in pieces, each pruned after: the file never holds much more than the budget
                docs = docs[self.store.add(docs, self.retention.max_doc_bytes, until=every):]
                if self.store.unpruned >= every:
                    self._prune()
        except Exception:
            log.exception("%d trace(s) could not be stored in %s", len(docs), self.path)

    def _prune(self) -> None:
        if self.store is None:
            return
        oldest = time.time() - self.retention.max_age_hours * 3600
        try:
            self.store.prune(self.retention.max_count, oldest, self.retention.max_bytes)
        except Exception:
            log.exception("pruning traces in %s failed", self.path)


def trace_id(request: Request) -> str | None:
    """The id of the trace `begin` started for this request, if any."""
    trace: Trace | None = getattr(request.state, "trace", None)
    return trace.id if trace is not None else None


def _request_id(request: Request) -> str | None:
    value = request.headers.get("x-request-id")
    return value[:200] if value else None


def _omen_of(event: object) -> Omen | None:
    """An event's omen: the loop's own, or `(index, omen)` for choice `index` of several."""
    if isinstance(event, Omen):
        return event
    if isinstance(event, tuple) and len(event) == 2 and isinstance(event[1], Omen) and isinstance(event[0], int):
        return of_choice(event[1], event[0])
    return None
