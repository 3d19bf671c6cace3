"""Every /v1/* path but chat completions, passed to the upstream: method, query, body, status, streaming.

With `[[upstreams]]`, GET /v1/models answers the union of the models the config names (and aliases) and
of what each catch-all upstream lists itself; other paths go where their body's `model` (or the
`/v1/models/{id}` id) routes, with an alias rewritten, and to the default upstream when they name none.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from ..auth import check_client_key
from ..responses import JsonResponse
from ..routing import Router, listed_models
from ..upstream import HOP_BY_HOP, Upstream
from .chat import read_body

router = APIRouter()
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@router.get("/v1/models")
async def models(request: Request) -> Response:
    routes: Router = request.app.state.router
    if not routes.several:
        return await passthrough("models", request)
    check_client_key(request)
    return JsonResponse({"object": "list", "data": await model_list(routes)})


# Not in /openapi.json: it is the upstream's API, not ours (and one route for several methods would give the
# document duplicate operation ids).
@router.api_route("/v1/{path:path}", methods=METHODS, include_in_schema=False)
async def passthrough(path: str, request: Request) -> StreamingResponse:
    check_client_key(request)
    settings = request.app.state.settings
    upstream, content = await target(path, request)
    headers = {k: v for k, v in request.headers.items()
               if k not in HOP_BY_HOP and k != "authorization" and not k.startswith("x-sanctum-")}
    auth = request.headers.get("authorization") if settings.forward_client_key else None
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    query = list(request.query_params.multi_items())
    response = await upstream.send(request.method, f"/{path}", params=query, headers=headers, content=content)
    back = {k: v for k, v in response.headers if k not in HOP_BY_HOP}
    return StreamingResponse(response.chunks, status_code=response.status, headers=back,
                             background=BackgroundTask(response.close))


async def target(path: str, request: Request) -> tuple[Upstream, Any]:
    """The upstream for this request and the body to send it (streamed through when nothing routes)."""
    routes: Router = request.app.state.router
    has_body = request.method not in ("GET", "HEAD")
    if not routes.several:
        return routes.default, request.stream() if has_body else None
    if path.startswith("models/"):
        return routes.route(path.removeprefix("models/")).upstream, None
    if not has_body:
        return routes.default, None
    raw = await read_body(request, request.app.state.settings.max_body_bytes)
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return routes.default, raw
    route = routes.route(body["model"])
    return route.upstream, raw if route.model == body["model"] else orjson.dumps(route.rewrite(body))


async def model_list(routes: Router) -> list[dict[str, Any]]:
    data = [{"id": model, "object": "model", "created": 0, "owned_by": name}
            for model, name in listed_models(routes.entries)]
    seen = {item["id"] for item in data}
    for entry, upstream in zip(routes.entries, routes.upstreams, strict=True):
        if not entry.catch_all:
            continue
        listed = await upstream.probe_json("GET", f"{upstream.base_url}/models", timeout=3.0)
        items = listed.get("data") if isinstance(listed, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("id") not in seen:
                seen.add(item.get("id"))
                data.append(item)
    return data
