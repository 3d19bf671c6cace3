"""GET /sanctum/status: the settings in force and the modes auto mode has settled on."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from ..auth import check_admin_key
from ..config import Settings
from ..responses import JsonResponse as ORJSONResponse
from ..shared import without_password

SECRET = ("upstream_api_key", "api_keys", "admin_key")


def check_admin(request: Request) -> None:
    """Who may read /sanctum/*: `admin_key` when set, else the client keys (auth.py)."""
    check_admin_key(request)


router = APIRouter()
guarded = [Depends(check_admin)]


@router.get("/sanctum/status", dependencies=guarded)
async def status(request: Request) -> ORJSONResponse:
    state = request.app.state
    return ORJSONResponse({"settings": shown_settings(state.settings), "modes": state.modes.snapshot(),
                           "capabilities": state.capabilities.snapshot(),
                           "upstreams": state.router.snapshot(), "shared_state": state.shared.snapshot()})


def shown_settings(settings: Settings) -> dict[str, Any]:
    """The settings with every key and password replaced by "***"."""
    shown = settings.model_dump()
    for key in SECRET:
        if shown.get(key):
            shown[key] = "***"
    for upstream in shown["upstreams"]:
        if upstream.get("api_key"):
            upstream["api_key"] = "***"
    if shown.get("redis_url"):
        shown["redis_url"] = without_password(shown["redis_url"])
    return shown
