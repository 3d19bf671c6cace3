"""GET /healthz (the proxy serves), GET /readyz (an upstream answers) and HEAD / (a pre-connect). None needs a key."""

from __future__ import annotations

from fastapi import APIRouter, Request

from sanctum_proxy.config import redacted_url
from sanctum_proxy.services import services
from sanctum_proxy.web.json_response import JsonResponse

router = APIRouter()


@router.get("/healthz")
async def healthz() -> JsonResponse:
    return JsonResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request) -> JsonResponse:
    """With `[[upstreams]]`: ready while any of them answers (one model server down must not take every
    replica out of the load balancer); the body says which answer."""
    pools = services(request).pools
    answers = await pools.ready()
    ready = any(answers.values())
    body: dict[str, object] = {"status": "ready" if ready else "upstream unavailable"}
    if pools.several:
        body["upstreams"] = answers
    else:
        body["upstream"] = redacted_url(services(request).settings.upstream)
    return JsonResponse(body, status_code=200 if ready else 503)
