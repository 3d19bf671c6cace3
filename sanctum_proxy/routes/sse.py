"""The streaming answer of POST /v1/chat/completions (docs/contract.md section 6).

Headers wait for the first accepted round; only the first round's content goes out live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response

from sanctum_proxy.codecs import families
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import ProxyError, UpstreamUnreachable, no_answer
from sanctum_proxy.protocols.chat_events import ChoiceEvent, ChoicesWriter, SseWriter, chat_meta
from sanctum_proxy.repair import constrain
from sanctum_proxy.repair.loop_data import Answer, ContentDelta, FieldDelta, Plan, Sender
from sanctum_proxy.repair.streaming import Assembler, with_tools
from sanctum_proxy.routes import choices
from sanctum_proxy.routes.disconnect import DisconnectWatch, gone_response
from sanctum_proxy.routes.rounds import Rounds, Shown, kept_run, recorder_of, run_traced
from sanctum_proxy.services import services
from sanctum_proxy.upstreams.chat_rounds import chat_stream
from sanctum_proxy.upstreams.upstream import Upstream
from sanctum_proxy.web.json_response import error_response, unexpected

log = logging.getLogger(__name__)
TURN_SECONDS = 0.005  # a stream yields to others at least this often
E = TypeVar("E")  # Shown, or ChoiceEvent for n > 1


def stream_sender(upstream: Upstream, auth: str | None, *, lead: bool = False,
                  names: frozenset[str] = frozenset()) -> Sender:
    """One upstream round read as a stream."""

    def send_stream(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        return read_round(chat_stream(upstream, body, auth), assembler_for(body, lead, names), live)

    return send_stream


def streamed(body: JSONObject) -> JSONObject:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def assembler_for(body: JSONObject, lead: bool, names: frozenset[str] = frozenset()) -> Assembler:
    """The round's assembler, holding back calls of the offered tools."""
    tools = body.get("tools")
    offered = names | {t["function"]["name"] for t in (tools if isinstance(tools, list) else ()) if isinstance(t, dict)
                       and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)}
    return Assembler(starts=with_tools(offered), text_branch=constrain.is_constrained(body), lead=lead,
                     names=frozenset(offered),
                     client_json=constrain.asks_json(body))


