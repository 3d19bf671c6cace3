"""The streaming answer of POST /v1/chat/completions (docs/contract.md section 6): the upstream read as a stream,
one round at a time, and the SSE writer that turns the round loop's events into `chat.completion.chunk`s.

What the client sees:
  - headers as soon as the first upstream round is accepted (an error before that is a plain HTTP error);
  - the live content of the first round that shows any, as it arrives (the assembler holds call markup);
  - `: keep-alive` comments while nothing else is sent for `keepalive_seconds` (hidden correction rounds);
  - each omen as soon as the next event goes out after it happened (a rejected round's omen when the
    correction round starts), so a watcher sees a mend while the hidden round still runs;
  - at the end: the omens not sent yet, the final content the client has not seen (`streaming.unseen`), the
    calls as OpenAI tool-call deltas, the finish chunk (with `sanctum`), the usage chunk if asked, `[DONE]`;
  - or, on a surrender or an upstream failure after the headers, the omens not sent yet (every rejected
    round of a surrender), `data: {"error": {...}}` and the end.
Prose of correction rounds is never live: rejected answers are not shown, and the accepted one's content is
sent once the round is judged, minus what the client already saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from .. import constrain, families
from .. import omens as om
from ..config import Settings
from ..errors import ProxyError, UpstreamUnreachable
from ..protocol import ChatRequest
from ..repair.loop import Answer, ContentDelta, Event, FieldDelta, Final, Plan, Sender
from ..responses import JsonResponse as ORJSONResponse
from ..streaming import PASSED, Assembler, call_deltas, chunk, unseen
from .disconnect import ClientGone, gone_response, unless_disconnected
from .rounds import run_traced

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


def stream_sender(upstream: Any, auth: str | None, *, lead: bool = False) -> Sender:
    """One upstream round read as a stream. Yields an empty ContentDelta once the upstream has accepted the
    round (so the client's headers and keep-alives can start), the content the assembler releases when the
    round is live, then the whole Answer. `lead`: the model's answers may open with a bare call name
    (`families.opens_bare`)."""

    async def send_stream(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assembler = Assembler(text_branch=constrain.is_constrained(body), lead=lead,
                              client_json=constrain.asks_json(body))
        async with upstream.chat_stream(body, auth) as chunks:
            yield ContentDelta("")
            async for piece in chunks:
                told = bool(assembler.meta)
                text = assembler.feed(piece)
                if live and not told and assembler.meta:
                    yield ContentDelta("", dict(assembler.meta))
                for name, thought in assembler.take_passed().items():
                    if live:
                        yield FieldDelta(thought, name)
                if text and live:
                    yield ContentDelta(text, logprobs=assembler.take_logprobs())
        if assembler.finish_reason is None:
            raise UpstreamUnreachable("upstream stream ended before a finish_reason (cut off mid-answer)")
        yield Answer(assembler.message(), assembler.finish_reason, assembler.usage, assembler.meta, assembler.extra)

    return send_stream


async def stream_answer(request: Request, chat: ChatRequest, plan: Plan, trace_id: str,
                        auth: str | None, *, is_legacy: bool = False, writer: Any = None,
                        refuse: Callable[[ProxyError], Response] | None = None) -> Response:
    """Headers wait for the first event (the upstream accepted a round), so an error before it is a plain
    HTTP error with its status. Another protocol's endpoint passes its own `writer` (an object with
    `opening()`, `render(event)`, `ended` and `keepalive`, like SseWriter) and `refuse` (its error shape)."""
    settings: Settings = request.app.state.settings
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    events = run_traced(request, plan, stream_sender(request.state.route.upstream, auth,
                                                     lead=families.opens_bare(plan.prompt_format)))
    task = asyncio.create_task(_produce(events, queue))
    early: list[om.Omen] = []  # omens before the upstream accepted a round (a probe, a fallback): held
    try:
        first = await unless_disconnected(request, queue.get())
        while isinstance(first, om.Omen):
            early.append(first)
            first = await unless_disconnected(request, queue.get())
    except ClientGone:
        task.cancel()
        return gone_response()
    if isinstance(first, ProxyError):
        task.cancel()
        return refuse(first) if refuse else ORJSONResponse(first.body(), status_code=first.status)
    if writer is None:
        include_usage = (chat.body.get("stream_options") or {}).get("include_usage") is True
        meta = {"id": f"chatcmpl-{trace_id}", "created": int(time.time()), "model": chat.model}
        writer = SseWriter(meta, trace_id, omen_style=chat.controls.omens, include_usage=include_usage,
                           legacy=is_legacy)
    for omen in early:
        writer.render(omen)
    mode = plan.records[-1].mode if plan.records else plan.mode  # after a fallback: the mode answering
    headers = {"x-sanctum-spell-calling": mode, "x-sanctum-trace-id": trace_id,
               "cache-control": "no-cache"}
    return StreamingResponse(pump(writer, first, queue, task, settings.keepalive_seconds),
                             media_type="text/event-stream", headers=headers)


async def _produce(events: AsyncIterator[Event], queue: asyncio.Queue[Any]) -> None:
    try:
        async for event in events:
            await queue.put(event)
    except ProxyError as exc:
        await queue.put(exc)
    except Exception as exc:  # a bug must end the stream with an error, never a silent cut
        await queue.put(ProxyError(f"internal error: {type(exc).__name__}: {exc}"))
    await queue.put(None)


async def pump(writer: Any, first: Any, queue: asyncio.Queue[Any], task: asyncio.Task[None],
               keepalive: float) -> AsyncIterator[bytes]:
    """The response body: rendered events until the Final or an error, keep-alives while the queue is quiet.
    Events already waiting go out in one write. Leaving early (the client went away) cancels the producer
    and with it the upstream stream."""
    try:
        out = [writer.opening()]
        event = first
        while True:
            out += writer.render(event)
            while not writer.ended and not queue.empty():
                out += writer.render(queue.get_nowait())
            if out:
                yield b"".join(out)
                out = []
            if writer.ended:
                return
            try:
                async with asyncio.timeout(keepalive):  # not wait_for: that wraps each get in a new task
                    event = await queue.get()
            except TimeoutError:
                yield writer.keepalive
                event = ...
    finally:
        task.cancel()


class SseWriter:
    """The loop's events as SSE bytes. Pure but for the running record of what the client has seen."""

    keepalive = KEEPALIVE

    def __init__(self, meta: dict[str, Any], trace_id: str, *, omen_style: str = "comments",
                 include_usage: bool = False, legacy: bool = False, omens: list[om.Omen] | None = None) -> None:
        self.meta, self.trace_id = meta, trace_id
        self.omen = om.sse_event if omen_style == "events" else om.sse_comment
        self.include_usage, self.legacy = include_usage, legacy
        self.omens = omens if omens is not None else []  # the loop's omens so far (render adds each one)
        self.omens_sent = 0
        self.shown = ""
        self.shown_reasoning: dict[str, str] = {}
        self.ended = False
        self.opened = False  # the role chunk goes out with the first data, under the upstream's id and model
        self._heads()

    def _heads(self) -> None:
        # Content chunks are the hot path: everything around the text is serialised once.
        head = orjson.dumps(chunk(self.meta, {"content": ""})).split(b'"content":""', 1)
        self._content_head, self._content_tail = b'data: ' + head[0] + b'"content":', head[1] + b"\n\n"

    def adopt(self, upstream: dict[str, Any]) -> None:
        """The live round's own id, created, model and system_fingerprint, for every chunk (before any is sent)."""
        if self.opened:
            return
        for key in ("id", "created", "model"):
            if upstream.get(key):
                self.meta[key] = upstream[key]
        if upstream.get("system_fingerprint"):
            self.meta["system_fingerprint"] = upstream["system_fingerprint"]
        self._heads()

    def data(self, payload: dict[str, Any]) -> bytes:
        out = b"data: " + orjson.dumps(payload) + b"\n\n"
        return out if self.opened else self.opening(now=True) + out

    def opening(self, *, now: bool = False) -> bytes:
        """The role chunk: held (b"") until the first data, so it can carry the upstream's id and model."""
        if self.opened or not now:
            return b""
        self.opened = True
        return self.data(chunk(self.meta, {"role": "assistant", "content": ""}))

    def content(self, text: str) -> bytes:
        self.shown += text
        opening = b"" if self.opened else self.opening(now=True)
        return opening + self._content_head + orjson.dumps(text) + self._content_tail

    def content_with(self, text: str, logprobs: dict[str, Any]) -> bytes:
        """A content chunk carrying the upstream's logprobs of its tokens."""
        self.shown += text
        payload = chunk(self.meta, {"content": text})
        payload["choices"][0]["logprobs"] = logprobs
        return self.data(payload)

    def reasoning(self, name: str, text: str) -> bytes:
        self.shown_reasoning[name] = self.shown_reasoning.get(name, "") + text
        return self.data(chunk(self.meta, {name: text}))

    def new_omens(self, omens: list[om.Omen] | None = None) -> list[bytes]:
        """The omens that happened since the last call, each sent once."""
        omens = self.omens if omens is None else omens
        out = [self.omen(o) for o in omens[self.omens_sent:]]
        self.omens_sent = max(self.omens_sent, len(omens))
        return out

    def render(self, event: Any) -> list[bytes]:
        if event is None:  # the producer ended without an answer or an error: a bug, said in the stream
            event = ProxyError("internal error: the round loop ended without an answer")
        if isinstance(event, om.Omen):  # held: sent with the next event that goes out
            self.omens.append(event)
            return []
        if isinstance(event, ContentDelta):
            if event.meta:
                self.adopt(event.meta)
            if event.text and event.logprobs:
                return self.new_omens() + [self.content_with(event.text, event.logprobs)]
            return self.new_omens() + ([self.content(event.text)] if event.text else [])
        if isinstance(event, FieldDelta):
            return self.new_omens() + [self.reasoning(event.field, event.text)]
        if isinstance(event, ProxyError):
            self.ended = True
            return self.new_omens() + [self.data(event.body())]
        if isinstance(event, Final):
            self.ended = True
            return self.finish(event)
        return []

    def finish(self, final: Final) -> list[bytes]:
        out = self.new_omens(final.omens)
        for name in PASSED:  # the accepted round's reasoning and refusal, unless a round's was shown live
            thought, seen = final.message.get(name), self.shown_reasoning.get(name, "")
            if isinstance(thought, str) and thought.startswith(seen) and len(thought) > len(seen):
                out.append(self.reasoning(name, thought[len(seen):]))
        rest = unseen(self.shown, final.message.get("content"))
        if rest:
            out.append(self.content(rest))
        finish_reason = final.finish_reason
        calls = final.message.get("tool_calls") or []
        if self.legacy and calls:
            name, arguments = calls[0]["function"]["name"], calls[0]["function"]["arguments"]
            out += [self.data(chunk(self.meta, {"function_call": {"name": name, "arguments": ""}})),
                    self.data(chunk(self.meta, {"function_call": {"arguments": arguments}}))]
            finish_reason = "function_call"
        else:
            for index, call in enumerate(calls):
                out += [self.data(chunk(self.meta, delta)) for delta in call_deltas(index, call)]
        sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        extra = {k: v for k, v in final.extra.items() if k != "sanctum"}  # the answering round's own fields
        if self.include_usage and final.usage is not None:  # no usage chunk of null: the upstream sent none
            out.append(self.data(chunk(self.meta, {}, finish_reason)))
            usage = {**chunk(self.meta, {}), "choices": [], "usage": final.usage, **extra, "sanctum": sanctum}
            out.append(self.data(usage))
        else:
            last = {**chunk(self.meta, {}, finish_reason), **extra, "sanctum": sanctum}
            out.append(self.data(last))
        out.append(DONE)
        return out
