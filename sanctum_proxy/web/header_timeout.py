"""uvicorn's HTTP protocols with a deadline in every connection state, a bound on request heads, and room kept for
new connections (docs/security.md). One timer per connection, restarted when its state changes, never by data.

  Head, body: until its end, `header_read_timeout`, `body_read_timeout` and a second.
  Drain (answered, body unread), idle: uvicorn's keep-alive timeout.
  Answer: none; an answer the client takes nothing of is dropped after `answer_write_timeout`.
Pipelining: reading goes on behind an answer, so a client leaving is seen; at most MAX_PIPELINED requests and
MAX_QUEUED_BYTES wait, the rest is not read and the connection closes after the answers owed.
Room: at the connection limit, the oldest read-deadline connection of the client holding the most is closed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from typing import Any, Literal

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from sanctum_proxy.web.connection_limit import owner

Reading = Literal["head", "body", "done"]
State = Literal["head", "body", "drain", "idle"] | None

MAX_PIPELINED = 4  # requests waiting behind an answer
MAX_QUEUED_BYTES = 1024 * 1024

# Per server: connections with a read deadline, longest first.
_WAITING: weakref.WeakKeyDictionary[ServerState, dict[HeadDeadline, None]] = weakref.WeakKeyDictionary()


def too_large_answer(limit: int) -> bytes:
    """In OpenAI's error shape: the endpoint is not known yet."""
    body = orjson.dumps({"error": {"message": f"request head over {limit} bytes (max_head_bytes)",
                                   "type": "invalid_request_error", "param": None, "code": "head_too_large"}})
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)) + body


class HeadDeadline:
    """Mixed into a uvicorn protocol."""

    # set from the settings before serving, in each worker process too
    seconds: float = 10.0
    body_seconds: float = 31.0
    write_seconds: float = 60.0
    max_head_bytes: int = 64 * 1024
    keyed: bool = False  # a presented key names the client
    server_state: ServerState
    flow: Any
    client: Any
    connections: set[Any]
    limit_concurrency: int | None
    timeout_keep_alive: int
    room_limit: int | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any
    _deadline: asyncio.TimerHandle | None = None
    _state: State | Literal["new"] = "new"
    _stall: asyncio.TimerHandle | None = None
    _head_bytes: int = 0
    _queued_bytes: int = 0
    _refusing: bool = False  # past the pipelining bound

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn would refuse in plain text; the app does it in the protocol's shape
        self.room_limit, self.limit_concurrency = self.limit_concurrency, None

    def _reading(self) -> Reading:
        raise NotImplementedError

    def _feed(self, data: bytes) -> None:
        raise NotImplementedError

    def _waiting(self) -> dict[HeadDeadline, None]:
        return _WAITING.setdefault(self.server_state, {})

    def _make_room(self) -> None:
        """Close the connections waiting longest on a read deadline."""
        limit = self.room_limit
        if limit is None:
            return
        excess = len(self.connections) - limit + 1
        waiting = [other for other in self._waiting() if other is not self]
        if excess <= 0 or not waiting:
            return
        owners = {other: other._owner() for other in waiting}
        held = Counter(owners.values())
        for _ in range(min(excess, len(waiting))):
            most = max(held, key=lambda who: held[who])
            oldest = next(other for other in owners if owners[other] == most)
            del owners[oldest]
            held[most] -= 1
            if not held[most]:
                del held[most]
            oldest._too_slow()

    def _owner(self) -> bytes:
        scope = getattr(self.cycle, "scope", None) if self._state in ("body", "drain") else None
        return owner(scope, self.client, self.keyed)

    def _settle(self) -> None:
        """Arm the deadline of a new state."""
        reading = self._reading()
        answered = self.cycle is None or self.cycle.response_complete
        state: State = reading if reading == "head" else (
            ("drain" if answered else "body") if reading == "body" else ("idle" if answered else None))
        if state == self._state or self.transport.is_closing():
            return
        self._disarm()
        self._state = state
        if state is not None:
            seconds = {"head": self.seconds, "body": self.body_seconds}.get(state, self.timeout_keep_alive)
            self._deadline = self.loop.call_later(seconds, self._too_slow)
            self._waiting()[self] = None

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting().pop(self, None)

    def _too_slow(self) -> None:
        self._disarm()
        self._end_stall()
        self.connections.discard(self)  # now: connection_lost may come after a new head
        if not self.transport.is_closing():
            self.transport.abort()  # close() would wait for the client to read

    def _head_too_large(self) -> None:
        self._disarm()
        self.connections.discard(self)
        self.transport.write(too_large_answer(self.max_head_bytes))
        self.transport.close()

    def _refuse_rest(self) -> None:
        """Read nothing more; close after the answers owed."""
        raise NotImplementedError

    def _behind(self) -> bool:
        """Bytes now wait behind an answer (h11 parses them later)."""
        return False

    def _queued(self, size: int) -> bool:
        """False (the rest refused) past MAX_QUEUED_BYTES."""
        self._queued_bytes += size
        if self._queued_bytes > MAX_QUEUED_BYTES:
            self._refuse_rest()
            return False
        return True

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return  # read (a client leaving is seen), never parsed
        while data and not self.transport.is_closing() and not self._refusing:
            if self._reading() == "body" or self._behind():
                piece, data = data, b""
            else:
                room = self.max_head_bytes - self._head_bytes
                if room <= 0:
                    self._head_too_large()
                    return
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
            self._feed(piece)
            self._settle()

    def _head_done(self) -> None:
        self._head_bytes = 0

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._stall is None:
            self._stall = self.loop.call_later(self.write_seconds, self._too_slow)

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        self._end_stall()

    def _end_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._make_room()
        self._settle()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._settle()
        if self._refusing:
            self.flow.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._end_stall()
        super().connection_lost(exc)  # type: ignore[misc]


