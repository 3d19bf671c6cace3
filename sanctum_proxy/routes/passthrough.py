"""Every /v1/* path but chat completions, passed to the upstream: method, query, body, status, streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ..upstream import HOP_BY_HOP

router = APIRouter()
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@router.api_route("/v1/{path:path}", methods=METHODS)
async def passthrough(path: str, request: Request) -> StreamingResponse:
    settings = request.app.state.settings
    upstream = request.app.state.upstream
    headers = {k: v for k, v in request.headers.items()
               if k not in HOP_BY_HOP and k != "authorization" and not k.startswith("x-sanctum-")}
    auth = request.headers.get("authorization") if settings.forward_client_key else None
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    has_body = request.method not in ("GET", "HEAD")
    response = await upstream.send(request.method, f"/{path}", params=request.query_params, headers=headers,
                                   content=request.stream() if has_body else None)
    back = {k: v for k, v in response.headers.items() if k not in HOP_BY_HOP}
    return StreamingResponse(_relay(response.aiter_raw()), status_code=response.status_code, headers=back,
                             background=BackgroundTask(response.aclose))


async def _relay(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield chunk
