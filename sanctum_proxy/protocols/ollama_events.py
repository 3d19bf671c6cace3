"""The round loop's events as POST /api/chat's streamed NDJSON (shapes: docs/decisions.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.shapes import OLLAMA_FIELDS, JSONObject
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.protocols import ollama_api as api
from sanctum_proxy.protocols.reply import LiveText, Reply, Thought
from sanctum_proxy.protocols.stream_writer import StreamWriter
from sanctum_proxy.repair.loop_data import ContentDelta, FieldDelta, Final


def line(value: JSONObject) -> bytes:
    return orjson.dumps(value) + b"\n"


class NdjsonWriter(StreamWriter):
    media_type = "application/x-ndjson"

    def __init__(self, model: str, trace_id: str, reply_of: Callable[[Final], Reply], started_ns: int, *,
                 split_reasoning: bool = False) -> None:
        super().__init__(lambda omen: b"")
        self.model, self.trace_id, self.reply_of, self.started = model, trace_id, reply_of, started_ns
        self.live = LiveText(split_reasoning)
        self.thought = Thought()
        self.keepalive = self.chunk({"role": "assistant", "content": ""})

    def chunk(self, message: JSONObject) -> bytes:
        return line({"model": self.model, "created_at": api.created_at(), "message": message, "done": False})

    def delta(self, item: ContentDelta | FieldDelta) -> list[bytes]:
        if isinstance(item, FieldDelta):
            return self.reason(item.text) if item.field in reasoning.FIELDS else []
        out: list[bytes] = []
        for kind, text in self.live.feed(item.text):
            out += self.reason(text) if kind != "content" else [self.chunk({"role": "assistant", "content": text})]
        return out

    def reason(self, text: str) -> list[bytes]:
        if not text:
            return []
        self.thought.live += text
        return [self.chunk({"role": "assistant", "content": "", "thinking": text})]

    def fail(self, error: ProxyError) -> list[bytes]:
        return [line(api.error_body(error))]

    def finish(self, final: Final) -> list[bytes]:
        reply = self.reply_of(final)
        out = self.reason(self.thought.rest(reply.reasoning))
        rest = self.live.rest(final.message.get("content"), reply.text or reply.refusal)
        calls = api.message(reply).get("tool_calls")
        if rest or calls:
            message: JSONObject = {"role": "assistant", "content": rest}
            if calls:
                message["tool_calls"] = calls
            out.append(self.chunk(message))
        total = time.perf_counter_ns() - self.started
        out.append(line({"model": self.model, "created_at": api.created_at(),
                         "message": {"role": "assistant", "content": ""}, "done_reason": api.done_reason(reply),
                         "done": True, **api.metrics(reply, total, final.extra.get(OLLAMA_FIELDS)),
                         "sanctum": om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)}))
        return out
