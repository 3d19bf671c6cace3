"""GET /sanctum/status: the settings in force and the modes auto mode has settled on."""

from __future__ import annotations

from fastapi import APIRouter, Request
from ..responses import JsonResponse as ORJSONResponse

router = APIRouter()
SECRET = ("upstream_api_key", "api_keys")


@router.get("/sanctum/status")
async def status(request: Request) -> ORJSONResponse:
    settings = request.app.state.settings.model_dump()
    for key in SECRET:
        if settings.get(key):
            settings[key] = "***"
    return ORJSONResponse({"settings": settings, "modes": request.app.state.modes.snapshot(),
                           "capabilities": request.app.state.capabilities.snapshot()})
