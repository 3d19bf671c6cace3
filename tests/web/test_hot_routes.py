"""web/hot_routes.py: a POST to a protocol's path, in any spelling, is answered by its endpoint with no router in
between; another method is a 405; a ProxyError goes to the error handler, any other exception to the bug handler;
every other path goes on to the router."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sanctum_proxy.errors import InvalidRequest, ProxyError
from sanctum_proxy.web.client_protocols import ClientProtocol, ProtocolTable
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


async def on_bug(request: Request, exc: Exception) -> Response:
    return JSONResponse({"bug": type(exc).__name__}, status_code=500)


def hot(serve: Any) -> HotRoutes:
    table = ProtocolTable([ClientProtocol("chat", ("/v1/chat/completions",), serve)])
    return HotRoutes(router, table, on_error, on_bug)


def body(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_post_to_a_hot_path_is_its_endpoints() -> None:
    assert body(call(hot(endpoint), "POST", "/v1/chat/completions")) == \
        b'{"from":"endpoint","path":"/v1/chat/completions"}'


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1/Chat/Completions", "/v1/chat/completions;x=1"])
def test_every_spelling_of_a_hot_path_is_its_endpoints(path: str) -> None:
    assert b'"from":"endpoint"' in body(call(hot(endpoint), "POST", path))


def test_another_method_is_a_405_in_the_protocols_shape() -> None:
    sent = call(hot(endpoint), "GET", "/v1/chat/completions")
    assert sent[0]["status"] == 405 and (b"allow", b"POST") in sent[0]["headers"]
    assert b'"type":"invalid_request_error"' in body(sent)


def test_other_paths_go_to_the_router() -> None:
    assert body(call(hot(endpoint), "POST", "/v1/models")) == b'{"from":"router"}'


def test_a_proxy_error_is_the_handlers_answer() -> None:
    sent = call(hot(refuses), "POST", "/v1/chat/completions")
    assert sent[0]["status"] == 400 and b'"param":"x"' in body(sent)


def test_any_other_exception_is_the_bug_handlers_answer() -> None:
    sent = call(hot(breaks), "POST", "/v1/chat/completions")
    assert sent[0]["status"] == 500 and body(sent) == b'{"bug":"KeyError"}'
