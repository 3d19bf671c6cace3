"""The floor under sanctum-proxy's overhead: a bare FastAPI + aiohttp relay (same framework, same HTTP client,
same uvicorn defaults, its access log included) that forwards /v1/chat/completions bytes unread, streaming or not.

    python bench/relay.py --upstream http://127.0.0.1:9000/v1 --port 9100 [--parse]

What sanctum-proxy adds above this relay is its own work (parsing, validation, repair, streaming assembly,
traces); what the relay adds above direct is the cost of any Python ASGI proxy built on these parts. `--parse`:
the least a proxy that reads what passes must do, the request and the answer (each stream event) decoded with
orjson and encoded again, nothing checked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse


def reencoded(data: bytes) -> bytes:
    return orjson.dumps(orjson.loads(data))


def reencoded_events(piece: bytes) -> bytes:
    """Each `data: {...}` line of a piece decoded and encoded again; a line cut between two pieces passes as it is."""
    return b"\n".join(_reencoded_line(line) for line in piece.split(b"\n"))


def _reencoded_line(line: bytes) -> bytes:
    if not line.startswith(b"data: {"):
        return line
    try:
        return b"data: " + reencoded(line[6:])
    except orjson.JSONDecodeError:
        return line


def create_app(upstream: str, parse: bool = False) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000),
                                                 timeout=aiohttp.ClientTimeout(total=300))
        yield
        await app.state.client.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        client: aiohttp.ClientSession = request.app.state.client
        body = await request.body()
        if parse:
            body = reencoded(body)
        reply = await client.post(f"{upstream}/chat/completions", data=body,
                                  headers={"content-type": "application/json"})
        if reply.headers.get("content-type", "").startswith("text/event-stream"):
            async def pieces() -> AsyncIterator[bytes]:
                try:
                    async for piece in reply.content.iter_any():
                        yield reencoded_events(piece) if parse else piece
                finally:
                    reply.release()

            return StreamingResponse(pieces(), status_code=reply.status, media_type="text/event-stream")
        content = await reply.read()
        reply.release()
        if parse:
            content = reencoded(content)
        return Response(content, status_code=reply.status, media_type="application/json")

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bare FastAPI + aiohttp relay (the overhead floor)")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="info",
                        help="uvicorn's log level (default info: uvicorn's default and sanctum-proxy's, so both "
                             "write uvicorn's access line per request)")
    parser.add_argument("--parse", action="store_true", help="decode and encode again what passes (orjson)")
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.upstream.rstrip("/"), args.parse), host="127.0.0.1", port=args.port,
                log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
