"""What the stream writers share (protocols/chat_events.SseWriter for chat, responses_events.ResponsesWriter,
protocols/messages_events.MessagesWriter): routes/sse.EventStream hands each the round loop's events; an
omen is held until the next event goes out (`core/omens.Held`), an error or the Final ends the stream.

A writer says how it writes a live delta (`delta`), the error that ends the stream (`fail`) and the answer
(`finish`, which sends the held omens itself: the chat writer sends the Final's). Pure but for the running record
of what the client has seen.
"""

from __future__ import annotations

from collections.abc import Callable

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.repair.events import ContentDelta, FieldDelta, Final, StreamItem

KEEPALIVE = b": keep-alive\n\n"


class StreamWriter:
    keepalive = KEEPALIVE
    media_type = "text/event-stream"

    def __init__(self, omen: Callable[[om.Omen], bytes] = om.sse_comment) -> None:
        self.omens = om.Held(omen)  # the loop's omens so far (render holds each one)
        self.ended = False

    def opening(self) -> bytes:
        return b""

    def render(self, event: StreamItem) -> list[bytes]:
        if isinstance(event, om.Omen):  # held: sent with the next event that goes out
            self.omens.hold(event)
            return []
        if isinstance(event, ProxyError):
            self.ended = True
            return self.omens.due() + self.fail(event)
        if isinstance(event, Final):
            self.ended = True
            return self.finish(event)
        return self.delta(event)

    def delta(self, event: ContentDelta | FieldDelta) -> list[bytes]:
        """A live delta, after the omens held (none sent for a delta this writer does not show)."""
        raise NotImplementedError

    def fail(self, error: ProxyError) -> list[bytes]:
        raise NotImplementedError

    def finish(self, final: Final) -> list[bytes]:
        raise NotImplementedError
