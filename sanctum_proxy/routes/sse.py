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
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from sanctum_proxy.codecs import families
from sanctum_proxy.config import Settings
from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.accumulated import Accumulated
from sanctum_proxy.errors import ProxyError, UpstreamUnreachable, no_answer
from sanctum_proxy.protocols.chat_request import ChatRequest
from sanctum_proxy.protocols.reply import held_back, rest_after
from sanctum_proxy.protocols.stream_writer import KEEPALIVE, StreamWriter
from sanctum_proxy.repair import constrain
from sanctum_proxy.repair.events import Answer, ContentDelta, FieldDelta, Final, Sender
from sanctum_proxy.repair.plan import Plan
from sanctum_proxy.repair.streaming import PASSED, Assembler, with_tools
from sanctum_proxy.routes import choices
from sanctum_proxy.routes.disconnect import ClientGone, gone_response, unless_disconnected
from sanctum_proxy.routes.rounds import Shown, kept_run, recorder_of, run_traced
from sanctum_proxy.upstreams.client import Upstream
from sanctum_proxy.web.json_response import error_response, unexpected

DONE = b"data: [DONE]\n\n"
E = TypeVar("E")  # what a stream's events are: the loop's (Shown), or n > 1 choices' (Several)
Several = tuple[int, Shown] | choices.Finals  # the events of n > 1 choices (routes/choices.Choices.events)


def stream_sender(upstream: Upstream, auth: str | None, *, lead: bool = False,
                  names: frozenset[str] = frozenset()) -> Sender:
    """One upstream round read as a stream. Yields an empty ContentDelta once the upstream has accepted the
    round (so the client's headers and keep-alives can start), the content the assembler releases when the
    round is live, then the whole Answer. `lead`: the model's answers may open with a bare call name
    (`families.opens_bare`). `names`: the offered tools (a prompted round's body has none), whose bare calls
    are held (`assembler_for`)."""

    async def send_stream(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        async with upstream.chat_stream(body, auth) as chunks:
            async for event in read_round(chunks, assembler_for(body, lead, names), live):
                yield event

    return send_stream


def streamed(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def assembler_for(body: dict[str, Any], lead: bool, names: frozenset[str] = frozenset()) -> Assembler:
    """The round's assembler; a known tool's name before a parenthesis holds too (a bare `NAME(...)` line is a
    call: codecs/pythonic.py), and an answer opening with one's bare name (`NAME\n{...}`), the tools being the
    body's and `names`."""
    offered = names | {t["function"]["name"] for t in body.get("tools") or () if isinstance(t, dict)
                       and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)}
    return Assembler(starts=with_tools(offered), text_branch=constrain.is_constrained(body), lead=lead,
                     names=frozenset(offered),
                     client_json=constrain.asks_json(body))


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
                        auth: str | None, *, is_legacy: bool = False, writer: Writer[Shown] | None = None,
                        refuse: Callable[[ProxyError], Response] | None = None) -> Response:
    """Headers wait for the first event (the upstream accepted a round), so an error before it is a plain
    HTTP error with its status. Another protocol's endpoint passes its own `writer` (an object with
    `opening()`, `render(event)`, `ended` and `keepalive`, like SseWriter) and `refuse` (its error shape)."""
    settings: Settings = request.app.state.settings
    upstream, lead = request.state.destination.upstream, families.opens_bare(plan.prompt_format)
    names = plan.book.name_set if plan.book is not None else frozenset()
    send = stream_sender(upstream, auth, lead=lead, names=names)
    if writer is not None:
        given = writer
        return await _respond(request, plan, trace_id, run_traced(request, plan, send), lambda: given, refuse)
    include_usage = (chat.body.get("stream_options") or {}).get("include_usage") is True
    split_reasoning = settings.reasoning_format == "split"

    def meta() -> dict[str, Any]:  # when the upstream accepted a round
        return {"id": f"chatcmpl-{trace_id}", "created": int(time.time()), "model": chat.model}

    if choices.count(chat.body) > 1:
        many = choices.Choices(plan, send, kept_run(request), recorder_of(request))
        several: AsyncIterator[Several] = request.app.state.recorder.watch(
            request, many.events(many.lead_sender(first_of_several(upstream, auth, many, lead, names))))
        return await _respond(request, plan, trace_id, several, lambda: ChoicesWriter(
            meta(), trace_id, omen_style=chat.controls.omens, include_usage=include_usage, legacy=is_legacy,
            split_reasoning=split_reasoning), refuse)
    return await _respond(request, plan, trace_id, run_traced(request, plan, send), lambda: SseWriter(
        meta(), trace_id, omen_style=chat.controls.omens, include_usage=include_usage, legacy=is_legacy,
        split_reasoning=split_reasoning), refuse)


