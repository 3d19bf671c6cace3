"""The streamed answer of POST /v1/chat/completions: the round loop's events as `chat.completion.chunk`s.

The role chunk waits for the first data, so it carries the upstream's id and model.
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
ChoiceEvent = tuple[int, StreamItem] | Final  # n > 1: (index, event), then their Finals


def chat_meta(trace_id: str, model: str, now: int, upstream: Mapping[str, object] | None = None) -> oc.Meta:
    """A chat answer's id, created, model and system_fingerprint: the upstream's where sent, else the proxy's."""
    return adopted({"id": f"chatcmpl-{trace_id}", "created": now, "model": model}, upstream or {})


def adopted(meta: oc.Meta, upstream: Mapping[str, object]) -> oc.Meta:
    """`meta` with the upstream's META fields over it, in place, as sent."""
    fields = cast("JSONObject", meta)  # passed on untouched, whatever their type
    for key in META:
        if upstream.get(key):
            fields[key] = upstream[key]
    return meta


class ChoicesWriter:
    """n > 1 choices as one stream: an SseWriter per choice, then one usage chunk and `sanctum`."""

    keepalive = KEEPALIVE
    media_type = "text/event-stream"

    def __init__(self, meta: oc.Meta, trace_id: str, *, omen_style: str,
                 include_usage: bool, legacy: bool, split_reasoning: bool = False) -> None:
        self.meta, self.trace_id = meta, trace_id
        self.split_reasoning = split_reasoning
        self.omen_style, self.include_usage, self.legacy = omen_style, include_usage, legacy
        self.writers: dict[int, SseWriter] = {}
        self.pending: tuple[oc.Chunk, SseWriter] | None = None  # held for the request's own fields
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
        if isinstance(event, Final):  # the Finals of them all
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
        """The last finish chunk, then the usage chunk."""
        lead = self.writer(0)
        assert self.pending is not None
        (finish, writer), self.pending = self.pending, None
        last = closing(finish, lead.meta, finals, self.trace_id, self.include_usage)
        return [*(w.data(c) for w, c in zip((writer, lead), last, strict=False)), DONE]


def closing(finish: oc.Chunk, meta: oc.Meta, final: Final, trace_id: str,
            include_usage: bool) -> list[oc.Chunk]:
    """The finish chunk, the usage chunk where asked and sent, and `sanctum` on the last."""
    sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, trace_id)
    return oc.closing(finish, meta, final.usage if include_usage else None, final.extra, sanctum)


def joined_logprobs(first: JSONObject | None, then: JSONObject | None) -> JSONObject | None:
    if first is None or then is None:
        return then if first is None else first
    return {**then, "content": [*_entries(first), *_entries(then)]}


def _entries(logprobs: JSONObject) -> list[object]:
    content = logprobs.get("content")
    return content if isinstance(content, list) else []


class SseWriter(StreamWriter):
    """The loop's events as SSE bytes, keeping a record of what the client has seen."""

    def __init__(self, meta: oc.Meta, trace_id: str, *, omen_style: str = "comments",
                 include_usage: bool = False, legacy: bool = False, index: int = 0,
                 split_reasoning: bool = False) -> None:
        omen = om.sse_event if omen_style == "events" else om.sse_comment
        super().__init__(omen if not index else lambda o: omen(om.of_choice(o, index)))
        self.meta, self.trace_id = meta, trace_id
        self.live = LiveText(split_reasoning)
        self.index = index
        self.include_usage, self.legacy = include_usage, legacy
        self.held_logprobs: JSONObject | None = None
        self.shown_reasoning: dict[str, Accumulated] = {}
        self.opened = False
        self._heads()

    def _heads(self) -> None:
        # the hot path: everything around the text is serialised once
        head = orjson.dumps(self.chunk({"content": ""})).split(b'"content":""', 1)
        self._content_head, self._content_tail = b'data: ' + head[0] + b'"content":', head[1] + b"\n\n"

    def adopt(self, upstream: Mapping[str, object]) -> None:
        """The live round's own meta for every chunk; a fingerprint first named later, from then on."""
        if not self.opened:
            adopted(self.meta, upstream)
        elif upstream.get("system_fingerprint") and not self.meta.get("system_fingerprint"):
            self.meta["system_fingerprint"] = cast("str", upstream["system_fingerprint"])
        else:
            return
        self._heads()

    def chunk(self, delta: oc.Delta, finish_reason: str | None = None) -> oc.Chunk:
        return oc.chunk(self.meta, delta, finish_reason, self.index)

    def data(self, payload: oc.Chunk | oc.ErrorBody) -> bytes:
        out = b"data: " + orjson.dumps(payload) + b"\n\n"
        return out if self.opened else self.opening(now=True) + out

    def opening(self, *, now: bool = False) -> bytes:
        """Held (b"") until the first data."""
        if self.opened or not now:
            return b""
        self.opened = True
        return self.data(self.chunk(oc.role_delta()))

    def content(self, text: str) -> bytes:
        return b"".join(self.split(self.live.split(text)))

    def content_with(self, text: str, logprobs: JSONObject) -> bytes:
        """With the upstream's logprobs of its tokens."""
        pieces = self.live.split(text)
        if not pieces:
            return b""
        (name, first), rest = pieces[0], pieces[1:]
        payload = self.chunk(oc.text_delta(name, first))
        payload["choices"][0]["logprobs"] = logprobs
        return self.data(payload) + b"".join(self.split(rest))

    def split(self, pieces: list[tuple[str, str]]) -> list[bytes]:
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
        text = self.live.take(event.text)  # trailing whitespace waits
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
        """This choice's end but its finish chunk, and the finish_reason that chunk carries."""
        self.adopt(final.meta)  # no live round showed its ids: the accepted round's, as unstreamed
        out = self.omens.due(final.omens)
        for name in PASSED:  # unless a round's was shown live
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