async def read_round(opened: AbstractAsyncContextManager[AsyncIterator[JSONObject]], assembler: Assembler,
                     live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
    """One round's chunks through the assembler, closing `opened` at the end; buffered chunks let the loop go
    every TURN_SECONDS (a held call writes nothing)."""
    async with opened as chunks:
        yield ContentDelta("")
        told: object = None  # the fingerprint the writer was last told of (None: no meta told yet)
        turned = time.perf_counter()
        async for piece in chunks:
            if time.perf_counter() - turned > TURN_SECONDS:
                await asyncio.sleep(0)
                turned = time.perf_counter()
            text = assembler.feed(piece)
            if live and assembler.meta and assembler.meta.get("system_fingerprint", "") != told:
                told = assembler.meta.get("system_fingerprint", "")
                yield ContentDelta("", assembler.meta.copy())
            for name, thought in assembler.take_passed().items():
                if live:
                    yield FieldDelta(thought, name)
            if text and live:
                yield ContentDelta(text, logprobs=assembler.take_logprobs())
        if assembler.finish_reason is None:
            raise UpstreamUnreachable("upstream stream ended before a finish_reason (cut off mid-answer)")
        yield Answer(assembler.message(), assembler.finish_reason, assembler.usage, assembler.meta,
                     assembler.extra)


async def stream_answer(request: Request, rounds: Rounds, *, is_legacy: bool = False,
                        writer: Writer[Shown] | None = None,
                        refuse: Callable[[ProxyError], Response] | None = None) -> Response:
    """The streamed answer; other protocols pass their own `writer` and `refuse`."""
    settings = services(request).settings
    chat, plan, trace_id, auth = rounds.chat, rounds.plan, rounds.trace_id, rounds.auth
    upstream, lead = rounds.dest.upstream, families.opens_bare(plan.prompt_format)
    names = plan.read_names
    send = stream_sender(upstream, auth, lead=lead, names=names)
    if writer is not None:
        given = writer
        return await _respond(request, plan, trace_id, run_traced(request, rounds, send), lambda: given, refuse)
    options = chat.body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    split_reasoning = settings.reasoning_format == "split"

    def meta() -> oc.Meta:
        return chat_meta(trace_id, chat.model, int(time.time()))

    if choices.count(chat.body) > 1:
        many = choices.Choices(plan, send, kept_run(request, rounds), recorder_of(request))
        several: AsyncIterator[ChoiceEvent] = services(request).recorder.watch(
            request, many.events(many.lead_sender(streamed_first_of_several(upstream, auth, many, lead, names))))
        return await _respond(request, plan, trace_id, several, lambda: ChoicesWriter(
            meta(), trace_id, omen_style=chat.controls.omens, include_usage=include_usage,
            legacy=is_legacy, split_reasoning=split_reasoning), refuse)
    return await _respond(request, plan, trace_id, run_traced(request, rounds, send), lambda: SseWriter(
        meta(), trace_id, omen_style=chat.controls.omens, include_usage=include_usage,
        legacy=is_legacy, split_reasoning=split_reasoning), refuse)


async def _respond(request: Request, plan: Plan, trace_id: str, events: AsyncIterator[E],
                   writer_of: Callable[[], Writer[E]], refuse: Callable[[ProxyError], Response] | None) -> Response:
    """An error, or the headers and the event stream."""
    settings = services(request).settings
    watch = DisconnectWatch(request.receive)
    early: list[E | ProxyError] = []  # omens before a round was accepted
    try:
        first = await _next(events)
        while _omen(first):
            early.append(first)
            first = await _next(events)
    except asyncio.CancelledError:
        if not watch.left():  # not the client leaving: the cancel stands
            watch.stop()
            raise
        return gone_response()
    watch.stop()
    if isinstance(first, ProxyError):
        return refuse(first) if refuse else error_response(first, trace_id=trace_id)
    writer = writer_of()
    for omen in early:
        writer.render(omen)
    trace = getattr(request.state, "trace", None)
    mode = trace.mode if trace is not None else plan.mode  # after any fallback
    headers = {"x-sanctum-spell-calling": mode, "x-sanctum-trace-id": trace_id,
               "cache-control": "no-cache"}
    return EventStream(writer, first, events, settings.keepalive_seconds, headers)


def streamed_first_of_several(upstream: Upstream, auth: str | None, many: choices.Choices,
                     lead: bool, names: frozenset[str] = frozenset()) -> Sender:
    """The first round of n > 1 choices, choices past 0 queued to their own loops."""

    async def first(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        queues: dict[int, choices.ChunkQueue] = {}

        async def split(chunks: AsyncIterator[JSONObject]) -> AsyncIterator[JSONObject]:
            try:
                async for piece in chunks:
                    for index, part in choices.split_chunk(piece).items():
                        if index == 0:
                            yield part
                            continue
                        if index not in queues:
                            queues[index] = asyncio.Queue()
                            many.spawn(index, queued_round(queues[index], lead, names))
                        queues[index].put_nowait(part)
            except Exception as exc:
                for queue in queues.values():
                    queue.put_nowait(exc)
                raise
            for queue in queues.values():
                queue.put_nowait(choices.Ended())

        async with chat_stream(upstream, body, auth) as chunks:
            async for event in read_round(nullcontext(split(chunks)), assembler_for(body, lead, names), live):
                yield event

    return first


def queued_round(queue: choices.ChunkQueue, lead: bool, names: frozenset[str] = frozenset()) -> Sender:
    """A first round read from one choice's queue."""

    def first(body: JSONObject, live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        return read_round(nullcontext(choices.queued_chunks(queue)), assembler_for(body, lead, names), live)

    return first


def _omen(event: object) -> bool:
    """An omen, alone or as (index, omen)."""
    return isinstance(event, om.Omen) or isinstance(event, tuple) and isinstance(event[-1], om.Omen)


async def _next(events: AsyncIterator[E]) -> E | ProxyError:
    """The next event, or the error that ends the events."""
    try:
        return await anext(events)
    except StopAsyncIteration:
        return no_answer()
    except ProxyError as exc:
        return exc
    except Exception as exc:
        return unexpected(exc)


class EventStream(Response):
    """The stream response, written in the request's task, keep-alives filling silence."""

    media_type = "text/event-stream"

    def __init__(self, writer: Writer[E], first: E, events: AsyncIterator[E], keepalive: float,
                 headers: dict[str, str]) -> None:
        self.status_code = 200
        self.background = None
        self.media_type = writer.media_type
        self.init_headers(headers)  # as StreamingResponse: no content-length
        self._writer: Writer[Any] = writer
        self._first: Any = first
        self._events: AsyncIterator[Any] = events
        self._keepalive = keepalive
        self._last = 0.0  # loop time of the last write
        self._turn = 0.0  # loop time others last ran
        self._writing = False
        self._ping: asyncio.Task[None] | None = None
        self._done = False
        self._timer: asyncio.TimerHandle | None = None
        self._watch: DisconnectWatch | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        writer = self._writer
        watch = self._watch = DisconnectWatch(receive)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            self._last = loop.time()
            self._timer = loop.call_later(self._keepalive, self._tick, loop, send)
            out = [*_rendered(writer, None), *_rendered(writer, self._first)]
            while True:
                if out:
                    await self._write(send, b"".join(out), loop)
                if writer.ended:
                    break
                out = _rendered(writer, await _next(self._events))
            self._stop()
            if self._ping is not None:
                await self._ping
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            async for _ in self._events:  # let the loop finish its trace
                pass
        except asyncio.CancelledError:
            if not watch.left():  # not the client leaving: the cancel stands
                raise
        except Exception:  # a bug past the headers: the trace says the rest
            log.exception("a stream ended in an error after its headers")
        finally:
            self._stop()
            await self._events.aclose()  # type: ignore[attr-defined]

    def _stop(self) -> None:
        self._done = True
        if self._watch is not None:
            self._watch.stop()
        if self._timer is not None:
            self._timer.cancel()

    async def _write(self, send: Any, body: bytes, loop: asyncio.AbstractEventLoop) -> None:
        if self._ping is not None:  # after a keep-alive still being written
            await self._ping
        self._writing = True
        try:
            await send({"type": "http.response.body", "body": body, "more_body": True})
        finally:
            self._writing = False
        self._last = now = loop.time()
        if now - self._turn > TURN_SECONDS:  # buffered reads may come without a pause
            self._turn = now
            await asyncio.sleep(0)  # let /healthz and others run

    def _tick(self, loop: asyncio.AbstractEventLoop, send: Any) -> None:
        """A keep-alive after `keepalive` quiet seconds, then re-arm."""
        if self._done:
            return
        quiet = loop.time() - self._last
        if quiet < self._keepalive:
            self._timer = loop.call_later(self._keepalive - quiet, self._tick, loop, send)
            return
        if not self._writing and self._ping is None:
            self._ping = asyncio.ensure_future(self._keep_alive(send, loop))
        self._timer = loop.call_later(self._keepalive, self._tick, loop, send)

    async def _keep_alive(self, send: Any, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await send({"type": "http.response.body", "body": self._writer.keepalive, "more_body": True})
            self._last = loop.time()
        except Exception:  # the client is gone
            pass
        finally:
            self._ping = None


def _rendered(writer: Writer[E], event: E | ProxyError | None) -> list[bytes]:
    """The rendered event; a failing writer ends the stream with a 500 error event."""
    try:
        return [writer.opening()] if event is None else writer.render(event)
    except Exception as exc:
        error = unexpected(exc)
    writer.ended = True
    try:
        return writer.render(error)
    except Exception:
        return [b"event: error\ndata: " + orjson.dumps({"type": "error", "error": error.body()["error"]}) + b"\n\n"]


E_contra = TypeVar("E_contra", contravariant=True)


class Writer(Protocol[E_contra]):
    """What `EventStream` writes with, errors included."""

    keepalive: bytes
    media_type: str  # text/event-stream or application/x-ndjson
    ended: bool

    def opening(self) -> bytes: ...

    def render(self, event: E_contra | ProxyError, /) -> list[bytes]: ...
