"""web/hot_routes.py: a POST to a hot path is answered by its endpoint with no router in between; a ProxyError
goes to the error handler; anything else goes on (to the router, or up to the server error middleware)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sanctum_proxy.errors import InvalidRequest, ProxyError
from sanctum_proxy.web.hot_routes import HotRoutes


def scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}


def call(app: HotRoutes, method: str, path: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(app(scope(method, path), receive, send))
    return sent


async def router(scope: Any, receive: Any, send: Any) -> None:
    await JSONResponse({"from": "router"})(scope, receive, send)


async def endpoint(request: Request) -> Response:
    return JSONResponse({"from": "endpoint", "path": request.url.path})


async def refuses(request: Request) -> Response:
    raise InvalidRequest("no", param="x")


async def breaks(request: Request) -> Response:
    raise KeyError("bug")


async def on_error(request: Request, exc: ProxyError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status)


def body(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_post_to_a_hot_path_is_its_endpoints() -> None:
    app = HotRoutes(router, {"/v1/chat/completions": endpoint}, on_error)
    assert body(call(app, "POST", "/v1/chat/completions")) == b'{"from":"endpoint","path":"/v1/chat/completions"}'


def test_other_methods_and_paths_go_to_the_router() -> None:
    app = HotRoutes(router, {"/v1/chat/completions": endpoint}, on_error)
    assert body(call(app, "GET", "/v1/chat/completions")) == b'{"from":"router"}'
    assert body(call(app, "POST", "/v1/models")) == b'{"from":"router"}'


def test_a_proxy_error_is_the_handlers_answer() -> None:
    sent = call(HotRoutes(router, {"/v1/chat/completions": refuses}, on_error), "POST", "/v1/chat/completions")
    assert sent[0]["status"] == 400 and b'"param":"x"' in body(sent)


def test_any_other_exception_goes_up() -> None:
    with pytest.raises(KeyError):
        call(HotRoutes(router, {"/v1/chat/completions": breaks}, on_error), "POST", "/v1/chat/completions")
