"""The one route table of the round-loop endpoints, answered from the innermost middleware.

No router, dependencies or exception wrappers stand between (bench/results/profile.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sanctum_proxy.errors import MethodNotAllowed, ProxyError
from sanctum_proxy.web.client_protocols import ProtocolTable

ErrorHandler = Callable[[Request, ProxyError], Awaitable[Response]]
BugHandler = Callable[[Request, Exception], Awaitable[Response]]


class HotRoutes:
    def __init__(self, app: ASGIApp, table: ProtocolTable, on_error: ErrorHandler, on_bug: BugHandler) -> None:
        self.app, self.table, self.on_error, self.on_bug = app, table, on_error, on_bug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        protocol = self.table.endpoint(scope["path"]) if scope["type"] == "http" else None
        if protocol is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        request.state.protocol = protocol.name
        try:
            if scope["method"] != "POST":
                raise MethodNotAllowed(f"Method Not Allowed ({scope['method'][:20]} {scope['path'][:200]}): "
                                       "this endpoint takes POST")
            response = await protocol.serve(request)
        except ProxyError as error:  # before any byte of the answer
            response = await self.on_error(request, error)
            if isinstance(error, MethodNotAllowed):
                response.headers["allow"] = "POST"
        except Exception as exc:
            response = await self.on_bug(request, exc)
        stamp_overhead(request, response)
        await response(scope, receive, send)


OVERHEAD = "x-sanctum-overhead-ms"


def stamp_overhead(request: Request, response: Response) -> None:
    """The proxy's own time until the headers, less the upstream rounds'."""
    trace = getattr(request.state, "trace", None)
    if trace is not None:
        response.headers[OVERHEAD] = f"{trace.overhead_ms():.2f}"
