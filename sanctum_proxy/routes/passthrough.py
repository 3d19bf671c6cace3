"""Every /v1/* path but chat completions, passed to the upstream: method, query, body, status, streaming.

With `[[upstreams]]`, GET /v1/models answers the union of the models the config names (and aliases) and
of what each catch-all upstream lists itself; other paths go where their body's `model` (or the
`/v1/models/{id}` id) routes, with an alias rewritten, and to the default upstream when they name none.
"""

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
from sanctum_proxy.routes.chat import read_body
from sanctum_proxy.services import services
from sanctum_proxy.upstreams.client import HOP_BY_HOP, Upstream, upstream_error
from sanctum_proxy.upstreams.pools import UpstreamPools, listed_models
from sanctum_proxy.web.auth import check_client_key, forwarded_key
from sanctum_proxy.web.json_response import JsonResponse, error_response

router = APIRouter()
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
# An upstream's answer is served from the proxy's origin, where the trace viewer runs: an HTML page it sends
# (an error page, a web UI) must not run scripts there, nor be sniffed into a type that would.
CONFINED = {"content-security-policy": "sandbox; default-src 'none'", "x-content-type-options": "nosniff"}


@router.get("/v1/models")
async def models(request: Request) -> Response:
    """OpenAI's list; with an `anthropic-version` header (the anthropic SDKs send one) Anthropic's."""
    pools = services(request).pools
    if "anthropic-version" in request.headers:
        try:
            check_client_key(request)
            data = await model_list(pools) if pools.several else await upstream_models(request, pools.default)
        except ProxyError as exc:
            return error_response(exc, messages_api.error_body(exc))
        return JsonResponse(messages_api.model_list(data))
    if not pools.several:
        return await passthrough("models", request)
    check_client_key(request)
    return JsonResponse({"object": "list", "data": await model_list(pools)})


async def upstream_models(request: Request, upstream: Upstream) -> list[JSONObject]:
    """The upstream's own GET /models `data` (its error as an UpstreamError)."""
    settings = services(request).settings
    auth = forwarded_key(request) if settings.forward_client_key else None
    headers = forwarded_headers(request, keyed="authorization" in upstream.headers())
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    response = await upstream.send("GET", "/models", params=None, headers=headers, content=None)
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
        data = listed["models"]  # Ollama's /api/tags shape, where a server answers so
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


@router.get("/v1/models/{model_id:path}")
async def one_model(model_id: str, request: Request) -> Response:
    """With an `anthropic-version` header, Anthropic's ModelInfo of one listed model (404 `not_found_error` for
    another); without it, passed through like every other path."""
    if "anthropic-version" not in request.headers:
        return await passthrough(f"models/{model_id}", request)
    pools = services(request).pools
    try:
        check_client_key(request)
        data = await model_list(pools) if pools.several else await upstream_models(request, pools.default)
        found = [m for m in messages_api.model_list(data)["data"] if m["id"] == model_id]
        if not found:
            raise NotFound(f"model {model_id!r} is not served here", param="model_id")
    except ProxyError as exc:
        return error_response(exc, messages_api.error_body(exc))
    return JsonResponse(found[0])


# Not in /openapi.json: it is the upstream's API, not ours (and one route for several methods would give the
# document duplicate operation ids).
@router.api_route("/v1/{path:path}", methods=METHODS, include_in_schema=False)
async def passthrough(path: str, request: Request, *, root: bool = False) -> StreamingResponse:
    """`path` sent to the upstream under its base URL (or, with `root`, its root: Ollama's /api/*)."""
    check_client_key(request)
    check_path(request)
    settings = services(request).settings
    upstream, content = await target(path, request)
    auth = forwarded_key(request) if settings.forward_client_key else None
    headers = forwarded_headers(request, keyed="authorization" in upstream.headers())
    headers.update({k: v for k, v in upstream.headers(auth).items() if k == "authorization"})
    query = list(request.query_params.multi_items())
    response = await upstream.send(request.method, f"/{path}", params=query, headers=headers, content=content,
                                   root=root)
    back = {k: v for k, v in response.headers if k not in HOP_BY_HOP}
    back.update(CONFINED)
    return StreamingResponse(response.chunks, status_code=response.status, headers=back,
                             background=BackgroundTask(response.close))


def forwarded_headers(request: Request, *, keyed: bool) -> dict[str, str]:
    """The client's headers fit for the upstream: no hop-by-hop header, none the client's `Connection`
    header names (RFC 9110 7.6.1), no key of its own, no X-Sanctum-*. With the proxy's own upstream key,
    no Accept-Encoding either: an answer that echoes the key must come uncompressed to be redacted."""
    named = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    dropped = HOP_BY_HOP | named | {"authorization", "x-api-key"} | ({"accept-encoding"} if keyed else set())
    return {k: v for k, v in request.headers.items() if k not in dropped and not k.startswith("x-sanctum-")}


MAX_DECODES = 4


def check_path(request: Request) -> None:
    """Only paths under the upstream's base path are forwarded: the path as the client wrote it, decoded
    as often as it decodes (`%252e` is a dot too), may hold no dot segment, empty segment, backslash or
    control character; otherwise 404 and nothing is sent (`/v1/..%2f..%2fapi/delete` would reach Ollama's
    model delete with the proxy's key)."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    text = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
    for _ in range(MAX_DECODES):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    else:
        text = "\\"  # still decoding after MAX_DECODES rounds: refused like the rest
    segments = text.split("/")
    if ("\\" in text or any(s in (".", "..") for s in segments) or "" in segments[1:-1]
            or any(ord(c) < 32 or c == "\x7f" for c in text)):
        raise NotFound(f"Invalid URL ({request.method} {request.url.path}): a path with dot segments, empty "
                       "segments, backslashes or control characters (encoded or not) is not passed through")


async def target(path: str, request: Request) -> tuple[Upstream, Any]:
    """The upstream for this request and the body to send it (read whole first, at most max_body_bytes:
    over it is a 413 and nothing is sent)."""
    pools = services(request).pools
    has_body = request.method not in ("GET", "HEAD")
    if path.startswith("models/") and pools.several:
        return pools.destination(path.removeprefix("models/")).upstream, None
    raw = await read_body(request, services(request).settings.max_body_bytes) if has_body else None
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
