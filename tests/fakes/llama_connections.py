"""llama-server's connection behaviour after a streamed answer, put in front of any fake upstream.

Measured on the real llama-server (`.ci/llama.sh`'s build; pinned by tests/e2e/test_llama_server_raw.py): it
answers a streamed request with `Keep-Alive: timeout=5, max=100` and no `Connection: close`, yet closes the
connection right after the stream's `0\r\n\r\n` (read by the client or not), so the next request sent on it
gets no answer (http.client: "Remote end closed connection without response"; aiohttp: "Server disconnected"
or "Can not write request body"). Why: docs/upstream-connections.md. Plain answers keep it working. A client
pool that hands such a connection to the next round loses that round. The scripted fake (uvicorn, as vLLM's
server) keeps connections working after a stream, as Ollama's Go net/http does, so this TCP relay sits between
the proxy and the fake and does what llama-server does; with `spend_streams=False` it only relays and counts
(what a keeping server does, seen from the connections).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass
class _Connection:
    streamed: bool = False  # the response being relayed is an event stream
    spent: bool = False  # a streamed response ended on this connection: it takes no new request
    tail: bytes = b""
    streams: int = 0  # streamed answers relayed on this connection


@dataclass
class StreamSpentRelay:
    """Listen on 127.0.0.1 (a free port), relay each connection to `target_port`."""

    target_port: int
    every_answer: bool = False  # any answer spends its connection (a server whose keep-alive ran out)
    spend_streams: bool = True  # False: a connection stays good after a stream (Ollama, vLLM)
    refused: int = 0  # requests that arrived on a spent connection and were dropped unanswered
    connections: int = 0
    _seen: list[_Connection] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _server: asyncio.AbstractServer | None = None
    _thread: threading.Thread | None = None

    @property
    def streams(self) -> list[int]:
        """Per connection that carried any event stream so far: how many it carried."""
        return [c.streams for c in self._seen if c.streams]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StreamSpentRelay:
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._shutdown())
            self._loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream_in, upstream_out = await asyncio.open_connection("127.0.0.1", self.target_port)
        conn = _Connection()
        self._seen.append(conn)
        up = asyncio.ensure_future(self._requests(client_in, upstream_out, client_out, conn))
        down = asyncio.ensure_future(self._answers(upstream_in, client_out, conn))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            for writer in (client_out, upstream_out):
                writer.close()

    async def _requests(self, source: asyncio.StreamReader, upstream: asyncio.StreamWriter,
                        client: asyncio.StreamWriter, conn: _Connection) -> None:
        while piece := await source.read(65536):
            if conn.spent:
                self.refused += 1
                client.close()  # like llama-server: closed without an answer (a FIN, no status line)
                return
            upstream.write(piece)
            await upstream.drain()

    async def _answers(self, source: asyncio.StreamReader, client: asyncio.StreamWriter, conn: _Connection) -> None:
        while piece := await source.read(65536):
            seen = conn.tail + piece
            head = seen.rfind(b"HTTP/1.1 ")
            if head >= 0 and head + 9 > len(conn.tail):  # a new response head (uvicorn writes one whole)
                conn.streamed = b"text/event-stream" in seen[head:].lower()
            conn.tail = seen[-64:]
            if conn.streamed and b"\r\n0\r\n\r\n" in seen:  # a chunked stream ended
                conn.streams += 1
                conn.spent = conn.spent or self.spend_streams
                conn.streamed, conn.tail = False, b""
            if self.every_answer:
                conn.spent = True
            client.write(piece)
            await client.drain()
