"""The streaming answer of POST /v1/chat/completions (docs/contract.md section 6): the upstream read as a stream,
one round at a time, and the SSE writer that turns the round loop's events into `chat.completion.chunk`s.

What the client sees:
  - headers as soon as the first upstream round is accepted (an error before that is a plain HTTP error);
  - the live content of the first round that shows any, as it arrives (the assembler holds call markup;
    whitespace at the end of the live text waits for the text after it, so the content equals the
    non-streamed content byte for byte); with reasoning_format "split", reasoning markup in it goes out as
    reasoning_content deltas (reasoning.Splitter);
  - `: keep-alive` comments while nothing else is sent for `keepalive_seconds` (hidden correction rounds);
  - each omen as soon as the next event goes out after it happened (a rejected round's omen when the
    correction round starts), so a watcher sees a mend while the hidden round still runs;
  - at the end: the omens not sent yet, the final content the client has not seen (`streaming.unseen`), the
    calls as OpenAI tool-call deltas, the finish chunk (with `sanctum`), the usage chunk if asked, `[DONE]`;
  - or, on a surrender or an upstream failure after the headers, the omens not sent yet (every rejected
    round of a surrender), `data: {"error": {...}}` and the end.
n > 1 (routes/choices.py): the first round's chunks are split by choice index as they come; each choice's
loop and SseWriter write under its own index (ChoicesWriter), with one usage chunk and `sanctum` at the end.
Prose of correction rounds is never live: rejected answers are not shown, and the accepted one's content is
sent once the round is judged, minus what the client already saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from sanctum_proxy.codecs import families
from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.errors import ProxyError, UpstreamUnreachable, internal, no_answer
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.protocols.reply import held_back, rest_after
from sanctum_proxy.repair import constrain
from sanctum_proxy.repair.loop import Answer, ContentDelta, FieldDelta, Final, Plan, Sender, StreamItem
from sanctum_proxy.repair.streaming import PASSED, Assembler, call_deltas, chunk
from sanctum_proxy.routes import choices
from sanctum_proxy.routes.choices import tagged
from sanctum_proxy.routes.disconnect import ClientGone, gone_response, unless_disconnected
from sanctum_proxy.routes.rounds import kept_run, run_traced
from sanctum_proxy.web.json_response import error_response

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"


def stream_sender(upstream: Any, auth: str | None, *, lead: bool = False) -> Sender:
    """One upstream round read as a stream. Yields an empty ContentDelta once the upstream has accepted the
    round (so the client's headers and keep-alives can start), the content the assembler releases when the
    round is live, then the whole Answer. `lead`: the model's answers may open with a bare call name
    (`families.opens_bare`)."""

    async def send_stream(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        async with upstream.chat_stream(body, auth) as chunks:
            async for event in read_round(chunks, assembler_for(body, lead), live):
                yield event

    return send_stream


def streamed(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def assembler_for(body: dict[str, Any], lead: bool) -> Assembler:
    return Assembler(text_branch=constrain.is_constrained(body), lead=lead, client_json=constrain.asks_json(body))


async def read_round(chunks: AsyncIterator[dict[str, Any]], assembler: Assembler,
                     live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
    """One round's chunks through the assembler: an empty ContentDelta first (the upstream accepted the round),
    the content and reasoning it releases when the round is live, then the whole Answer."""
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


async def stream_answer(request: Request, chat: ChatRequest, plan: Plan, trace_id: str,
                        auth: str | None, *, is_legacy: bool = False, writer: Writer | None = None,
                        refuse: Callable[[ProxyError], Response] | None = None) -> Response:
    """Headers wait for the first event (the upstream accepted a round), so an error before it is a plain
    HTTP error with its status. Another protocol's endpoint passes its own `writer` (an object with
    `opening()`, `render(event)`, `ended` and `keepalive`, like SseWriter) and `refuse` (its error shape)."""
    settings: Settings = request.app.state.settings
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    upstream, lead = request.state.destination.upstream, families.opens_bare(plan.prompt_format)
    several = choices.count(chat.body) > 1 and writer is None
    events: AsyncIterator[Any]
    if several:
        many = choices.Choices(plan, stream_sender(upstream, auth, lead=lead), kept_run(request))
        events = request.app.state.recorder.watch(
            request, many.events(many.lead_sender(first_of_several(upstream, auth, many, lead))))
    else:
        events = run_traced(request, plan, stream_sender(upstream, auth, lead=lead))
    task = asyncio.create_task(_produce(events, queue))
    early: list[Any] = []  # omens before the upstream accepted a round (a probe, a fallback): held
    try:
        first = await unless_disconnected(request, queue.get())
        while _omen(first):
            early.append(first)
            first = await unless_disconnected(request, queue.get())
    except ClientGone:
        task.cancel()
        return gone_response()
    if isinstance(first, ProxyError):
        task.cancel()
        return refuse(first) if refuse else error_response(first)
    if writer is None:
        include_usage = (chat.body.get("stream_options") or {}).get("include_usage") is True
        split_reasoning = settings.reasoning_format == "split"
        meta = {"id": f"chatcmpl-{trace_id}", "created": int(time.time()), "model": chat.model}
        if several:
            writer = ChoicesWriter(meta, trace_id, many, omen_style=chat.controls.omens,
                                   include_usage=include_usage, legacy=is_legacy, split_reasoning=split_reasoning)
        else:
            writer = SseWriter(meta, trace_id, omen_style=chat.controls.omens, include_usage=include_usage,
                               legacy=is_legacy, split_reasoning=split_reasoning)
    for omen in early:
        writer.render(omen)
    mode = plan.records[-1].mode if plan.records else plan.mode  # after a fallback: the mode answering
    headers = {"x-sanctum-spell-calling": mode, "x-sanctum-trace-id": trace_id,
               "cache-control": "no-cache"}
    return StreamingResponse(pump(writer, first, queue, task, settings.keepalive_seconds),
                             media_type="text/event-stream", headers=headers)


def first_of_several(upstream: Any, auth: str | None, many: choices.Choices,
                     lead: bool) -> Callable[[dict[str, Any], bool], AsyncIterator[Any]]:
    """The first round of n > 1 choices, streamed: the upstream's chunks split by choice index as they come;
    choice 0's are read here, each other choice's go to the loop started for it when it first shows."""

    async def first(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        queues: dict[int, asyncio.Queue[Any]] = {}

        async def split(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
            try:
                async for piece in chunks:
                    for index, part in choices.split_chunk(piece).items():
                        if index == 0:
                            yield part
                            continue
                        if index not in queues:
                            queues[index] = asyncio.Queue()
                            many.spawn(index, queued_round(queues[index], lead))
                        queues[index].put_nowait(part)
            except Exception as exc:
                for queue in queues.values():
                    queue.put_nowait(exc)
                raise
            for queue in queues.values():
                queue.put_nowait(None)

        async with upstream.chat_stream(body, auth) as chunks:
            async for event in read_round(split(chunks), assembler_for(body, lead), live):
                yield event

    return first


def queued_round(queue: asyncio.Queue[Any], lead: bool) -> Callable[[dict[str, Any], bool], AsyncIterator[Any]]:
    """A first round read from the chunks of one choice that `first_of_several` puts in `queue`."""

    def first(body: dict[str, Any], live: bool) -> AsyncIterator[Any]:
        return read_round(choices.queued_chunks(queue), assembler_for(body, lead), live)

    return first


class ChoicesWriter:
    """The events of n > 1 choices ((index, event) pairs, routes/choices.py) as one stream: each choice's
    chunks under its own index (an SseWriter per choice), then the usage chunk if asked, the `sanctum` of them
    all on the last chunk, `[DONE]`."""

    keepalive = KEEPALIVE

    def __init__(self, meta: dict[str, Any], trace_id: str, many: choices.Choices, *, omen_style: str,
                 include_usage: bool, legacy: bool, split_reasoning: bool = False) -> None:
        self.meta, self.trace_id, self.many = meta, trace_id, many
        self.split_reasoning = split_reasoning
        self.omen_style, self.include_usage, self.legacy = omen_style, include_usage, legacy
        self.writers: dict[int, SseWriter] = {}
        self.pending: dict[str, Any] | None = None  # the last finish chunk, held for the request's own fields
        self.ended = False

    def writer(self, index: int) -> SseWriter:
        if index not in self.writers:
            self.writers[index] = SseWriter(dict(self.meta), self.trace_id, omen_style=self.omen_style,
                                            legacy=self.legacy, index=index,
                                            split_reasoning=self.split_reasoning)
        return self.writers[index]

    def opening(self) -> bytes:
        return b""

    def render(self, event: tuple[int, StreamItem] | choices.Finals | ProxyError) -> list[bytes]:
        if isinstance(event, choices.Finals):
            self.ended = True
            return self.finish(event)
        if not isinstance(event, tuple):  # an error: the stream ends with it
            self.ended = True
            return self.flush() + self.writer(0).render(event)
        index, inner = event
        writer = self.writer(index)
        if not isinstance(inner, Final):
            return writer.render(inner)
        out, finish_reason = writer.choice_end(inner)
        out = self.flush() + out
        self.pending = {"data": writer.chunk({}, finish_reason), "writer": writer}
        return out

    def flush(self) -> list[bytes]:
        if self.pending is None:
            return []
        pending, self.pending = self.pending, None
        return [pending["writer"].data(pending["data"])]

    def finish(self, finals: choices.Finals) -> list[bytes]:
        sanctum = om.sanctum_object(finals.mode, finals.rounds, finals.omens, self.trace_id)
        extra = {k: v for k, v in finals.extra.items() if k != "sanctum"}
        lead = self.writer(0)
        if self.include_usage and finals.usage is not None:
            out = self.flush()
            usage = {**chunk(lead.meta, {}), "choices": [], "usage": finals.usage, **extra, "sanctum": sanctum}
            out.append(lead.data(usage))
        else:
            assert self.pending is not None
            self.pending["data"].update(extra, sanctum=sanctum)
            out = self.flush()
        return [*out, DONE]


def _omen(event: Any) -> bool:
    """An omen, alone or of one of n > 1 choices ((index, omen))."""
    return isinstance(event, om.Omen) or isinstance(event, tuple) and isinstance(event[-1], om.Omen)


async def _produce(events: AsyncIterator[Any], queue: asyncio.Queue[Any]) -> None:
    try:
        async for event in events:
            await queue.put(event)
    except ProxyError as exc:
        await queue.put(exc)
    except Exception as exc:  # a bug must end the stream with an error, never a silent cut
        await queue.put(internal(exc))
    else:  # the events ended without an answer or an error: a bug, said in the stream
        await queue.put(no_answer())


async def pump(writer: Writer, first: Any, queue: asyncio.Queue[Any], task: asyncio.Task[None],
               keepalive: float) -> AsyncIterator[bytes]:
    """The response body: rendered events until the Final or an error, keep-alives while the queue is quiet.
    Events already waiting go out in one write. Leaving early (the client went away) cancels the producer
    and with it the upstream stream."""
    try:
        out = [writer.opening(), *writer.render(first)]
        while True:
            while not writer.ended and not queue.empty():
                out += writer.render(queue.get_nowait())
            if out:
                yield b"".join(out)
                out = []
            if writer.ended:
                return
            try:
                async with asyncio.timeout(keepalive):  # not wait_for: that wraps each get in a new task
                    out = writer.render(await queue.get())
            except TimeoutError:
                yield writer.keepalive
    finally:
        task.cancel()


def _joined_logprobs(first: dict[str, Any] | None, then: dict[str, Any] | None) -> dict[str, Any] | None:
    if first is None or then is None:
        return then if first is None else first
    return {**then, "content": [*(first.get("content") or []), *(then.get("content") or [])]}


class Writer(Protocol):
    """What `pump` writes with: SseWriter, ChoicesWriter, protocols' ResponsesWriter and MessagesWriter."""

    keepalive: bytes
    ended: bool

    def opening(self) -> bytes: ...

    def render(self, event: Any) -> list[bytes]: ...


