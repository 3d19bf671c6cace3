"""A small HTTP/1.1 load generator on raw asyncio streams, cheap enough per request that the client is not
what the benchmark measures. Keep-alive connections; content-length or chunked responses.

    one_client(url, body, n)            per-request latency (ms), sequential, one connection
    many_clients(url, body, c, seconds) completed requests per second with c connections busy
    first_token / stream bodies         time to the first SSE event with non-empty delta.content
    own_ms                              the proxy's own time, as its `x-sanctum-overhead-ms` header says
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    first_token_ms: float | None  # streaming only: when the first content arrived
    total_ms: float
    own_ms: float | None = None  # sanctum-proxy's own time in the request (x-sanctum-overhead-ms); None: not sent


class Connection:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    def request_bytes(self, path: str, body: bytes) -> bytes:
        return (b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
                b"authorization: Bearer sk-bench\r\ncontent-length: %d\r\n\r\n"
                % ((self.prefix + path).encode(), self.host.encode(), self.port, len(body)) + body)

    async def post(self, raw: bytes, stream: bool = False) -> Reply:
        """Send a prepared request (see request_bytes) and read the whole answer."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        start = time.perf_counter()
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        headers = head.lower()
        watcher = _FirstContent(start) if stream else None
        if b"transfer-encoding: chunked" in headers:
            body = bytearray()
            while (size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)) > 0:
                piece = await self.reader.readexactly(size + 2)
                body += piece[:-2]
                if watcher is not None:
                    watcher.feed(piece[:-2])
            await self.reader.readuntil(b"\r\n")
            data = bytes(body)
        else:
            length = int(headers.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            data = await self.reader.readexactly(length)
            if watcher is not None:
                watcher.feed(data)
        if b"connection: close" in headers:
            self.close()
        total = (time.perf_counter() - start) * 1000
        return Reply(status, data, watcher.at_ms if watcher else None, total, own_ms(headers))


OVERHEAD = b"\r\nx-sanctum-overhead-ms:"


def own_ms(head: bytes) -> float | None:
    """The `x-sanctum-overhead-ms` value of a lower-cased response head, or None."""
    at = head.find(OVERHEAD)
    if at < 0:
        return None
    return float(head[at + len(OVERHEAD):head.index(b"\r\n", at + 2)])


class _FirstContent:
    """Watches SSE bytes for the first event whose delta carries non-empty content."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.buffer = b""
        self.at_ms: float | None = None

    def feed(self, piece: bytes) -> None:
        if self.at_ms is not None:
            return
        self.buffer += piece
        *events, self.buffer = self.buffer.replace(b"\r\n", b"\n").split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:") and b"content" in line and not line.endswith(b"[DONE]"):
                    chunk = json.loads(line[5:])
                    for choice in chunk.get("choices") or []:
                        if (choice.get("delta") or {}).get("content"):
                            self.at_ms = (time.perf_counter() - self.start) * 1000
                            return


async def one_client(url: str, path: str, body: bytes, n: int, stream: bool = False) -> list[Reply]:
    conn = Connection(url)
    raw = conn.request_bytes(path, body)
    out = []
    try:
        for _ in range(n):
            reply = await conn.post(raw, stream)
            if reply.status != 200:
                raise RuntimeError(f"{url}: HTTP {reply.status}: {reply.body[:300]!r}")
            out.append(reply)
    finally:
        conn.close()
    return out


async def many_clients(url: str, path: str, body: bytes, clients: int, seconds: float,
                       stream: bool = False) -> tuple[float, int]:
    """(completed requests per second, failed requests) with `clients` connections busy for `seconds`."""
    done = 0
    failed = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, failed
        conn = Connection(url)
        raw = conn.request_bytes(path, body)
        try:
            while time.perf_counter() < stop_at:
                try:
                    reply = await conn.post(raw, stream)
                except (ConnectionError, asyncio.IncompleteReadError):
                    failed += 1
                    conn.close()
                    continue
                if reply.status == 200:
                    done += 1
                else:
                    failed += 1
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return done / (time.perf_counter() - start), failed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)
