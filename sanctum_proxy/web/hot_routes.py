"""HotRoutes: the round-loop endpoints answered straight from the middleware stack.

Through Starlette a request to a route passes ExceptionMiddleware (a Request and a send wrapper of its own),
the router's match over every route, FastAPI's dependency machinery and the route's own exception wrapper
(another Request, another send wrapper): about a twentieth of what the proxy spends on a fast answer
(bench/results/profile.md, Round 5). HotRoutes, the innermost middleware, calls the endpoint of a POST to one
of `routes` itself, with one Request; a ProxyError it raises goes to the app's handler for it, as the router's
would, and any other exception up to Starlette's ServerErrorMiddleware, whose handler shapes the 500. Every
other request (another method, another path) goes on to the router; the routes stay registered there too, for
/openapi.json.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sanctum_proxy.errors import ProxyError

Endpoint = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, ProxyError], Awaitable[Response]]


class HotRoutes:
    def __init__(self, app: ASGIApp, routes: Mapping[str, Endpoint], on_error: ErrorHandler) -> None:
        self.app, self.routes, self.on_error = app, dict(routes), on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except ProxyError as error:  # before any byte of the answer: the endpoints return their Response
            response = await self.on_error(request, error)
        stamp_overhead(request, response)
        await response(scope, receive, send)


OVERHEAD = "x-sanctum-overhead-ms"


def stamp_overhead(request: Request, response: Response) -> None:
    """`x-sanctum-overhead-ms`: the proxy's own time in a traced request until its headers (its trace's
    overhead_ms: since it arrived, less the upstream rounds' time)."""
    trace = getattr(request.state, "trace", None)
    if trace is not None:
        response.headers[OVERHEAD] = f"{trace.overhead_ms():.2f}"
