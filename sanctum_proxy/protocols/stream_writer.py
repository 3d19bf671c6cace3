"""What the chat, Responses and Messages stream writers share: held omens, live deltas, the end."""

from __future__ import annotations

from collections.abc import Callable

from sanctum_proxy.core import omens as om
from sanctum_proxy.errors import ProxyError
from sanctum_proxy.repair.loop_data import ContentDelta, FieldDelta, Final, StreamItem

KEEPALIVE = b": keep-alive\n\n"


class StreamWriter:
    keepalive = KEEPALIVE
    media_type = "text/event-stream"

    def __init__(self, omen: Callable[[om.Omen], bytes] = om.sse_comment) -> None:
        self.omens = om.Held(omen)
        self.ended = False

    def opening(self) -> bytes:
        return b""

    def render(self, event: StreamItem) -> list[bytes]:
        if isinstance(event, om.Omen):  # sent with the next event that goes out
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
        """A live delta after the held omens; none for a delta this writer does not show."""
        raise NotImplementedError

    def fail(self, error: ProxyError) -> list[bytes]:
        raise NotImplementedError

    def finish(self, final: Final) -> list[bytes]:
        raise NotImplementedError
