"""Ollama's native API at the proxy's root: /api/chat through the round loop, discovery answered as Ollama does, the
rest passed through.

Model management takes the admin key, since Ollama has no keys of its own.
"""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from sanctum_proxy.core.shapes import OLLAMA_FIELDS, JSONObject
from sanctum_proxy.errors import NotFound, ProxyError, Unauthorized
from sanctum_proxy.protocols import ollama_api
from sanctum_proxy.protocols.ollama_events import NdjsonWriter
from sanctum_proxy.protocols.reply import Reply
from sanctum_proxy.repair.loop_data import Final
from sanctum_proxy.routes.passthrough import METHODS, passthrough
from sanctum_proxy.routes.rounds import Rounds
from sanctum_proxy.routes.translated import Dialect, reply_of, serve
from sanctum_proxy.services import services
from sanctum_proxy.upstreams.pools import listed_models
from sanctum_proxy.upstreams.upstream import Upstream
from sanctum_proxy.web.auth import check_client_key, matches, presented_key
from sanctum_proxy.web.client_protocols import ClientProtocol
from sanctum_proxy.web.json_response import JsonResponse, error_response
from sanctum_proxy.web.limits import request_body

router = APIRouter()
VERSION = "0.12.6"  # told where the upstream is not Ollama
PASSED = frozenset({"ps", "generate", "embed", "embeddings"})
MANAGED = frozenset({"pull", "push", "create", "copy", "delete", "blobs"})


async def chat(request: Request) -> Response:
    return await serve(request, OLLAMA)


def _answer(body: JSONObject, rounds: Rounds, final: Final, reply: Reply) -> JSONObject:
    return ollama_api.answer(reply, str(body.get("model") or ""), time.perf_counter_ns() - rounds.started_ns,
                             final.extra.get(OLLAMA_FIELDS))


def _writer(body: JSONObject, rounds: Rounds) -> NdjsonWriter:
    return NdjsonWriter(str(body.get("model") or ""), rounds.trace_id, lambda final: reply_of(rounds, final),
                        rounds.started_ns, split_reasoning=rounds.split_reasoning)


OLLAMA = Dialect("ollama", ollama_api.to_chat, _answer, _writer, ollama_api.error_body,
                 lambda s: s.ollama_on_surrender, native_fields=True)


def refused(error: ProxyError) -> Response:
    return error_response(error, ollama_api.error_body(error))


@router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
async def root(request: Request) -> Response:
    """Ollama's liveness answer; HEAD / is also Claude Code's pre-connect."""
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"], include_in_schema=False)
async def version(request: Request) -> Response:
    try:
        key = check_client_key(request)
    except ProxyError as exc:
        return refused(exc)
    upstream = services(request).pools.default
    said = await upstream.probe_json("GET", f"{upstream.root_url}/api/version", timeout=3.0,
                                     client_auth=key.upstream)
    found = said.get("version") if isinstance(said, dict) else None
    return JsonResponse({"version": found if isinstance(found, str) else VERSION})


@router.api_route("/api/tags", methods=["GET", "HEAD"], include_in_schema=False)
async def tags(request: Request) -> Response:
    try:
        key = check_client_key(request)
    except ProxyError as exc:
        return refused(exc)
    pools = services(request).pools
    models = [ollama_api.tag({"id": name}) for name, _ in listed_models(pools.entries)]
    seen = {m["name"] for m in models}
    asked = [u for e, u in zip(pools.entries, pools.upstreams, strict=True) if e.catch_all] if pools.several \
        else [pools.default]
    for upstream in asked:
        for model in await upstream_tags(upstream, key.upstream):
            if model.get("name") not in seen:
                seen.add(model.get("name"))
                models.append(model)
    return JsonResponse({"models": models})


async def upstream_tags(upstream: Upstream, client_auth: str | None = None) -> list[JSONObject]:
    """The upstream's /api/tags models, else its /v1/models in that shape."""
    said = await upstream.probe_json("GET", f"{upstream.root_url}/api/tags", timeout=3.0, client_auth=client_auth)
    if isinstance(said, dict) and isinstance(said.get("models"), list):
        return [m for m in said["models"] if isinstance(m, dict)]
    listed = await upstream.probe_json("GET", f"{upstream.base_url}/models", timeout=3.0, client_auth=client_auth)
    data = listed.get("data") if isinstance(listed, dict) else None
    return [ollama_api.tag(m) for m in data if isinstance(m, dict)] if isinstance(data, list) else []


@router.post("/api/show", include_in_schema=False)
async def show(request: Request) -> Response:
    """The upstream's answer with `tools` among the capabilities; a minimal one for a non-Ollama upstream."""
    try:
        key = check_client_key(request)
        raw = request_body(request)
        asked = orjson.loads(raw) if raw else {}
        model = asked.get("model") or asked.get("name") if isinstance(asked, dict) else None
        if not isinstance(model, str) or not model:
            raise NotFound("model is required")
        dest = services(request).pools.destination(model)
    except orjson.JSONDecodeError:
        return refused(NotFound("the request body is not JSON"))
    except ProxyError as exc:
        return refused(exc)
    upstream = dest.upstream
    said = await upstream.probe_json("POST", f"{upstream.root_url}/api/show", {**asked, "model": dest.model},
                                     timeout=services(request).settings.probe_timeout,
                                     client_auth=key.upstream)
    if not isinstance(said, dict):
        said = {"modelfile": "", "parameters": "", "template": "", "details": {}, "model_info": {},
                "capabilities": ["completion"]}
    listed = said.get("capabilities")
    capabilities = [c for c in listed if isinstance(c, str)] if isinstance(listed, list) else ["completion"]
    native = "tools" in capabilities
    if not native:
        capabilities.append("tools")
    return JsonResponse({**said, "capabilities": capabilities,
                         "sanctum": {"tools": "native" if native else "prompted"}})


@router.api_route("/api/{path:path}", methods=METHODS, include_in_schema=False)
async def api(path: str, request: Request) -> Response:
    head = path.split("/", 1)[0]
    try:
        if head in MANAGED:
            check_manager(request)
        elif head not in PASSED:
            raise NotFound(f"Invalid URL ({request.method} /api/{path[:200]}): not an Ollama endpoint the proxy "
                           "serves")
        return await passthrough(f"api/{path}", request, root=True)
    except ProxyError as exc:
        return refused(exc)


def check_manager(request: Request) -> None:
    """Model management takes the admin key, and a keyless proxy refuses it."""
    ring = services(request).keys
    if ring.admin is None:
        error = Unauthorized("model management (pull, push, create, copy, delete, blobs) through the proxy takes "
                             "the admin key, and none is set: set admin_key, or ask Ollama itself")
        error.status = 403
        raise error
    if not matches(presented_key(request.scope), (ring.admin,)):
        raise Unauthorized("model management takes the admin key: send 'Authorization: Bearer <admin key>'")


PROTOCOL = ClientProtocol("ollama", ("/api/chat",), chat, ollama_api.error_body, areas=("/api/",), router=router)
