"""The floor under sanctum-proxy's overhead: a bare FastAPI + httpx relay (same framework, same HTTP client,
same uvicorn defaults) that forwards /v1/chat/completions bytes unread, streaming or not.

    python bench/relay.py --upstream http://127.0.0.1:9000/v1 --port 9100

What sanctum-proxy adds above this relay is its own work (parsing, validation, repair, streaming assembly,
traces); what the relay adds above direct is the cost of any Python ASGI proxy built on these parts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse


def create_app(upstream: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        app.state.client = httpx.AsyncClient(timeout=300, limits=limits)
        yield
        await app.state.client.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        client: httpx.AsyncClient = request.app.state.client
        body = await request.body()
        sent = client.build_request("POST", f"{upstream}/chat/completions", content=body,
                                    headers={"content-type": "application/json"})
        reply = await client.send(sent, stream=True)
        if reply.headers.get("content-type", "").startswith("text/event-stream"):
            async def pieces() -> AsyncIterator[bytes]:
                try:
                    async for piece in reply.aiter_raw():
                        yield piece
                finally:
                    await reply.aclose()

            return StreamingResponse(pieces(), status_code=reply.status_code, media_type="text/event-stream")
        content = await reply.aread()
        await reply.aclose()
        return Response(content, status_code=reply.status_code, media_type="application/json")

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bare FastAPI + httpx relay (the overhead floor)")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
