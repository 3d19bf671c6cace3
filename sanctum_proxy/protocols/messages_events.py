"""The streamed answer of POST /v1/messages: the round loop's events as Anthropic SSE events.

Reasoning streams into a first thinking block, text into a text block; at the end come late reasoning as a second
thinking block, a tool_use block per call, message_delta and message_stop. Pings fill hidden rounds; omens are SSE
comments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from sanctum_proxy.core import omens as om
from sanctum_proxy.core import reasoning
from sanctum_proxy.core.accumulated import Accumulated
from sanctum_proxy.core.shapes import JSONValue
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.protocols import messages_api as api
from sanctum_proxy.protocols.reply import LiveText, Reply, Thought
from sanctum_proxy.protocols.stream_writer import StreamWriter
from sanctum_proxy.repair.events import ContentDelta, FieldDelta, Final


def event(kind: str, **fields: JSONValue) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


PING = event("ping")


class MessagesWriter(StreamWriter):
    keepalive = PING

    def __init__(self, message: Mapping[str, JSONValue], trace_id: str,
                 reply_of: Callable[[Final], Reply], *, split_reasoning: bool = False) -> None:
        self.message, self.trace_id = message, trace_id
        super().__init__()
        self.reply_of = reply_of
        self.blocks = 0
        self.text_open = False
        self.thinking_open = False
        self.thought = Thought()
        self.shown = Accumulated()
        self.live = LiveText(split_reasoning)

    def opening(self) -> bytes:
        return event("message_start", message=self.message) + PING

    def delta(self, item: ContentDelta | FieldDelta) -> list[bytes]:
        if isinstance(item, FieldDelta):  # a refusal goes out with the answer's end
            return self.omens.due() + self.reason(item.text) if item.field in reasoning.FIELDS else []
        out = self.omens.due()
        for kind, text in self.live.feed(item.text):
            out += self.text(text) if kind == "content" else self.reason(text)
        return out

    def reason(self, text: str) -> list[bytes]:
        """Reasoning live in the first (thinking) block until the text block starts, then held for the end."""
        if not text:
            return []
        if self.text_open:
            self.thought.late += text
            return []
        out = []
        if not self.thinking_open:
            self.thinking_open = True
            out.append(self.start(api.thinking_block("")))
        self.thought.live += text
        return out + [event("content_block_delta", index=self.blocks - 1,
                            delta={"type": "thinking_delta", "thinking": text})]

    def close_thinking(self) -> list[bytes]:
        if not self.thinking_open:
            return []
        self.thinking_open = False
        return [event("content_block_stop", index=self.blocks - 1)]

    def fail(self, error: ProxyError) -> list[bytes]:
        return [event("error", error=api.error_body(error)["error"])]

    def text(self, text: str) -> list[bytes]:
        out = []
        if not self.text_open:
            out += self.close_thinking()
            self.text_open = True
            out.append(self.start({"type": "text", "text": ""}))
        self.shown += text
        out.append(event("content_block_delta", index=self.blocks - 1, delta={"type": "text_delta", "text": text}))
        return out

    def start(self, block: api.ContentBlock) -> bytes:
        self.blocks += 1
        return event("content_block_start", index=self.blocks - 1, content_block=block)

    def finish(self, final: Final) -> list[bytes]:
        reply = self.reply_of(final)
        out = self.omens.due() + self.reason(self.thought.rest(reply.reasoning)) + self.close_thinking()
        rest = self.live.rest(final.message.get("content"), api.answer_text(reply))
        out += self.text(rest) if rest or (not reply.calls and not self.text_open) else []
        if self.text_open:
            out.append(event("content_block_stop", index=self.blocks - 1))
        if self.thought.late:  # a thinking block after the text
            out += [self.start(api.thinking_block("")),
                    event("content_block_delta", index=self.blocks - 1,
                          delta={"type": "thinking_delta", "thinking": str(self.thought.late)}),
                    event("content_block_stop", index=self.blocks - 1)]
        for call in reply.calls:
            out += [self.start(api.tool_use_block(call.id, call.name, {})),
                    event("content_block_delta", index=self.blocks - 1,
                          delta={"type": "input_json_delta", "partial_json": call.arguments}),
                    event("content_block_stop", index=self.blocks - 1)]
        sanctum = om.sanctum_object(final.mode, final.rounds, final.omens, self.trace_id)
        out.append(event("message_delta", delta={"stop_reason": api.stop_reason(reply), "stop_sequence": None},
                         usage=api.usage(reply), sanctum=sanctum))
        return out + [event("message_stop")]
