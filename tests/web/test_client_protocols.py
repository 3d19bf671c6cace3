"""web/client_protocols.py: a path's protocol by its round-loop paths first, then by the longest area."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sanctum_proxy.errors import InvalidRequest, ProxyError
from sanctum_proxy.web.client_protocols import ClientProtocol, ProtocolTable


async def serve(request: Request) -> Response:
    return Response()


def shaped(error: ProxyError) -> dict[str, object]:
    return {"error": error.message}


TABLE = ProtocolTable([ClientProtocol("chat", ("/v1/chat/completions",), serve, areas=("/v1/",)),
                       ClientProtocol("messages", ("/v1/messages",), serve, shaped, areas=("/v1/messages",)),
                       ClientProtocol("other", ("/x",), serve, limited=False)])


def test_the_longest_area_owns_a_path() -> None:
    owners = {path: getattr(TABLE.owner(path), "name", None) for path in (
        "/v1/messages", "/v1/messages/count_tokens", "/v1/messagesx", "/v1/models", "/healthz", "/v1/Messages/")}
    assert owners == {"/v1/messages": "messages", "/v1/messages/count_tokens": "messages", "/v1/messagesx": "chat",
                      "/v1/models": "chat", "/healthz": None, "/v1/Messages/": "messages"}


def test_errors_take_the_owners_shape() -> None:
    error = InvalidRequest("no")
    assert TABLE.error_body("/v1/messages/count_tokens", error) == {"error": "no"}
    assert TABLE.error_body("/healthz", error) == error.body()


def test_limited_paths_are_the_limited_protocols() -> None:
    assert [TABLE.limited(p) for p in ("/v1/models", "/x", "/healthz")] == [True, False, False]
