"""GET /metrics: Prometheus text of this app's registry, guarded like /sanctum/*."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sanctum_proxy.services import services
from sanctum_proxy.state.metrics import CONTENT_TYPE
from sanctum_proxy.web.auth import check_admin_key

router = APIRouter()


@router.get("/metrics", responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}})
async def metrics(request: Request) -> Response:
    check_admin_key(request)
    recorder = services(request).recorder
    # The trace writer thread feeds the counters: let it catch up.
    await asyncio.to_thread(recorder.flush, 2.0)
    return Response(recorder.metrics.render(), media_type=CONTENT_TYPE)
