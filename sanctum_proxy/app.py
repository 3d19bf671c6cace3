"""create_app(settings): wiring only."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from sanctum_proxy.config import Settings
from sanctum_proxy.errors import InvalidRequest, NotFound, ProxyError
from sanctum_proxy.routes import health, metrics, passthrough, sanctum
from sanctum_proxy.routes.registry import PROTOCOLS
from sanctum_proxy.services import Services
from sanctum_proxy.state import telemetry
from sanctum_proxy.state.recorder import Recorder, Retention, trace_id
from sanctum_proxy.state.replicated import SharedState
from sanctum_proxy.upstreams.auto_mode import ModeBook
from sanctum_proxy.upstreams.capabilities import CapabilityBook
from sanctum_proxy.upstreams.lesson_checks import Lessons
from sanctum_proxy.upstreams.pools import UpstreamPools, model_names
from sanctum_proxy.upstreams.upstream import Limits, Upstream
from sanctum_proxy.web.access_log import AccessLog
from sanctum_proxy.web.auth import KeyRing
from sanctum_proxy.web.connection_limit import ConnectionLimit, default_max_connections
from sanctum_proxy.web.host_check import HostCheck
from sanctum_proxy.web.hot_routes import HotRoutes
from sanctum_proxy.web.json_response import JsonResponse, error_response, unexpected
from sanctum_proxy.web.limits import ConcurrencyLimit
from sanctum_proxy.web.request_id import EchoRequestId


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        parts.recorder.start()
        pools = parts.started_pools = upstream_pools(settings)
        pools.start()
        await parts.shared.start()
        try:
            yield
        finally:
            await parts.lessons.aclose()
            await pools.aclose()
            await parts.shared.aclose()
            parts.recorder.close()

    app = FastAPI(title="sanctum-proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    parts = app.state.services = make_services(settings)

    @app.exception_handler(ProxyError)
    async def proxy_error(request: Request, exc: ProxyError) -> JsonResponse:
        parts.recorder.refused(request, exc)
        return shaped(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JsonResponse:
        """Starlette's own answers in the endpoint's error shape too."""
        response = shaped(request, routing_error(exc, request))
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> JsonResponse:
        """A bug anywhere: a 500 in the endpoint's error shape with the trace id."""
        return shaped(request, unexpected(exc))

    app.add_middleware(HotRoutes, table=PROTOCOLS, on_error=proxy_error, on_bug=unexpected_error)
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent_requests, table=PROTOCOLS,
                       max_body_bytes=settings.max_body_bytes, body_timeout=settings.body_read_timeout,
                       keys=parts.keys, per_key=settings.max_concurrent_per_key,
                       shared=parts.shared if settings.redis_url else None)
    app.add_middleware(ConnectionLimit, limit=settings.max_connections or default_max_connections(), table=PROTOCOLS,
                       keyed=bool(settings.api_keys or settings.api_keys_file))
    # inside CORS: a listed origin's preflight is answered
    app.add_middleware(HostCheck, bound_to=settings.host, allowed_hosts=settings.allowed_hosts,
                       cors_origins=settings.cors_origins, table=PROTOCOLS)
    app.add_middleware(EchoRequestId)  # outside the limits: a 429 or 503 echoes X-Request-Id too
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["*"])
    app.add_middleware(AccessLog)  # uvicorn's access log is off

    for router in PROTOCOLS.routers():  # before the passthrough
        app.include_router(router)
    app.include_router(health.router)
    app.include_router(sanctum.router)
    app.include_router(metrics.router)
    app.include_router(passthrough.router)  # its /v1/{path} catches the rest
    return app


def make_services(settings: Settings) -> Services:
    shared = SharedState(settings.redis_url, max_rows=settings.max_models)
    modes = ModeBook(recheck_seconds=settings.auto_recheck_seconds,
                     parse_failure_threshold=settings.parse_failure_threshold, table=shared.table("modes"),
                     failure_window=settings.parse_failure_window_seconds,
                     failure_flip=settings.parse_failure_flip_seconds)
    capabilities = CapabilityBook(table=shared.table("capabilities"), probes_per_minute=settings.probes_per_minute,
                                  shared=shared if settings.redis_url else None)
    keys = KeyRing(settings.api_keys, settings.api_keys_file, settings.admin_key)
    tracing = telemetry.from_environ(os.environ, settings.traces_bodies)
    recorder = Recorder(retention(settings), tracing)
    recorder.metrics.models = frozenset(model_names(settings.upstreams))
    return Services(settings, shared, modes, keys, capabilities, recorder,
                    Lessons(modes, capabilities, settings.probe_timeout))


def shaped(request: Request, error: ProxyError) -> JsonResponse:
    """The error in the shape of the path's protocol (OpenAI's elsewhere)."""
    return error_response(error, PROTOCOLS.error_body(request.url.path, error), trace_id=trace_id(request))


def routing_error(exc: StarletteHTTPException, request: Request) -> ProxyError:
    if exc.status_code == 404:
        return NotFound(f"Invalid URL ({request.method} {request.url.path[:200]}): no such endpoint")
    error = InvalidRequest(str(exc.detail)[:200])
    error.status = exc.status_code if 400 <= exc.status_code <= 599 else 400
    return error


def retention(settings: Settings) -> Retention:
    return Retention(settings.traces_path, settings.traces_max_count, settings.traces_max_age_hours,
                     settings.traces_max_bytes, settings.traces_max_doc_bytes, settings.traces_bodies,
                     settings.traces_queue_bytes)


def upstream_pools(settings: Settings) -> UpstreamPools:
    """One pool per `[[upstreams]]` entry, else the single `upstream`."""
    limits = Limits(settings.connect_timeout, settings.read_timeout, settings.max_answer_bytes)
    if settings.upstreams:
        pools = [Upstream(e.urls, e.api_key, limits, name=e.name, ollama_native=settings.ollama_native)
                 for e in settings.upstreams]
    else:
        pools = [Upstream([settings.upstream], settings.upstream_api_key, limits, ollama_native=settings.ollama_native)]
    return UpstreamPools(pools, settings.upstreams, health_check_seconds=settings.health_check_seconds)

