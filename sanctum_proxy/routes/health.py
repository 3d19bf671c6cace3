"""GET /healthz (the proxy serves) and GET /readyz (the upstream answers)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from ..responses import JsonResponse as ORJSONResponse

router = APIRouter()


@router.get("/healthz")
async def healthz() -> ORJSONResponse:
    return ORJSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request) -> ORJSONResponse:
    ready = await request.app.state.upstream.ready()
    body = {"status": "ready" if ready else "upstream unavailable", "upstream": request.app.state.settings.upstream}
    return ORJSONResponse(body, status_code=200 if ready else 503)
