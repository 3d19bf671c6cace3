"""create_app(settings): wiring only. One UpstreamPools (an Upstream pool per `[[upstreams]]` entry, or the single
`upstream`) and one SharedState (in process, or Redis with `redis_url`) per app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from sanctum_proxy.config import Settings
from sanctum_proxy.errors import InvalidRequest, NotFound, ProxyError
from sanctum_proxy.protocols import messages_api
from sanctum_proxy.routes import chat, health, metrics, passthrough, sanctum, translated
from sanctum_proxy.services import Services
from sanctum_proxy.state.recorder import Recorder, Retention, trace_id
from sanctum_proxy.state.replicated import SharedState
from sanctum_proxy.upstreams.auto_mode import ModeBook
from sanctum_proxy.upstreams.capabilities import CapabilityBook
from sanctum_proxy.upstreams.client import Limits, Upstream
from sanctum_proxy.upstreams.pools import UpstreamPools
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
        """Starlette's own answers (an unknown path, a method a route does not take) in the error shape too."""
        response = shaped(request, routing_error(exc, request))
        response.headers.update(exc.headers or {})  # a 405's Allow
        return response

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> JsonResponse:
        """A bug anywhere: the 500 in the endpoint's error shape with the trace id, never text/plain."""
        return shaped(request, unexpected(exc))

    app.add_middleware(HotRoutes, routes={"/v1/chat/completions": chat.chat_completions,  # innermost
                                          "/v1/responses": translated.responses, "/v1/messages": translated.messages},
                       on_error=proxy_error)
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent_requests,
                       max_body_bytes=settings.max_body_bytes, body_timeout=settings.body_read_timeout,
                       keys=parts.keys, per_key=settings.max_concurrent_per_key)
    app.add_middleware(ConnectionLimit, limit=settings.max_connections or default_max_connections())
    app.add_middleware(HostCheck, bound_to=settings.host, allowed_hosts=settings.allowed_hosts,
                       cors_origins=settings.cors_origins)  # inside CORS: a listed origin's preflight is answered
    app.add_middleware(EchoRequestId)  # outside the limits: a 429 or 503 echoes X-Request-Id too
    if settings.cors_origins:  # off by default: a browser page may not call the proxy unless listed
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["*"])
    app.add_middleware(AccessLog)  # outermost: one JSON line per request (uvicorn's access log is off)

    app.include_router(chat.router)  # POSTs answered by HotRoutes; here for /openapi.json and other methods
    app.include_router(translated.router)  # /v1/responses, /v1/messages: before the passthrough
    app.include_router(health.router)
    app.include_router(sanctum.router)
    app.include_router(metrics.router)
    app.include_router(passthrough.router)  # last: its /v1/{path} catches what the others do not
    return app


def make_services(settings: Settings) -> Services:
    shared = SharedState(settings.redis_url, max_rows=settings.max_models)
    modes = ModeBook(recheck_seconds=settings.auto_recheck_seconds,
                     parse_failure_threshold=settings.parse_failure_threshold, table=shared.table("modes"),
                     failure_window=settings.parse_failure_window_seconds,
                     failure_flip=settings.parse_failure_flip_seconds)
    capabilities = CapabilityBook(table=shared.table("capabilities"), probes_per_minute=settings.probes_per_minute)
    keys = KeyRing(settings.api_keys, settings.api_keys_file, settings.admin_key)
    return Services(settings, shared, modes, keys, capabilities, Recorder(retention(settings)))


def shaped(request: Request, error: ProxyError) -> JsonResponse:
    """The error in the shape of the endpoint asked (Anthropic's on /v1/messages, else OpenAI's)."""
    body = messages_api.error_body(error) if request.url.path == "/v1/messages" else None
    return error_response(error, body, trace_id=trace_id(request))


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
    """The upstream pools the settings name: one per `[[upstreams]]` entry, else the single `upstream`."""
    limits = Limits(settings.connect_timeout, settings.read_timeout, settings.max_answer_bytes)
    if settings.upstreams:
        pools = [Upstream(e.urls, e.api_key, limits, name=e.name) for e in settings.upstreams]
    else:
        pools = [Upstream([settings.upstream], settings.upstream_api_key, limits)]
    return UpstreamPools(pools, settings.upstreams, health_check_seconds=settings.health_check_seconds)

