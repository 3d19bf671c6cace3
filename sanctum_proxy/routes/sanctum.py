"""/sanctum/*: the settings in force (status), auto mode's decisions forgotten, the recorded traces as JSON, and the
trace viewer page.

The JSON routes need the admin key; the viewer page and its files hold no data, so a browser opens them keyless.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from sanctum_proxy.config import Settings, redacted_url
from sanctum_proxy.core.omens import REQUEST_OUTCOMES
from sanctum_proxy.core.shapes import JSONObject
from sanctum_proxy.errors import InvalidRequest, NotFound
from sanctum_proxy.services import services
from sanctum_proxy.state.recorder import Recorder
from sanctum_proxy.state.replicated import without_password
from sanctum_proxy.state.trace_store import Query, UnknownCursor
from sanctum_proxy.web.auth import check_admin_key
from sanctum_proxy.web.json_response import JsonResponse

SECRET = ("upstream_api_key", "api_keys", "admin_key")
MAX_LIMIT = 200
STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}
# The viewer shows what models and clients wrote: nothing may run, load or be framed.
VIEWER_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def check_admin(request: Request) -> None:
    """`admin_key` only; open where no key is configured at all."""
    check_admin_key(request)


router = APIRouter()
guarded = [Depends(check_admin)]
# /openapi.json's account of the answers that are not JSON.
ERROR: JSONObject = {"description": "OpenAI-shaped error", "content": {"application/json": {}}}
HTML: dict[int | str, JSONObject] = {200: {"content": {"text/html": {}}, "description": "The trace viewer"}}
FILES: dict[int | str, JSONObject] = {
    200: {"content": {t.split(";")[0]: {} for t in STATIC.values()}, "description": "A viewer file"},
    404: ERROR,
}


@router.get("/sanctum/status", dependencies=guarded)
async def status(request: Request) -> JsonResponse:
    state = services(request)
    return JsonResponse({"settings": shown_settings(state.settings), "modes": state.modes.snapshot(),
                           "capabilities": state.capabilities.snapshot(),
                           "upstreams": state.pools.snapshot(), "shared_state": state.shared.snapshot()})


@router.delete("/sanctum/modes", dependencies=guarded)
async def forget_modes(request: Request) -> JsonResponse:
    """Auto mode's decisions forgotten, on every replica: all, or those of `?upstream=` and `?model=`."""
    query = request.query_params
    cleared = services(request).modes.clear(query.get("upstream"), query.get("model"))
    return JsonResponse({"cleared": cleared, "modes": services(request).modes.snapshot()})


@router.delete("/sanctum/capabilities", dependencies=guarded)
async def forget_capabilities(request: Request) -> JsonResponse:
    """What probes and checks found, forgotten on every replica (asked again when next needed)."""
    query = request.query_params
    cleared = services(request).capabilities.clear(query.get("upstream"), query.get("model"))
    return JsonResponse({"cleared": cleared, "capabilities": services(request).capabilities.snapshot()})


def shown_settings(settings: Settings) -> JSONObject:
    """The settings with every key and password replaced by "***"."""
    shown = settings.model_dump()
    for key in SECRET:
        if shown.get(key):
            shown[key] = "***"
    shown["upstream"] = redacted_url(shown["upstream"])
    for upstream in shown["upstreams"]:
        if upstream.get("api_key"):
            upstream["api_key"] = "***"
        upstream["urls"] = [redacted_url(url) for url in upstream.get("urls") or ()]
    if shown.get("redis_url"):
        shown["redis_url"] = without_password(shown["redis_url"])
    return shown


@router.get("/sanctum/traces", dependencies=guarded)
async def traces(request: Request) -> JsonResponse:
    """Summaries, newest first, filtered by outcome, model and since, paged by limit and after."""
    query = parse_query(request.query_params)
    recorder = services(request).recorder
    try:
        data, more = await asyncio.to_thread(_listed, recorder, query)
    except UnknownCursor as exc:
        raise InvalidRequest(f"no trace with id {query.after!r} to page after", param="after") from exc
    return JsonResponse({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                           "last_id": data[-1]["id"] if data else None, "has_more": more})


@router.get("/sanctum/traces/{trace_id}", dependencies=guarded, responses={404: ERROR})
async def trace(request: Request, trace_id: str) -> JsonResponse:
    recorder = services(request).recorder
    doc = await asyncio.to_thread(_got, recorder, trace_id)
    if doc is None:
        raise NotFound(f"no trace with id {trace_id!r} (never recorded, or past retention)", param="trace_id")
    return JsonResponse(doc)


@router.get("/sanctum/", responses=HTML)
@router.get("/sanctum", responses=HTML)
async def viewer() -> Response:
    return Response(_static("viewer.html"), media_type="text/html; charset=utf-8", headers=VIEWER_HEADERS)


@router.get("/sanctum/static/{name}", responses=FILES)
async def static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no file {name!r}")
    return Response(_static(name), media_type=STATIC[name], headers=VIEWER_HEADERS)


def _static(name: str) -> bytes:
    return (resources.files("sanctum_proxy") / "static" / name).read_bytes()


def _listed(recorder: Recorder, query: Query) -> tuple[list[JSONObject], bool]:
    recorder.flush()
    return recorder.store.list(query) if recorder.store is not None else ([], False)


def _got(recorder: Recorder, trace_id: str) -> JSONObject | None:
    recorder.flush()
    return recorder.store.get(trace_id) if recorder.store is not None else None


def parse_query(params: Any) -> Query:
    outcome = params.get("outcome") or None
    if outcome is not None and outcome not in REQUEST_OUTCOMES:
        raise InvalidRequest(f"outcome must be one of {', '.join(REQUEST_OUTCOMES)}, got {outcome!r}",
                             param="outcome")
    limit = params.get("limit") or "50"
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= MAX_LIMIT:  # int() takes '²' too
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}", param="limit")
    return Query(outcome=outcome, model=params.get("model") or None, since=_since(params.get("since")),
                 limit=int(limit), after=params.get("after") or None)


def _since(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"since must be unix seconds or an ISO 8601 time, got {value!r}",
                             param="since") from None
    if moment.tzinfo is None:
        raise InvalidRequest(f"since needs a time zone (e.g. Z), got {value!r}", param="since")
    return moment.timestamp()