async def _respond(request: Request, plan: Plan, trace_id: str, events: AsyncIterator[E],
                   writer_of: Callable[[], Writer[E]], refuse: Callable[[ProxyError], Response] | None) -> Response:
    """The stream's response, once its first event is in: an error, or the headers and the pump."""
    settings: Settings = request.app.state.settings
    queue: asyncio.Queue[E | ProxyError] = asyncio.Queue(maxsize=64)
    task = asyncio.create_task(_produce(events, queue))
    early: list[E | ProxyError] = []  # omens before the upstream accepted a round (a probe, a fallback): held
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
        return refuse(first) if refuse else error_response(first, trace_id=trace_id)
    writer = writer_of()
    for omen in early:
        writer.render(omen)
    trace = getattr(request.state, "trace", None)
    mode = trace.mode if trace is not None else plan.mode  # after a fallback: the mode answering
    headers = {"x-sanctum-spell-calling": mode, "x-sanctum-trace-id": trace_id,
               "cache-control": "no-cache"}
    return StreamingResponse(pump(writer, first, queue, task, settings.keepalive_seconds),
                             media_type="text/event-stream", headers=headers)


def first_of_several(upstream: Upstream, auth: str | None, many: choices.Choices,
                     lead: bool, names: frozenset[str] = frozenset()) -> Sender:
    """The first round of n > 1 choices, streamed: the upstream's chunks split by choice index as they come;
    choice 0's are read here, each other choice's go to the loop started for it when it first shows."""

    async def first(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        body = streamed(body)
        queues: dict[int, choices.ChunkQueue] = {}

        async def split(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
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

        async with upstream.chat_stream(body, auth) as chunks:
            async for event in read_round(split(chunks), assembler_for(body, lead, names), live):
                yield event

    return first


def queued_round(queue: choices.ChunkQueue, lead: bool, names: frozenset[str] = frozenset()) -> Sender:
    """A first round read from the chunks of one choice that `first_of_several` puts in `queue`."""

    def first(body: dict[str, Any], live: bool) -> AsyncIterator[ContentDelta | FieldDelta | Answer]:
        return read_round(choices.queued_chunks(queue), assembler_for(body, lead, names), live)

    return first


class ChoicesWriter:
    """The events of n > 1 choices ((index, event) pairs, routes/choices.py) as one stream: each choice's
    chunks under its own index (an SseWriter per choice), then the usage chunk if asked, the `sanctum` of them
    all on the last chunk, `[DONE]`."""

    keepalive = KEEPALIVE

    def __init__(self, meta: dict[str, Any], trace_id: str, *, omen_style: str,
                 include_usage: bool, legacy: bool, split_reasoning: bool = False) -> None:
        self.meta, self.trace_id = meta, trace_id
        self.split_reasoning = split_reasoning
        self.omen_style, self.include_usage, self.legacy = omen_style, include_usage, legacy
        self.writers: dict[int, SseWriter] = {}
        self.pending: tuple[oc.Chunk, SseWriter] | None = None  # the last finish chunk (and its writer), held
        # for the request's own fields
        self.ended = False

    def writer(self, index: int) -> SseWriter:
        if index not in self.writers:
            self.writers[index] = SseWriter(dict(self.meta), self.trace_id, omen_style=self.omen_style,
                                            legacy=self.legacy, index=index,
                                            split_reasoning=self.split_reasoning)
        return self.writers[index]

    def opening(self) -> bytes:
        return b""

    def render(self, event: Several | ProxyError) -> list[bytes]:
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
        self.pending = (writer.chunk({}, finish_reason), writer)
        return out

    def flush(self) -> list[bytes]:
        if self.pending is None:
            return []
        (finish, writer), self.pending = self.pending, None
        return [writer.data(finish)]

    def finish(self, finals: choices.Finals) -> list[bytes]:
        """The last finish chunk (by the writer of its choice), then the usage chunk (by choice 0's)."""
        lead = self.writer(0)
        assert self.pending is not None
        (finish, writer), self.pending = self.pending, None
        last = closing(finish, lead.meta, finals, self.trace_id, self.include_usage)
        return [*(w.data(c) for w, c in zip((writer, lead), last, strict=False)), DONE]


def closing(finish: oc.Chunk, meta: dict[str, Any], final: Final, trace_id: str,
            include_usage: bool) -> list[oc.Chunk]:
    """The last chunks of a chat stream (SseWriter's and ChoicesWriter's): the finish chunk, the usage chunk when
    asked for and the upstream sent usage (no usage chunk of null), the answering round's own fields and the
    `sanctum` block on the last of them."""
    sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return oc.closing(finish, meta, final.usage if include_usage else None, final.extra, sanctum)


def _omen(event: object) -> bool:
    """An omen, alone or of one of n > 1 choices ((index, omen))."""
    return isinstance(event, om.Omen) or isinstance(event, tuple) and isinstance(event[-1], om.Omen)


async def _produce(events: AsyncIterator[E], queue: asyncio.Queue[E | ProxyError]) -> None:
    try:
        async for event in events:
            await queue.put(event)
    except ProxyError as exc:
        await queue.put(exc)
    except Exception as exc:  # a bug must end the stream with an error, never a silent cut
        await queue.put(unexpected(exc))
    else:  # the events ended without an answer or an error: a bug, said in the stream
        await queue.put(no_answer())


async def pump(writer: Writer[E], first: E | ProxyError, queue: asyncio.Queue[E | ProxyError],
               task: asyncio.Task[None], keepalive: float) -> AsyncIterator[bytes]:
    """The response body: rendered events until the Final or an error, keep-alives while the queue is quiet.
    Events already waiting go out in one write. Leaving early (the client went away) cancels the producer
    and with it the upstream stream."""
    try:
        out = [*_rendered(writer, None), *_rendered(writer, first)]
        while True:
            while not writer.ended and not queue.empty():
                out += _rendered(writer, queue.get_nowait())
            if out:
                yield b"".join(out)
                out = []
            if writer.ended:
                return
            try:
                async with asyncio.timeout(keepalive):  # not wait_for: that wraps each get in a new task
                    out = _rendered(writer, await queue.get())
            except TimeoutError:
                yield writer.keepalive
    finally:
        task.cancel()


def _rendered(writer: Writer[E], event: E | ProxyError | None) -> list[bytes]:
    """`writer.render(event)` (its opening for None); a writer that fails on an event ends the stream with the
    500 error in its own shape (or, failing that too, a bare error event), never a silent cut."""
    try:
        return [writer.opening()] if event is None else writer.render(event)
    except Exception as exc:
        error = unexpected(exc)
    writer.ended = True
    try:
        return writer.render(error)
    except Exception:
        return [b"event: error\ndata: " + orjson.dumps({"type": "error", "error": error.body()["error"]}) + b"\n\n"]


def _joined_logprobs(first: dict[str, Any] | None, then: dict[str, Any] | None) -> dict[str, Any] | None:
    if first is None or then is None:
        return then if first is None else first
    return {**then, "content": [*(first.get("content") or []), *(then.get("content") or [])]}


E_contra = TypeVar("E_contra", contravariant=True)


class Writer(Protocol[E_contra]):
    """What `pump` writes with: SseWriter, protocols' ResponsesWriter and MessagesWriter (Writer[Shown]: the
    loop's events) and ChoicesWriter (Writer[Several]); each also renders the ProxyError that ends a stream."""

    keepalive: bytes
    ended: bool

    def opening(self) -> bytes: ...

    def render(self, event: E_contra | ProxyError, /) -> list[bytes]: ...


class SseWriter(StreamWriter):
    """The loop's events as SSE bytes (chat.completion.chunks built by core/openai_chat). Pure but for the running
    record of what the client has seen."""

    def __init__(self, meta: dict[str, Any], trace_id: str, *, omen_style: str = "comments",
                 include_usage: bool = False, legacy: bool = False, index: int = 0,
                 split_reasoning: bool = False) -> None:
        omen = om.sse_event if omen_style == "events" else om.sse_comment
        super().__init__(omen if not index else lambda o: omen(om.of_choice(o, index)))
        self.meta, self.trace_id = meta, trace_id
        # reasoning_format = "split": reasoning markup in content goes out as reasoning_content deltas
        self.splitter = reasoning.Splitter() if split_reasoning else None
        self.index = index  # the choice this writer's chunks are of (n > 1: routes/choices.py)
        self.include_usage, self.legacy = include_usage, legacy
        self.shown = Accumulated()
        self.held = Accumulated()  # live whitespace not sent yet: it goes out with the next text, or the final content
        self.held_logprobs: dict[str, Any] | None = None
        self.shown_reasoning: dict[str, Accumulated] = {}
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

    def chunk(self, delta: oc.Delta, finish_reason: str | None = None) -> oc.Chunk:
        return oc.chunk(self.meta, delta, finish_reason, self.index)

    def data(self, payload: oc.Chunk | oc.ErrorBody) -> bytes:
        out = b"data: " + orjson.dumps(payload) + b"\n\n"
        return out if self.opened else self.opening(now=True) + out

    def opening(self, *, now: bool = False) -> bytes:
        """The role chunk: held (b"") until the first data, so it can carry the upstream's id and model."""
        if self.opened or not now:
            return b""
        self.opened = True
        return self.data(self.chunk(oc.role_delta()))

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
        payload = self.chunk(oc.text_delta(name, first))
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
                out.append(self.data(self.chunk(oc.text_delta(name, text))))
        return out

    def reasoning(self, name: str, text: str) -> bytes:
        self.shown_reasoning.setdefault(name, Accumulated()).__iadd__(text)
        return self.data(self.chunk(oc.text_delta(name, text)))

    def delta(self, event: ContentDelta | FieldDelta) -> list[bytes]:
        if isinstance(event, FieldDelta):
            return self.omens.due() + [self.reasoning(event.field, event.text)]
        if event.meta:
            self.adopt(event.meta)
        logprobs = _joined_logprobs(self.held_logprobs, event.logprobs)
        text = held_back(self.held, event.text)  # trailing whitespace waits for the text after it
        self.held_logprobs = None if text else logprobs
        if text and logprobs:
            return self.omens.due() + [self.content_with(text, logprobs)]
        return self.omens.due() + ([self.content(text)] if text else [])

    def fail(self, error: ProxyError) -> list[bytes]:
        return [self.data(error.body())]

    def finish(self, final: Final) -> list[bytes]:
        out, finish_reason = self.choice_end(final)
        last = closing(self.chunk({}, finish_reason), self.meta, final, self.trace_id, self.include_usage)
        return [*out, *(self.data(c) for c in last), DONE]

    def choice_end(self, final: Final) -> tuple[list[bytes], str]:
        """The end of this writer's choice but its finish chunk: omens, unseen reasoning and content, calls;
        and the finish_reason that chunk is to carry."""
        out = self.omens.due(final.omens)
        for name in PASSED:  # the accepted round's reasoning and refusal, unless a round's was shown live
            thought, seen = final.message.get(name), str(self.shown_reasoning.get(name, ""))
            if isinstance(thought, str) and thought.startswith(seen) and len(thought) > len(seen):
                out.append(self.reasoning(name, thought[len(seen):]))
        content = final.message.get("content") or ""
        rest = rest_after(str(self.shown), str(self.held), content)
        if rest:
            out.append(self.content(rest))
        if self.splitter is not None:
            out += self.split(self.splitter.flush())
        finish_reason = final.finish_reason
        calls = final.message.get("tool_calls") or []
        if self.legacy and calls:
            out += [self.data(self.chunk(delta)) for delta in oc.function_call_deltas(calls[0])]
            finish_reason = "function_call"
        else:
            for index, call in enumerate(calls):
                out += [self.data(self.chunk(delta)) for delta in oc.tool_call_deltas(index, call)]
        return out, finish_reason
