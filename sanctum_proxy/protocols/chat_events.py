"""The streamed answer of POST /v1/chat/completions: the round loop's events as `chat.completion.chunk`s
(built by core/openai_chat), beside protocols/responses_events.py and protocols/messages_events.py; the response
(EventStream) is routes/sse.py's.

    opening     the role chunk, held until the first data so it carries the upstream's id and model
    live text   content chunks (whitespace at the end waits for the text after it: `reply.held_back`); with
                reasoning_format "split", reasoning markup goes out as reasoning_content deltas
                (reasoning.Splitter); the upstream's logprobs on the chunk of their tokens
    reasoning   reasoning_content / reasoning (and refusal) deltas as they arrive
    the Final   the omens not sent yet, the reasoning and content the client has not seen, the calls as tool-call
                deltas (function_call ones for the legacy `functions`), the finish chunk, the usage chunk if
                asked, the answering round's own fields and `sanctum` on the last chunk, `[DONE]`
    an error    `data: {"error": {...}}`
n > 1 (routes/choices.py): each choice's SseWriter writes under its own index (ChoicesWriter), with one usage
chunk and `sanctum` at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core import openai_chat as oc
from sanctum_proxy.core.accumulated import Accumulated
from sanctum_proxy.core.shapes import META, JSONObject
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.protocols.reply import LiveText
from sanctum_proxy.protocols.stream_writer import KEEPALIVE, StreamWriter
from sanctum_proxy.repair.events import ContentDelta, FieldDelta, Final, StreamItem
from sanctum_proxy.repair.streaming import PASSED

DONE = b"data: [DONE]\n\n"
ChoiceEvent = tuple[int, StreamItem] | Final  # an event of n > 1 choices: (index, event), then their Finals


def chat_meta(trace_id: str, model: str, now: int, upstream: Mapping[str, object] | None = None) -> oc.Meta:
    """The id, created, model (and system_fingerprint) of a chat answer, streamed or not: the upstream's where
    it sent them, else the proxy's own (`now`: the time, in seconds, for `created`)."""
    return adopted({"id": f"chatcmpl-{trace_id}", "created": now, "model": model}, upstream or {})


def adopted(meta: oc.Meta, upstream: Mapping[str, object]) -> oc.Meta:
    """`meta` with the upstream's own META fields over it (in place), those it sent, as it sent them."""
    fields = cast("JSONObject", meta)  # the upstream's values are passed on untouched, whatever their type
    for key in META:
        if upstream.get(key):
            fields[key] = upstream[key]
    return meta