class H11HeaderTimeoutProtocol(HeadDeadline, H11Protocol):  # type: ignore[misc]
    """uvicorn's protocol without httptools."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head_bytes + 1)

    def _reading(self) -> Reading:
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            return "body"
        if state is h11.IDLE and (self.cycle is None or self.conn.trailing_data[0]):
            return "head"
        return "done"

    def _behind(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete and self.conn.their_state is h11.DONE

    def _feed(self, data: bytes) -> None:
        before = self.cycle
        answering = before is not None and not before.response_complete
        if self._behind() and not self._queued(len(data)):
            return  # pipelined bytes past the bound
        H11Protocol.data_received(self, data)
        if self.cycle is not before:
            self._head_done()
        elif answering and not self.cycle.response_complete:
            self.flow.resume_reading()  # h11 paused: a client leaving must be seen

    def _refuse_rest(self) -> None:
        self._refusing = True
        self.cycle.keep_alive = False
        self.flow.resume_reading()


HTTPTOOLS: type[asyncio.Protocol] | None = None
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:
    pass
else:
    class HeaderTimeoutProtocol(HeadDeadline, HttpToolsProtocol):  # type: ignore[misc]
        """At module level: workers pickle it."""

        _parsing: Reading = "head"
        _active: Any = None  # the cycle being answered (`cycle` is the last parsed)
        _invalid: str | None = None  # a parser error, answered after the answers owed

        def _reading(self) -> Reading:
            return self._parsing

        def _feed(self, data: bytes) -> None:
            HttpToolsProtocol.data_received(self, data)

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            self._active = cycle
            if not self.pipeline:
                self._queued_bytes = 0
            super()._start_asgi_task(cycle, app)

        def _waits(self) -> bool:
            return bool(self.pipeline) and self.pipeline[0][0] is self.cycle

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._parsing = "head"

        def on_headers_complete(self) -> None:
            self._parsing = "body"
            self._head_done()
            super().on_headers_complete()
            if self._waits():
                if len(self.pipeline) > MAX_PIPELINED:
                    self._refuse_rest()
                else:
                    self.flow.resume_reading()  # paused, a client that leaves would go unseen

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            if self._waits() and self._queued(len(body)):
                self.flow.resume_reading()

        def _refuse_rest(self) -> None:
            """Drop the request being parsed; the last answer owed closes."""
            if self._waits():
                self.pipeline.popleft()
            last = self.pipeline[0][0] if self.pipeline else self._active
            if last is not None:
                last.keep_alive = False
            self._refusing = True
            self.flow.resume_reading()

        def send_400_response(self, msg: str) -> None:
            """After the answers owed, never inside one."""
            active = self._active
            if active is None or active.response_complete or active.more_body and not active.response_started:
                super().send_400_response(msg)  # the request being read: its answer
                return
            self._invalid, self._refusing = msg, True
            self.flow.resume_reading()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._invalid is not None and not self.pipeline and self._active.response_complete \
                    and not self.transport.is_closing():
                super().send_400_response(self._invalid)

        def connection_lost(self, exc: Exception | None) -> None:
            active = self._active
            super().connection_lost(exc)
            if active is not None and not active.response_complete:
                active.disconnected = True
                active.message_event.set()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._parsing = "done"

    HTTPTOOLS = HeaderTimeoutProtocol


def protocol(parser: str = "auto") -> type[asyncio.Protocol]:
    """auto: httptools where installed, else h11."""
    fast = HTTPTOOLS if parser != "h11" else None
    if parser == "httptools" and fast is None:
        raise ImportError("httptools is not installed")
    return fast or H11HeaderTimeoutProtocol