class SseWriter:
    """The loop's events as SSE bytes. Pure but for the running record of what the client has seen."""

    keepalive = KEEPALIVE

    def __init__(self, meta: dict[str, Any], trace_id: str, *, omen_style: str = "comments",
                 include_usage: bool = False, legacy: bool = False, omens: list[om.Omen] | None = None,
                 index: int = 0, split_reasoning: bool = False) -> None:
        self.meta, self.trace_id = meta, trace_id
        # reasoning_format = "split": reasoning markup in content goes out as reasoning_content deltas
        self.splitter = reasoning.Splitter() if split_reasoning else None
        self.index = index  # the choice this writer's chunks are of (n > 1: routes/choices.py)
        self.omen = om.sse_event if omen_style == "events" else om.sse_comment
        self.include_usage, self.legacy = include_usage, legacy
        self.omens = omens if omens is not None else []  # the loop's omens so far (render adds each one)
        self.omens_sent = 0
        self.shown = ""
        self.held = ""  # live whitespace not sent yet: it goes out with the next text, or with the final content
        self.held_logprobs: dict[str, Any] | None = None
        self.shown_reasoning: dict[str, str] = {}
        self.ended = False
        self.opened = False  # the role chunk goes out with the first data, under the upstream's id and model
        self._heads()

    def _heads(self) -> None:
        # Content chunks are the hot path: everything around the text is serialised once.
        head = orjson.dumps(self.chunk({"content": ""})).split(b'"content":""', 1)
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

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out = chunk(self.meta, delta, finish_reason)
        if self.index:
            out["choices"][0]["index"] = self.index
        return out

    def data(self, payload: dict[str, Any]) -> bytes:
        out = b"data: " + orjson.dumps(payload) + b"\n\n"
        return out if self.opened else self.opening(now=True) + out

    def opening(self, *, now: bool = False) -> bytes:
        """The role chunk: held (b"") until the first data, so it can carry the upstream's id and model."""
        if self.opened or not now:
            return b""
        self.opened = True
        return self.data(self.chunk({"role": "assistant", "content": ""}))

    def content(self, text: str) -> bytes:
        self.shown += text
        if self.splitter is not None:
            return b"".join(self.split(self.splitter.feed(text)))
        opening = b"" if self.opened else self.opening(now=True)
        return opening + self._content_head + orjson.dumps(text) + self._content_tail

    def content_with(self, text: str, logprobs: dict[str, Any]) -> bytes:
        """A content chunk carrying the upstream's logprobs of its tokens."""
        self.shown += text
        pieces = self.splitter.feed(text) if self.splitter is not None else [("content", text)]
        if not pieces:
            return b""
        (name, first), rest = pieces[0], pieces[1:]
        payload = self.chunk({name: first})
        payload["choices"][0]["logprobs"] = logprobs
        return self.data(payload) + b"".join(self.split(rest))

    def split(self, pieces: list[tuple[str, str]]) -> list[bytes]:
        """Content split by reasoning.Splitter, each piece a chunk of its field (not counted as shown: `shown`
        is the content as the loop gave it)."""
        out = [self.opening(now=True)] if pieces and not self.opened else []
        for name, text in pieces:
            if name == "content":
                out.append(self._content_head + orjson.dumps(text) + self._content_tail)
            else:
                out.append(self.data(self.chunk({name: text})))
        return out

    def reasoning(self, name: str, text: str) -> bytes:
        self.shown_reasoning[name] = self.shown_reasoning.get(name, "") + text
        return self.data(self.chunk({name: text}))

    def new_omens(self, omens: list[om.Omen] | None = None) -> list[bytes]:
        """The omens that happened since the last call, each sent once."""
        omens = self.omens if omens is None else omens
        out = [self.omen(o if not self.index else tagged(o, self.index)) for o in omens[self.omens_sent:]]
        self.omens_sent = max(self.omens_sent, len(omens))
        return out

    def render(self, event: StreamItem) -> list[bytes]:
        if isinstance(event, om.Omen):  # held: sent with the next event that goes out
            self.omens.append(event)
            return []
        if isinstance(event, ContentDelta):
            if event.meta:
                self.adopt(event.meta)
            logprobs = _joined_logprobs(self.held_logprobs, event.logprobs)
            text, self.held = held_back(self.held, event.text)  # trailing whitespace waits for the text after it
            self.held_logprobs = None if text else logprobs
            if text and logprobs:
                return self.new_omens() + [self.content_with(text, logprobs)]
            return self.new_omens() + ([self.content(text)] if text else [])
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
        out, finish_reason = self.choice_end(final)
        sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        extra = {k: v for k, v in final.extra.items() if k != "sanctum"}  # the answering round's own fields
        if self.include_usage and final.usage is not None:  # no usage chunk of null: the upstream sent none
            out.append(self.data(self.chunk({}, finish_reason)))
            usage = {**chunk(self.meta, {}), "choices": [], "usage": final.usage, **extra, "sanctum": sanctum}
            out.append(self.data(usage))
        else:
            last = {**self.chunk({}, finish_reason), **extra, "sanctum": sanctum}
            out.append(self.data(last))
        out.append(DONE)
        return out

    def choice_end(self, final: Final) -> tuple[list[bytes], str]:
        """The end of this writer's choice but its finish chunk: omens, unseen reasoning and content, calls;
        and the finish_reason that chunk is to carry."""
        out = self.new_omens(final.omens)
        for name in PASSED:  # the accepted round's reasoning and refusal, unless a round's was shown live
            thought, seen = final.message.get(name), self.shown_reasoning.get(name, "")
            if isinstance(thought, str) and thought.startswith(seen) and len(thought) > len(seen):
                out.append(self.reasoning(name, thought[len(seen):]))
        content = final.message.get("content") or ""
        rest = rest_after(self.shown, self.held, content)
        if rest:
            out.append(self.content(rest))
        if self.splitter is not None:
            out += self.split(self.splitter.flush())
        finish_reason = final.finish_reason
        calls = final.message.get("tool_calls") or []
        if self.legacy and calls:
            name, arguments = calls[0]["function"]["name"], calls[0]["function"]["arguments"]
            out += [self.data(self.chunk({"function_call": {"name": name, "arguments": ""}})),
                    self.data(self.chunk({"function_call": {"arguments": arguments}}))]
            finish_reason = "function_call"
        else:
            for index, call in enumerate(calls):
                out += [self.data(self.chunk(delta)) for delta in call_deltas(index, call)]
        return out, finish_reason
