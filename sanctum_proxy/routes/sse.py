"""The streaming answer of POST /v1/chat/completions: the upstream read as a stream (one round), and the
SSE writer that turns the round loop's events into `chat.completion.chunk` lines (contract section 6)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from .. import omens as om
from ..config import Settings
from ..errors import ProxyError
from ..protocol import ChatRequest
from ..repair.loop import Answer, ContentDelta, Final, Plan, Sender, run
from ..responses import JsonResponse as ORJSONResponse
from ..streaming import Assembler, call_deltas, chunk


def stream_sender(upstream: Any, auth: str | None) -> Sender:
    """One upstream round read as a stream: live content as it is released, then the whole Answer."""

    async def send_stream(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | Answer]:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assembler = Assembler()
        async with upstream.chat_stream(body, auth) as chunks:
            async for piece in chunks:
                text = assembler.feed(piece)
                if text and live:
                    yield ContentDelta(text)
        answer = Answer(assembler.message(), assembler.finish_reason, assembler.usage, assembler.meta)
        yield answer
        if live:
            yield _Released(assembler)

    return send_stream


class _Released(ContentDelta):
    """Marks how much content a live round already showed (the stream subtracts it from the final)."""

    def __init__(self, assembler: Assembler) -> None:
        super().__init__("")
        object.__setattr__(self, "assembler", assembler)


async def stream_answer(request: Request, chat: ChatRequest, plan: Plan, trace_id: str,
                        auth: str | None) -> Response:
    """Headers wait for the first upstream event, so an error before it is a plain HTTP error."""
    settings: Settings = request.app.state.settings
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def produce() -> None:
        try:
            async for event in run(plan, stream_sender(request.app.state.upstream, auth)):
                await queue.put(event)
        except ProxyError as exc:
            await queue.put(exc)
        except Exception as exc:  # a bug must end the stream with an error, never a silent cut
            await queue.put(ProxyError(f"internal error: {type(exc).__name__}: {exc}"))
        await queue.put(None)

    task = asyncio.create_task(produce())
    first = await queue.get()
    if isinstance(first, ProxyError):
        task.cancel()
        return ORJSONResponse(first.body(), status_code=first.status)
    meta = {"id": f"chatcmpl-{trace_id}", "created": int(time.time()), "model": chat.model}
    events = _SseWriter(meta, chat, plan, trace_id, settings.keepalive_seconds)
    headers = {"x-sanctum-spell-calling": plan.mode, "x-sanctum-trace-id": trace_id,
               "cache-control": "no-cache"}
    return StreamingResponse(events.write(first, queue, task), media_type="text/event-stream",
                             headers=headers)


class _SseWriter:
    def __init__(self, meta: dict[str, Any], chat: ChatRequest, plan: Plan, trace_id: str,
                 keepalive: float) -> None:
        self.meta, self.chat, self.plan, self.trace_id, self.keepalive = meta, chat, plan, trace_id, keepalive
        self.omen_style = chat.controls.omens
        self.sent_omens = 0
        self.assembler: Assembler | None = None

    def data(self, payload: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    async def write(self, first: Any, queue: asyncio.Queue[Any],
                    task: asyncio.Task[None]) -> AsyncIterator[bytes]:
        try:
            yield self.data(chunk(self.meta, {"role": "assistant", "content": ""}))
            event = first
            while event is not None:
                for out in self.render(event):
                    yield out
                if isinstance(event, (ProxyError, Final)):
                    return
                try:
                    event = await asyncio.wait_for(queue.get(), self.keepalive)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    event = ...
        finally:
            task.cancel()

    def render(self, event: Any) -> list[bytes]:
        if event is ...:
            return []
        if isinstance(event, _Released):
            self.assembler = event.assembler  # type: ignore[attr-defined]
            return []
        if isinstance(event, ContentDelta):
            return [self.data(chunk(self.meta, {"content": event.text}))] if event.text else []
        if isinstance(event, ProxyError):
            return [self.data(event.body())]
        if isinstance(event, Final):
            return self.finish(event)
        return []

    def omen_lines(self, omens: list[om.Omen]) -> list[bytes]:
        render = om.sse_event if self.omen_style == "events" else om.sse_comment
        return [render(o) for o in omens]

    def finish(self, final: Final) -> list[bytes]:
        out = self.omen_lines(final.omens)
        rest = self.assembler.unreleased(final.message.get("content")) if self.assembler else (
            final.message.get("content") or "")
        if rest:
            out.append(self.data(chunk(self.meta, {"content": rest})))
        for index, call in enumerate(final.message.get("tool_calls") or []):
            out += [self.data(chunk(self.meta, delta)) for delta in call_deltas(index, call)]
        sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        include_usage = (self.chat.body.get("stream_options") or {}).get("include_usage") is True
        if include_usage:
            out.append(self.data(chunk(self.meta, {}, final.finish_reason)))
            usage_chunk = {**chunk(self.meta, {}), "choices": [], "usage": final.usage, "sanctum": sanctum}
            out.append(self.data(usage_chunk))
        else:
            out.append(self.data(chunk(self.meta, {}, final.finish_reason, sanctum=sanctum)))
        out.append(b"data: [DONE]\n\n")
        return out