class ChoicesWriter:
    """The events of n > 1 choices ((index, event) pairs, routes/choices.py) as one stream: each choice's
    chunks under its own index (an SseWriter per choice), then the usage chunk if asked, the `sanctum` of them
    all on the last chunk, `[DONE]`."""

    keepalive = KEEPALIVE
    media_type = "text/event-stream"

    def __init__(self, meta: oc.Meta, trace_id: str, *, omen_style: str,
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
            self.writers[index] = SseWriter(oc.Meta(**self.meta), self.trace_id, omen_style=self.omen_style,
                                            legacy=self.legacy, index=index,
                                            split_reasoning=self.split_reasoning)
        return self.writers[index]

    def opening(self) -> bytes:
        return b""

    def render(self, event: ChoiceEvent | ProxyError) -> list[bytes]:
        if isinstance(event, Final):  # the Finals of them all (routes/choices.Finals)
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

    def finish(self, finals: Final) -> list[bytes]:
        """The last finish chunk (by the writer of its choice), then the usage chunk (by choice 0's)."""
        lead = self.writer(0)
        assert self.pending is not None
        (finish, writer), self.pending = self.pending, None
        last = closing(finish, lead.meta, finals, self.trace_id, self.include_usage)
        return [*(w.data(c) for w, c in zip((writer, lead), last, strict=False)), DONE]


def closing(finish: oc.Chunk, meta: oc.Meta, final: Final, trace_id: str,
            include_usage: bool) -> list[oc.Chunk]:
    """The last chunks of a chat stream (SseWriter's and ChoicesWriter's): the finish chunk, the usage chunk when
    asked for and the upstream sent usage (no usage chunk of null), the answering round's own fields and the
    `sanctum` block on the last of them."""
    sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return oc.closing(finish, meta, final.usage if include_usage else None, final.extra, sanctum)


def joined_logprobs(first: JSONObject | None, then: JSONObject | None) -> JSONObject | None:
    if first is None or then is None:
        return then if first is None else first
    return {**then, "content": [*_entries(first), *_entries(then)]}


def _entries(logprobs: JSONObject) -> list[object]:
    """The token entries of a logprobs object (the assembler's: `content` is a list, or none)."""
    content = logprobs.get("content")
    return content if isinstance(content, list) else []


class SseWriter(StreamWriter):
    """The loop's events as SSE bytes (chat.completion.chunks built by core/openai_chat). Pure but for the running
    record of what the client has seen."""

    def __init__(self, meta: oc.Meta, trace_id: str, *, omen_style: str = "comments",
                 include_usage: bool = False, legacy: bool = False, index: int = 0,
                 split_reasoning: bool = False) -> None:
        omen = om.sse_event if omen_style == "events" else om.sse_comment
        super().__init__(omen if not index else lambda o: omen(om.of_choice(o, index)))
        self.meta, self.trace_id = meta, trace_id
        # whitespace held back; reasoning_format = "split": reasoning markup out as reasoning_content deltas
        self.live = LiveText(split_reasoning)
        self.index = index  # the choice this writer's chunks are of (n > 1: routes/choices.py)
        self.include_usage, self.legacy = include_usage, legacy
        self.held_logprobs: JSONObject | None = None
        self.shown_reasoning: dict[str, Accumulated] = {}
        self.opened = False  # the role chunk goes out with the first data, under the upstream's id and model
        self._heads()

    def _heads(self) -> None:
        # Content chunks are the hot path: everything around the text is serialised once.
        head = orjson.dumps(self.chunk({"content": ""})).split(b'"content":""', 1)
        self._content_head, self._content_tail = b'data: ' + head[0] + b'"content":', head[1] + b"\n\n"

    def adopt(self, upstream: Mapping[str, object]) -> None:
        """The live round's own id, created, model and system_fingerprint, for every chunk (before any is sent)."""
        if self.opened:
            return
        adopted(self.meta, upstream)
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
        """Content (markup in) as chunks of their fields."""
        return b"".join(self.split(self.live.split(text)))

    def content_with(self, text: str, logprobs: JSONObject) -> bytes:
        """A content chunk carrying the upstream's logprobs of its tokens."""
        pieces = self.live.split(text)
        if not pieces:
            return b""
        (name, first), rest = pieces[0], pieces[1:]
        payload = self.chunk(oc.text_delta(name, first))
        payload["choices"][0]["logprobs"] = logprobs
        return self.data(payload) + b"".join(self.split(rest))

    def split(self, pieces: list[tuple[str, str]]) -> list[bytes]:
        """Content pieces (`LiveText.split`), each a chunk of its field."""
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
        logprobs = joined_logprobs(self.held_logprobs, event.logprobs)
        text = self.live.take(event.text)  # trailing whitespace waits for the text after it
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
        rest = self.live.unsent(content)
        if rest:
            out.append(self.content(rest))
        out += self.split(self.live.flush())
        finish_reason = final.finish_reason
        calls = final.message.get("tool_calls") or []
        if self.legacy and calls:
            out += [self.data(self.chunk(delta)) for delta in oc.function_call_deltas(calls[0])]
            finish_reason = "function_call"
        else:
            for index, call in enumerate(calls):
                out += [self.data(self.chunk(delta)) for delta in oc.tool_call_deltas(index, call)]
        return out, finish_reason
