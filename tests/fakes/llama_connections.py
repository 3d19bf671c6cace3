"""llama-server's connection behaviour after a streamed answer, put in front of any fake upstream.

Measured on the real llama-server (`.ci/llama.sh`'s build; pinned by tests/e2e/test_llama_server_raw.py): it
answers a streamed request with `Keep-Alive: timeout=5, max=100` and no `Connection: close`, yet closes the
connection unanswered when the next request arrives on it (http.client: "Remote end closed connection without
response"; aiohttp: "Server disconnected" or "Can not write request body"). Plain answers keep it working. A
client pool that hands such a connection to the next round loses that round. The scripted fake (uvicorn) keeps
connections working, so this TCP relay sits between the proxy and the fake and does what llama-server does.
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


@dataclass
class StreamSpentRelay:
    """Listen on 127.0.0.1 (a free port), relay each connection to `target_port`."""

    target_port: int
    every_answer: bool = False  # any answer spends its connection (a server whose keep-alive ran out)
    refused: int = 0  # requests that arrived on a spent connection and were dropped unanswered
    connections: int = 0
    port: int = 0
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _server: asyncio.AbstractServer | None = None
    _thread: threading.Thread | None = None

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
            if b"HTTP/1.1 " in seen:  # a new response head
                conn.streamed = conn.streamed or b"text/event-stream" in seen.lower()
            if self.every_answer or conn.streamed and b"\r\n0\r\n\r\n" in seen:  # a chunked stream ended
                conn.spent = True
            conn.tail = seen[-64:]
            client.write(piece)
            await client.drain()
