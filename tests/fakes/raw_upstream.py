"""A scripted upstream below HTTP: a TCP server that reads each request and then does exactly what a test
queued, byte by byte, for the faults a well-behaved HTTP server cannot produce (a reset before any
header, a reset in the middle of a chunked body, a status line that never comes).

Each connection takes the next queued script: a list of actions `("send", bytes)`, `("sleep", seconds)`,
`("reset",)` (close with RST: SO_LINGER 0) and `("close",)` (a clean FIN). Runs in its own thread.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections import deque
from typing import Any

Action = tuple[Any, ...]


def sse_head() -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n")


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk holding `payload`."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class RawUpstream:
    def __init__(self) -> None:
        self.scripts: deque[list[Action]] = deque()
        self.requests = 0
        self.heads: list[bytes] = []  # each request's head as it came (request line and headers)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *scripts: list[Action]) -> None:
        self.scripts.extend(scripts)

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        start = asyncio.start_server(self._serve, sock=self._sock)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            if head.startswith(b"GET /api/version "):  # the proxy asks whether it is Ollama: llama-server's 404
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                await writer.drain()
                return
            self.requests += 1
            self.heads.append(head)
            script = self.scripts.popleft() if self.scripts else [("reset",)]
            for action in script:
                if action[0] == "send":
                    writer.write(action[1])
                    await writer.drain()
                elif action[0] == "sleep":
                    await asyncio.sleep(action[1])
                elif action[0] == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                elif action[0] == "close":
                    break
            writer.write_eof() if writer.can_write_eof() else None
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()  # whatever the script did, nothing stays open
