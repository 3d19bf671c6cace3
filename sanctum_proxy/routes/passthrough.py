"""Every /v1/* path but chat completions, passed to the upstream; with `[[upstreams]]`, routed by `model`."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import InvalidRequest, NotFound, ProxyError, UpstreamError
from sanctum_proxy.protocols import messages_api
from sanctum_proxy.services import services
from sanctum_proxy.upstreams.error_mapping import upstream_error
from sanctum_proxy.upstreams.pools import UpstreamPools, listed_models
from sanctum_proxy.upstreams.relay import HOP_BY_HOP, send
from sanctum_proxy.upstreams.upstream import Upstream
from sanctum_proxy.web.auth import check_client_key
from sanctum_proxy.web.json_response import JsonResponse, error_response
from sanctum_proxy.web.limits import request_body

router = APIRouter()
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# The trace viewer shares this origin: an upstream's HTML must not run scripts there.
CONFINED = {"content-security-policy": "sandbox; default-src 'none'", "x-content-type-options": "nosniff"}


@router.get("/v1/models")
async def models(request: Request) -> Response:
    """OpenAI's list, or Anthropic's with an `anthropic-version` header."""
    pools = services(request).pools
    if "anthropic-version" in request.headers:
        try:
            data = await checked_models(request, pools)
        except ProxyError as exc:
            return error_response(exc, messages_api.error_body(exc))
        return JsonResponse(messages_api.model_list(data))
    if not pools.several:
        return await passthrough("models", request)
    check_client_key(request)
    return JsonResponse({"object": "list", "data": await model_list(pools)})


async def checked_models(request: Request, pools: UpstreamPools) -> list[JSONObject]:
    """The client's key checked, then the models the pools name, or the one upstream's own list."""
    key = check_client_key(request)
    return await model_list(pools) if pools.several else await upstream_models(request, pools.default, key.upstream)


async def upstream_models(request: Request, upstream: Upstream, auth: str | None) -> list[JSONObject]:
    """The upstream's own GET /models `data`; its error as an UpstreamError."""
    settings = services(request).settings
    headers = forwarded_headers(request, keyed="authorization" in upstream.headers())
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    response = await send(upstream, "GET", "/models", params=None, headers=headers, content=None)
    raw = bytearray()
    try:
        async for piece in response.chunks:
            raw += piece
            if len(raw) > settings.max_answer_bytes:
                raise UpstreamError(502, f"the upstream's model list is over max_answer_bytes "
                                         f"({settings.max_answer_bytes})")
    finally:
        await response.close()
    if response.status >= 400:
        raise upstream_error(response.status, bytes(raw))
    try:
        listed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(502, "the upstream's model list is not JSON") from exc
    data = listed.get("data") if isinstance(listed, dict) else None
    if isinstance(listed, dict) and isinstance(listed.get("models"), list) and data is None:
        data = listed["models"]  # Ollama's /api/tags shape
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


@router.get("/v1/models/{model_id:path}")
async def one_model(model_id: str, request: Request) -> Response:
    """Anthropic's ModelInfo with an `anthropic-version` header; else passed through."""
    if "anthropic-version" not in request.headers:
        return await passthrough(f"models/{model_id}", request)
    pools = services(request).pools
    try:
        data = await checked_models(request, pools)
        found = [m for m in messages_api.model_list(data)["data"] if m["id"] == model_id]
        if not found:
            raise NotFound(f"model {model_id!r} is not served here", param="model_id")
    except ProxyError as exc:
        return error_response(exc, messages_api.error_body(exc))
    return JsonResponse(found[0])


# Not in /openapi.json: it is the upstream's API, and a multi-method route duplicates operation ids.
@router.api_route("/v1/{path:path}", methods=METHODS, include_in_schema=False)
async def passthrough(path: str, request: Request, *, root: bool = False) -> StreamingResponse:
    """`path` sent under the upstream's base URL, or with `root` its root (Ollama's /api/*)."""
    auth = check_client_key(request).upstream
    check_path(request)
    upstream, content = await target(path, request)
    headers = forwarded_headers(request, keyed="authorization" in upstream.headers())
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    query = list(request.query_params.multi_items())
    response = await send(upstream, request.method, f"/{path}", params=query, headers=headers, content=content,
                                   root=root)
    back = {k: v for k, v in response.headers if k not in HOP_BY_HOP}
    back.update(CONFINED)
    return StreamingResponse(response.chunks, status_code=response.status, headers=back,
                             background=BackgroundTask(response.close))


def forwarded_headers(request: Request, *, keyed: bool) -> dict[str, str]:
    """The client's headers fit for the upstream; with our own key, uncompressed so echoes can be redacted."""
    named = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    dropped = HOP_BY_HOP | named | {"authorization", "x-api-key"} | ({"accept-encoding"} if keyed else set())
    return {k: v for k, v in request.headers.items() if k not in dropped and not k.startswith("x-sanctum-")}


MAX_DECODES = 4


def check_path(request: Request) -> None:
    """404 for a path that, decoded repeatedly, holds dot or empty segments, backslashes or control characters.

    `/v1/..%2f..%2fapi/delete` would otherwise reach Ollama's model delete with the proxy's key.
    """
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    text = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
    for _ in range(MAX_DECODES):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    else:
        text = "\\"  # still decoding: refused
    segments = text.split("/")
    if ("\\" in text or any(s in (".", "..") for s in segments) or "" in segments[1:-1]
            or any(ord(c) < 32 or c == "\x7f" for c in text)):
        raise NotFound(f"Invalid URL ({request.method} {request.url.path}): a path with dot segments, empty "
                       "segments, backslashes or control characters (encoded or not) is not passed through")


async def target(path: str, request: Request) -> tuple[Upstream, Any]:
    """The upstream and the body, read whole first (413 over max_body_bytes)."""
    pools = services(request).pools
    has_body = request.method not in ("GET", "HEAD")
    if path.startswith("models/") and pools.several:
        return pools.destination(path.removeprefix("models/")).upstream, None
    raw = request_body(request) if has_body else None
    if not pools.several or not raw:
        return pools.default, raw
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return pools.default, raw
    dest = pools.destination(body["model"])
    if dest.model == body["model"]:
        return dest.upstream, raw
    try:
        return dest.upstream, orjson.dumps(dest.rewrite(body))
    except orjson.JSONEncodeError as exc:  # read 1024 levels deep, written at most 254
        raise InvalidRequest("the request body is nested too deeply to be passed on") from exc


async def model_list(pools: UpstreamPools) -> list[JSONObject]:
    data = [{"id": model, "object": "model", "created": 0, "owned_by": name}
            for model, name in listed_models(pools.entries)]
    seen = {item["id"] for item in data}
    for entry, upstream in zip(pools.entries, pools.upstreams, strict=True):
        if not entry.catch_all:
            continue
        listed = await upstream.probe_json("GET", f"{upstream.base_url}/models", timeout=3.0)
        items = listed.get("data") if isinstance(listed, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("id") not in seen:
                seen.add(item.get("id"))
                data.append(item)
    return data
