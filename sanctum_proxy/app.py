"""create_app(settings): wiring only. One Upstream (one pooled httpx client) per app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from .responses import JsonResponse as ORJSONResponse

from .capabilities import CapabilityBook
from .config import Settings
from .errors import ProxyError
from .modes import ModeBook
from .routes import chat, health, passthrough, sanctum
from .upstream import Upstream


def create_app(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.upstream = Upstream(settings, transport)
        try:
            yield
        finally:
            await app.state.upstream.aclose()

    app = FastAPI(title="sanctum-proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.modes = ModeBook(recheck_seconds=settings.auto_recheck_seconds,
                               parse_failure_threshold=settings.parse_failure_threshold)
    app.state.capabilities = CapabilityBook()

    @app.exception_handler(ProxyError)
    async def proxy_error(request: Request, exc: ProxyError) -> ORJSONResponse:
        return error_response(exc)

    app.include_router(health.router)
    app.include_router(sanctum.router)
    app.include_router(chat.router)
    app.include_router(passthrough.router)
    return app


def error_response(exc: ProxyError) -> ORJSONResponse:
    headers = {"x-should-retry": "false"} if exc.status in (400, 401, 413, 422) else None
    return ORJSONResponse(exc.body(), status_code=exc.status, headers=headers)
